// A share group member (KIP-932) on Kafka's own KafkaShareConsumer, the reference peer of the share interop tests.
// Prints JSON lines, one per event:
//   {"ev":"subscribing","t":ms}                                  once the JVM is up
//   {"ev":"record","p":partition,"o":offset,"n":delivery_count}  one per record delivered to it
//   {"ev":"ack","p":partition,"offsets":[...],"error":null|"..."} one per acknowledgement outcome (the commit
//                                                                 callback; error null: they took effect)
//   {"ev":"commit","p":partition,"error":null|"..."}              one per partition of a commitSync() result
//   {"ev":"error","error":"..."}                                  poll() or commitSync() threw (it goes on)
//   {"ev":"closed"}                                               after close()
// and exits after close() on SIGTERM or SIGINT, or once its limit is reached.
//   java -cp <peer dir>:<kafka libs>/* JavaShareMember BOOTSTRAP GROUP TOPIC LIMIT implicit|explicit [MAX_POLL_RECORDS [ACQUIRE_MODE]]
// LIMIT: "forever" (until a signal), "ms:N" (run N ms) or "records:N" (stop after the poll() that brought the
// records delivered to N or more).
// implicit: what a poll() returned is accepted by the next poll() (or commitSync(), close());
// explicit: each record is acknowledged ACCEPT, then commitSync() sends them and prints its result.
// ACQUIRE_MODE: share.acquire.mode, batch_optimized (the default) or record_limit.
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class JavaShareMember {
    private static synchronized void out(String json) {
        System.out.println(json);
        System.out.flush();
    }

    private static String quote(Throwable e) {
        if (e == null) return "null";
        String text = e.getClass().getSimpleName() + ": " + e.getMessage();
        StringBuilder b = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(' ');
            else b.append(c);
        }
        return b.append('"').toString();
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 5) {
            System.err.println("usage: JavaShareMember BOOTSTRAP GROUP TOPIC forever|ms:N|records:N implicit|explicit "
                               + "[MAX_POLL_RECORDS [batch_optimized|record_limit]]");
            System.exit(2);
        }
        String bootstrap = args[0], group = args[1], topic = args[2], limit = args[3], mode = args[4];
        boolean explicit = mode.equals("explicit");
        if (!explicit && !mode.equals("implicit")) throw new IllegalArgumentException("mode: implicit or explicit");
        long stopAt = Long.MAX_VALUE, maxRecords = Long.MAX_VALUE;
        if (limit.startsWith("ms:")) stopAt = System.currentTimeMillis() + Long.parseLong(limit.substring(3));
        else if (limit.startsWith("records:")) maxRecords = Long.parseLong(limit.substring(8));
        else if (!limit.equals("forever")) throw new IllegalArgumentException("limit: forever, ms:N or records:N");

        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("client.id", "java-share-member");
        p.put("share.acknowledgement.mode", mode);
        if (args.length > 5) p.put("max.poll.records", args[5]);
        if (args.length > 6) p.put("share.acquire.mode", args[6]);
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(p);
        // on the application thread, from poll(), commitSync() or close(): the broker's answer to acknowledgements
        consumer.setAcknowledgementCommitCallback((Map<TopicIdPartition, Set<Long>> offsets, Exception error) -> {
            for (Map.Entry<TopicIdPartition, Set<Long>> e : offsets.entrySet()) {
                List<Long> sorted = new ArrayList<>(e.getValue());
                sorted.sort(null);
                out("{\"ev\":\"ack\",\"p\":" + e.getKey().partition() + ",\"offsets\":" + sorted.toString().replace(" ", "")
                    + ",\"error\":" + quote(error) + "}");
            }
        });

        AtomicBoolean stopping = new AtomicBoolean(false);
        CountDownLatch closed = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stopping.set(true);
            consumer.wakeup();
            try {
                closed.await();
            } catch (InterruptedException ignored) {
            }
        }));
        out("{\"ev\":\"subscribing\",\"t\":" + System.currentTimeMillis() + "}");
        consumer.subscribe(List.of(topic));
        long delivered = 0;
        try {
            while (!stopping.get() && delivered < maxRecords && System.currentTimeMillis() < stopAt) {
                ConsumerRecords<byte[], byte[]> records;
                try {
                    records = consumer.poll(Duration.ofMillis(100));
                } catch (WakeupException e) {
                    throw e;
                } catch (KafkaException e) {
                    out("{\"ev\":\"error\",\"error\":" + quote(e) + "}");
                    continue;
                }
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    delivered++;
                    out("{\"ev\":\"record\",\"p\":" + r.partition() + ",\"o\":" + r.offset() + ",\"n\":"
                        + r.deliveryCount().map(String::valueOf).orElse("null") + "}");
                    if (explicit) consumer.acknowledge(r, AcknowledgeType.ACCEPT);
                }
                if (explicit && !records.isEmpty()) commit(consumer);
            }
            if (!explicit) commit(consumer);  // what the last poll() returned, accepted before leaving
        } catch (WakeupException expected) {
            // stopping: fall through to close(), which sends what is still to be sent
        } finally {
            try {
                consumer.close();
            } catch (KafkaException e) {
                out("{\"ev\":\"error\",\"error\":" + quote(e) + "}");
            }
            out("{\"ev\":\"closed\"}");
            closed.countDown();
        }
    }

    private static void commit(KafkaShareConsumer<byte[], byte[]> consumer) {
        try {
            for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : consumer.commitSync().entrySet()) {
                out("{\"ev\":\"commit\",\"p\":" + e.getKey().partition() + ",\"error\":" + quote(e.getValue().orElse(null))
                    + "}");
            }
        } catch (WakeupException e) {
            throw e;
        } catch (KafkaException e) {
            out("{\"ev\":\"error\",\"error\":" + quote(e) + "}");
        }
    }
}
