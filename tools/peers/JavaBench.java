// Kafka's Java consumer reading a whole topic, timed as tools/bench times the Python clients
// (tools/benchlib/consume.py): assign every partition from the start, poll at most 10,000 records per
// call until EXPECT came, and print one JSON line: records, rate_records (after the first batch),
// first_s, span_s, total_s, cpu_s (the JVM's CPU from before the consumer was made), baseline and peak RSS.
//   java -cp <peer dir>:<kafka libs>/* JavaBench BOOTSTRAP TOPIC PARTITIONS EXPECT
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class JavaBench {
    private static double statusMb(String field) throws Exception {
        for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
            if (line.startsWith(field + ":")) return Long.parseLong(line.split("\\s+")[1]) / 1024.0;
        }
        return 0.0;
    }

    private static long cpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime();
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        long expect = Long.parseLong(args[3]);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        p.put("max.poll.records", "10000");  // the harness's BATCH: no client takes more per call
        double baseline = statusMb("VmRSS");
        long cpu0 = cpuNanos();
        long t0 = System.nanoTime();
        long got = 0, firstN = 0, first = -1;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int i = 0; i < partitions; i++) tps.add(new TopicPartition(topic, i));
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            long deadline = t0 + 300_000_000_000L;
            while (got < expect && System.nanoTime() < deadline) {
                int n = consumer.poll(Duration.ofMillis(1000)).count();
                if (n > 0 && first < 0) {
                    first = System.nanoTime();
                    firstN = n;
                }
                got += n;
            }
            long last = System.nanoTime();
            if (first < 0) first = last;
            System.out.printf(java.util.Locale.ROOT,
                "{\"records\":%d,\"rate_records\":%d,\"first_s\":%.6f,\"span_s\":%.6f,\"total_s\":%.6f,"
                + "\"cpu_s\":%.6f,\"baseline_rss_mb\":%.1f,\"peak_rss_mb\":%.1f}%n",
                got, got - firstN, (first - t0) / 1e9, Math.max(last - first, 1) / 1e9, (last - t0) / 1e9,
                (cpuNanos() - cpu0) / 1e9, baseline, statusMb("VmHWM"));
        }
    }
}
