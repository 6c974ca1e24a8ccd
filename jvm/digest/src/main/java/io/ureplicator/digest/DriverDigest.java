package io.ureplicator.digest;

import java.net.URLDecoder;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;

/**
 * Pass 1 of small ranges in the calling JVM (the Spark driver), without a Spark job.
 *
 * <p>An incremental run after a little new data reads a few thousand records per side; scheduling a Spark
 * job for them costs ten times more than reading them. This reads each plan (the options a
 * {@link DigestSource} read would get, one side of one topic) with one plain consumer for all its
 * partitions, feeds every record to the same {@link DigestReader} aggregation the Spark source uses (so the
 * rows are the same, bit for bit), and runs the plans on a few threads at once. verifier/digest.py calls
 * {@link #rows} through py4j and decides when a range is small enough. The consumers are kept between calls
 * (per consumer settings, at most as many as threads): a warm verifier's next run reuses their connections
 * and metadata instead of paying a new consumer's start per side and run.
 */
public final class DriverDigest {
    private static final int MAX_THREADS = 8;
    private static final Map<Map<String, Object>, Deque<KafkaConsumer<ByteBuffer, ByteBuffer>>> IDLE =
        new HashMap<>();

    private DriverDigest() {}

    /**
     * The pass-1 rows of every plan. {@code plans}: one plan a line, each {@code key=value} pairs joined by
     * {@code &}, keys and values URL-encoded (one string: py4j sends it in one call). Each plan's chunks must
     * name distinct partitions. The result: one row a line, {@code plan index} then DigestSource.SCHEMA's
     * columns, comma-separated, a null as an empty field.
     */
    public static String rows(String plans) throws Exception {
        List<DigestSource.Plan> parsed = new ArrayList<>();
        for (String line : plans.split("\n")) {
            if (!line.isEmpty()) {
                parsed.add(DigestSource.Plan.parse(options(line)));
            }
        }
        if (parsed.isEmpty()) {
            return "";
        }
        ExecutorService pool = Executors.newFixedThreadPool(Math.min(MAX_THREADS, parsed.size()), runnable -> {
            Thread thread = new Thread(runnable, "ureplicator-driver-digest");
            thread.setDaemon(true);
            return thread;
        });
        try {
            List<Future<List<Object[]>>> futures = new ArrayList<>();
            for (DigestSource.Plan plan : parsed) {
                futures.add(pool.submit(() -> read(plan, plan.chunks, true)));
            }
            StringBuilder out = new StringBuilder();
            for (int i = 0; i < futures.size(); i++) {
                for (Object[] row : futures.get(i).get()) {
                    out.append(i);
                    for (Object value : row) {
                        out.append(',');
                        if (value != null) {
                            out.append(value);
                        }
                    }
                    out.append('\n');
                }
            }
            return out.toString();
        } finally {
            pool.shutdownNow();
        }
    }

    private static KafkaConsumer<ByteBuffer, ByteBuffer> borrow(Map<String, Object> config) {
        synchronized (IDLE) {
            Deque<KafkaConsumer<ByteBuffer, ByteBuffer>> idle = IDLE.get(config);
            if (idle != null && !idle.isEmpty()) {
                return idle.pop();
            }
        }
        return new KafkaConsumer<>(config);
    }

    private static void giveBack(Map<String, Object> config, KafkaConsumer<ByteBuffer, ByteBuffer> consumer) {
        consumer.unsubscribe();  // no assignment, nothing paused: the next read starts clean
        synchronized (IDLE) {
            Deque<KafkaConsumer<ByteBuffer, ByteBuffer>> idle = IDLE.computeIfAbsent(config, k -> new ArrayDeque<>());
            if (idle.size() < MAX_THREADS) {
                idle.push(consumer);
                return;
            }
        }
        consumer.close();
    }

    static Map<String, String> options(String line) {
        Map<String, String> options = new HashMap<>();
        for (String pair : line.split("&")) {
            int eq = pair.indexOf('=');
            if (eq > 0) {
                options.put(URLDecoder.decode(pair.substring(0, eq), StandardCharsets.UTF_8),
                            URLDecoder.decode(pair.substring(eq + 1), StandardCharsets.UTF_8));
            }
        }
        return options;
    }

    /**
     * Chunks of distinct partitions of one plan with one consumer: each partition read from its start until it
     * reaches its end, and aggregated by its own DigestReader (so the rows are those of one task per chunk).
     */
    static List<Object[]> read(DigestSource.Plan plan, List<DigestSource.Chunk> chunks, boolean keep) {
        Map<TopicPartition, DigestReader> readers = new HashMap<>();
        Map<TopicPartition, Long> ends = new HashMap<>();
        Map<TopicPartition, Long> starts = new HashMap<>();
        for (DigestSource.Chunk chunk : chunks) {
            TopicPartition tp = new TopicPartition(plan.topic, chunk.partition());
            if (readers.put(tp, new DigestReader(plan, chunk)) != null) {
                throw new IllegalArgumentException("ureplicator-digest: two driver chunks of " + tp);
            }
            starts.put(tp, chunk.start());
            ends.put(tp, chunk.end());
        }
        Set<TopicPartition> open = new HashSet<>();
        for (TopicPartition tp : readers.keySet()) {
            if (ends.get(tp) > starts.get(tp)) {
                open.add(tp);
            }
        }
        if (!open.isEmpty()) {
            Map<String, Object> config = DigestReader.consumerConfig(plan);
            KafkaConsumer<ByteBuffer, ByteBuffer> consumer = keep ? borrow(config) : new KafkaConsumer<>(config);
            boolean clean = false;
            try {
                consumer.assign(open);
                for (TopicPartition tp : open) {
                    consumer.seek(tp, starts.get(tp));
                }
                long idleSince = System.currentTimeMillis();
                while (!open.isEmpty()) {
                    ConsumerRecords<ByteBuffer, ByteBuffer> batch = consumer.poll(Duration.ofMillis(200));
                    if (batch.isEmpty()) {
                        if (System.currentTimeMillis() - idleSince > plan.pollTimeoutMs) {
                            throw new IllegalStateException("ureplicator-digest: no records from " + open
                                + " for " + plan.pollTimeoutMs + " ms");
                        }
                    } else {
                        idleSince = System.currentTimeMillis();
                        for (TopicPartition tp : batch.partitions()) {
                            DigestReader reader = readers.get(tp);
                            for (ConsumerRecord<ByteBuffer, ByteBuffer> r : batch.records(tp)) {
                                reader.add(r);
                            }
                        }
                    }
                    // As the Spark reader: a partition is done when the consumer's position reaches its end
                    // (read_committed skips aborted records and markers past it).
                    List<TopicPartition> done = new ArrayList<>();
                    for (TopicPartition tp : open) {
                        if (consumer.position(tp) >= ends.get(tp)) {
                            done.add(tp);
                        }
                    }
                    if (!done.isEmpty()) {
                        done.forEach(open::remove);
                        consumer.pause(done);
                    }
                }
                clean = true;
            } finally {
                if (keep && clean) {
                    giveBack(config, consumer);
                } else {
                    consumer.close();
                }
            }
        }
        List<Object[]> rows = new ArrayList<>();
        for (DigestReader reader : readers.values()) {
            for (DigestReader.Aggregate a : reader.aggregates()) {
                rows.add(reader.values(a));
            }
        }
        return rows;
    }
}
