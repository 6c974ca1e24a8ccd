/*
 * The Java side of bench.ack_latency: produce -> acknowledgement latency at a fixed rate.
 *
 * usage: java -cp <kafka-clients and its dependencies>:<this class> AckLatency
 *            BOOTSTRAP TOPIC RATE SECONDS WARMUP_S PARTITIONS LINGER_MS
 *
 * The same schedule, record size and producer settings as ack_latency.c (acks=all, idempotence,
 * lz4, batch.size 1000000, 5 requests in flight); the callback runs on the producer's I/O thread as
 * the response is read, so a record is timed when the client learns of its acknowledgement.
 * Prints one JSON line: the counted records' percentiles and the client's count of requests sent.
 */
import java.util.Arrays;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class AckLatency {
    private AckLatency() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 7) {
            System.err.println("usage: AckLatency BOOTSTRAP TOPIC RATE SECONDS WARMUP_S PARTITIONS LINGER_MS");
            System.exit(2);
        }
        String topic = args[1];
        long rate = Long.parseLong(args[2]);
        double seconds = Double.parseDouble(args[3]), warmup = Double.parseDouble(args[4]);
        int partitions = Integer.parseInt(args[5]);
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("acks", "all");
        props.put("enable.idempotence", "true");
        props.put("linger.ms", args[6]);
        props.put("compression.type", "lz4");
        props.put("batch.size", "1000000");
        props.put("max.in.flight.requests.per.connection", "5");
        long total = (long) (rate * (seconds + warmup));
        long[] latency = new long[(int) total];
        int[] counted = {0};
        long[] failed = {0};
        byte[] value = new byte[100];
        Arrays.fill(value, (byte) 'x');
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer())) {
            // One record first, so the connection and the producer id exist before the clock starts.
            producer.send(new ProducerRecord<>(topic, 0, null, value)).get();
            long start = System.nanoTime();
            long warmupNs = (long) (warmup * 1e9);
            for (long n = 0; n < total;) {
                long due = start + (long) (n * 1e9 / rate), wait = due - System.nanoTime();
                if (wait > 0) {
                    Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                }
                long owed = (long) ((System.nanoTime() - start) * rate / 1e9) + 1;
                for (; n < owed && n < total; n++) {
                    long created = System.nanoTime();
                    boolean counts = created - start >= warmupNs;
                    producer.send(new ProducerRecord<>(topic, (int) (n % partitions), null, value), (meta, error) -> {
                        synchronized (counted) {
                            if (error != null) {
                                failed[0]++;
                            } else if (counts) {
                                latency[counted[0]++] = System.nanoTime() - created;
                            }
                        }
                    });
                }
            }
            double producedS = (System.nanoTime() - start) / 1e9;
            producer.flush();
            double requests = 0;
            for (Map.Entry<MetricName, ? extends Metric> metric : producer.metrics().entrySet()) {
                MetricName name = metric.getKey();
                if (name.group().equals("producer-metrics") && name.name().equals("request-total")) {
                    requests = ((Number) metric.getValue().metricValue()).doubleValue();
                }
            }
            long[] sorted;
            synchronized (counted) {
                sorted = Arrays.copyOf(latency, counted[0]);
            }
            Arrays.sort(sorted);
            System.out.printf(java.util.Locale.ROOT,
                "{\"reports\": %d, \"failed\": %d, \"produced_s\": %.3f, \"p50_ms\": %.3f, \"p90_ms\": %.3f, "
                    + "\"p99_ms\": %.3f, \"max_ms\": %.3f, \"requests\": %.0f}%n",
                sorted.length, failed[0], producedS, quantile(sorted, 0.5), quantile(sorted, 0.9),
                quantile(sorted, 0.99), quantile(sorted, 1.0), requests);
            if (failed[0] > 0) {
                System.exit(1);
            }
        }
    }

    private static double quantile(long[] sorted, double q) {
        return sorted.length == 0 ? 0.0 : sorted[(int) (q * (sorted.length - 1))] / 1e6;
    }
}
