// One share group member (KIP-932) on Kafka's KafkaShareConsumer for tools/bench share (tools/benchlib/share.py):
// subscribes, prints {"ev":"ready"}, then polls; per record it sleeps WORK_MS (the simulated work), acknowledges
// ACCEPT in explicit mode (the next poll() sends them), and prints one line per poll() that brought records:
//   {"ev":"p","t":wall ms after the last record's work,"o":[[first,last],...],"lat":[ms,...]}
// "o": the offsets processed, as ranges; "lat" (LATENCY 1 only): per record, wall ms at the end of its work
// minus its CreateTime. A line "stop" or the end of stdin closes the consumer; then {"ev":"closed"}.
//   java -cp <peer dir>:<kafka libs>/* JavaShareBench BOOTSTRAP GROUP TOPIC implicit|explicit WORK_MS
//       MAX_POLL_RECORDS batch_optimized|record_limit LATENCY(0|1)
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class JavaShareBench {
    private static synchronized void out(String json) {
        System.out.println(json);
        System.out.flush();
    }

    private static void range(StringBuilder ranges, long first, long last) {
        if (ranges.length() > 0) ranges.append(',');
        ranges.append('[').append(first).append(',').append(last).append(']');
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], group = args[1], topic = args[2], mode = args[3];
        long workMs = Long.parseLong(args[4]);
        boolean explicit = mode.equals("explicit"), latency = args[7].equals("1");
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("client.id", "java-share-bench");
        p.put("share.acknowledgement.mode", mode);
        p.put("max.poll.records", args[5]);
        p.put("share.acquire.mode", args[6]);
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(p);

        AtomicBoolean stopping = new AtomicBoolean(false);
        Thread stdin = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null && !line.trim().equals("stop")) {
                    // nothing else is said
                }
            } catch (Exception ignored) {
                // the end of stdin: stop as on "stop"
            }
            stopping.set(true);
            consumer.wakeup();
        });
        stdin.setDaemon(true);
        stdin.start();

        consumer.subscribe(List.of(topic));  // the member joins at its first poll()
        out("{\"ev\":\"ready\"}");
        try {
            while (!stopping.get()) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(100));
                if (records.isEmpty()) continue;
                StringBuilder ranges = new StringBuilder(), lats = new StringBuilder();
                long first = -1, last = -2;
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    if (workMs > 0) Thread.sleep(workMs);
                    if (latency) {
                        if (lats.length() > 0) lats.append(',');
                        lats.append(System.currentTimeMillis() - r.timestamp());
                    }
                    if (explicit) consumer.acknowledge(r, AcknowledgeType.ACCEPT);
                    if (r.offset() != last + 1) {
                        if (first >= 0) range(ranges, first, last);
                        first = r.offset();
                    }
                    last = r.offset();
                }
                range(ranges, first, last);
                out("{\"ev\":\"p\",\"t\":" + System.currentTimeMillis() + ",\"o\":[" + ranges + "]"
                    + (latency ? ",\"lat\":[" + lats + "]" : "") + "}");
            }
        } catch (WakeupException | InterruptedException expected) {
            // "stop": close() below sends what is still to be acknowledged and leaves the group
        } finally {
            consumer.close();
            out("{\"ev\":\"closed\"}");
        }
    }
}
