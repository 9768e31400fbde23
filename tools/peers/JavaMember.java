// A group member on Kafka's own Java consumer, the reference peer of the interop tests: the classic protocol
// with the range or cooperative-sticky assignor, or the consumer protocol (KIP-848) with "consumer" (the
// broker's assignor) or "consumer:uniform" / "consumer:range" (group.remote.assignor).
// Prints JSON lines: {"ev":"assigned"|"revoked"|"lost","parts":[...],"t":ms} and
// {"ev":"records","p":partition,"offsets":[...]}, after {"ev":"subscribing","t":ms} once the JVM is up;
// exits on SIGTERM or SIGINT after close().
//   java -cp <peer dir>:<kafka libs>/* JavaMember BOOTSTRAP GROUP TOPIC range|cooperative-sticky|consumer[:ASSIGNOR] [SESSION_MS HEARTBEAT_MS]
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class JavaMember {
    private static synchronized void out(String json) {
        System.out.println(json);
        System.out.flush();
    }

    private static String parts(Collection<TopicPartition> tps) {
        List<Integer> ps = new ArrayList<>();
        for (TopicPartition tp : tps) ps.add(tp.partition());
        ps.sort(null);
        return ps.toString().replace(" ", "");
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], group = args[1], topic = args[2], strategy = args[3];
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("client.id", "java-member");
        if (strategy.startsWith("consumer")) {
            // the broker assigns, paces heartbeats and times sessions: the classic settings are refused
            p.put("group.protocol", "consumer");
            if (strategy.contains(":")) p.put("group.remote.assignor", strategy.substring(strategy.indexOf(':') + 1));
        } else {
            p.put("group.protocol", "classic");
            p.put("partition.assignment.strategy",
                  strategy.equals("range") ? RangeAssignor.class.getName() : CooperativeStickyAssignor.class.getName());
            p.put("session.timeout.ms", args.length > 4 ? args[4] : "10000");
            p.put("heartbeat.interval.ms", args.length > 5 ? args[5] : "1000");
        }
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("auto.offset.reset", "earliest");
        p.put("auto.commit.interval.ms", "200");
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p);
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
        consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
            public void onPartitionsAssigned(Collection<TopicPartition> tps) {
                out("{\"ev\":\"assigned\",\"parts\":" + parts(tps) + ",\"t\":" + System.currentTimeMillis() + "}");
            }

            public void onPartitionsRevoked(Collection<TopicPartition> tps) {
                out("{\"ev\":\"revoked\",\"parts\":" + parts(tps) + ",\"t\":" + System.currentTimeMillis() + "}");
            }

            public void onPartitionsLost(Collection<TopicPartition> tps) {
                out("{\"ev\":\"lost\",\"parts\":" + parts(tps) + ",\"t\":" + System.currentTimeMillis() + "}");
            }
        });
        try {
            while (!stopping.get()) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(100));
                for (TopicPartition tp : records.partitions()) {
                    StringBuilder offsets = new StringBuilder();
                    for (ConsumerRecord<byte[], byte[]> r : records.records(tp)) {
                        if (offsets.length() > 0) offsets.append(',');
                        offsets.append(r.offset());
                    }
                    out("{\"ev\":\"records\",\"p\":" + tp.partition() + ",\"offsets\":[" + offsets + "]}");
                }
            }
        } catch (WakeupException expected) {
            // stopping: fall through to close()
        } finally {
            consumer.close();
            out("{\"ev\":\"closed\"}");
            closed.countDown();
        }
    }
}
