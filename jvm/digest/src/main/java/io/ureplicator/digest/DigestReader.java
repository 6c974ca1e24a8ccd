package io.ureplicator.digest;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteBufferDeserializer;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.read.PartitionReader;

/**
 * Reads one offset range and aggregates it per (class, bucket) before Spark sees anything.
 *
 * <p>Classes are verifier/route.py's: the same rules as verifier/kafka_source.py's SQL, in the same order, so that both
 * readers produce the same pass-1 rows.
 */
final class DigestReader implements PartitionReader<InternalRow> {
    // verifier/route.py record classes.
    static final int VERIFIED = 0;
    static final int PENDING = 1;
    static final int SKIPPED = 2;
    static final int EXPIRED = 3;
    static final int OLD = 4;
    static final int FOREIGN = 5;
    // One row per destination chunk: whether its attributed copies' source offsets rise strictly in
    // destination order (xor 1) and their first and last source offset; bucket is the chunk's start.
    static final int ORDER = 6;
    static final int UNREADABLE = 10;
    static final int OTHER_PARTITION = 11;
    static final int NO_SOURCE_PARTITION = 12;
    static final int BEYOND_END = 13;

    private final DigestSource.Plan plan;
    private final DigestSource.Chunk chunk;
    private final boolean source;
    private final Map<Long, Aggregate> groups = new HashMap<>();
    private long lastKey = Long.MIN_VALUE;
    private Aggregate last;
    private Iterator<Aggregate> rows;
    private InternalRow current;
    // The order proof of this chunk (destination side): attributed copies seen, the last source offset.
    private long orderCount;
    private long orderFirst;
    private long orderLast = Long.MIN_VALUE;
    private boolean ascending = true;

    DigestReader(DigestSource.Plan plan, DigestSource.Chunk chunk) {
        this.plan = plan;
        this.chunk = chunk;
        this.source = plan.side.equals("source");
    }

    /** count, the sum of the bucket hashes in two halves, their xor, offset bounds; nulls as flags. */
    static final class Aggregate {
        final int cls;
        final long bucket;
        long n;
        long high;
        long low;
        long xor;
        long first = Long.MAX_VALUE;
        long last = Long.MIN_VALUE;
        boolean bounded;
        long firstDo = Long.MAX_VALUE;
        long deltaMin = Long.MAX_VALUE;
        long deltaMax = Long.MIN_VALUE;
        boolean hasDelta;

        Aggregate(int cls, long bucket) {
            this.cls = cls;
            this.bucket = bucket;
        }

        void add(long bucketHash) {
            n++;
            high += bucketHash >> 32;
            low += bucketHash & 0xFFFFFFFFL;
            xor ^= bucketHash;
        }

        void bound(long offset) {
            bounded = true;
            first = Math.min(first, offset);
            last = Math.max(last, offset);
        }
    }

    private Aggregate group(int cls, long bucket) {
        long key = (bucket << 4) | cls;
        if (key != lastKey || last == null) {
            last = groups.computeIfAbsent(key, k -> new Aggregate(cls, bucket));
            lastKey = key;
        }
        return last;
    }

    @Override
    public boolean next() {
        if (rows == null) {
            read();
            rows = aggregates().iterator();
        }
        if (!rows.hasNext()) {
            return false;
        }
        current = new GenericInternalRow(values(rows.next()));
        return true;
    }

    /** This chunk's aggregates once every record was added: one per (class, bucket), and the order row. */
    List<Aggregate> aggregates() {
        if (!source && orderCount > 0) {
            Aggregate order = group(ORDER, chunk.start());
            order.n = orderCount;
            order.xor = ascending ? 1L : 0L;
            order.bound(orderFirst);
            order.bound(orderLast);
        }
        return new ArrayList<>(groups.values());
    }

    /** One aggregate as the schema's columns (DigestSource.SCHEMA); a bound or delta never seen is null. */
    Object[] values(Aggregate a) {
        boolean dst = !source;
        return new Object[] {
            chunk.partition(), a.cls, a.bucket, a.n, a.high, a.low, a.xor,
            a.bounded ? a.first : null, a.bounded ? a.last : null,
            dst ? a.firstDo : null,
            a.hasDelta ? a.deltaMin : null, a.hasDelta ? a.deltaMax : null,
        };
    }

    @Override
    public InternalRow get() {
        return current;
    }

    @Override
    public void close() {}

    private void read() {
        if (chunk.end() <= chunk.start()) {
            return;
        }
        TopicPartition tp = new TopicPartition(plan.topic, chunk.partition());
        try (KafkaConsumer<ByteBuffer, ByteBuffer> consumer = new KafkaConsumer<>(consumerConfig(plan))) {
            consumer.assign(List.of(tp));
            consumer.seek(tp, chunk.start());
            long idleSince = System.currentTimeMillis();
            while (consumer.position(tp) < chunk.end()) {
                List<ConsumerRecord<ByteBuffer, ByteBuffer>> batch = consumer.poll(Duration.ofMillis(200)).records(tp);
                if (batch.isEmpty()) {
                    if (System.currentTimeMillis() - idleSince > plan.pollTimeoutMs) {
                        throw new IllegalStateException("ureplicator-digest: no records from " + tp + " at offset "
                            + consumer.position(tp) + " for " + plan.pollTimeoutMs + " ms (reading up to "
                            + chunk.end() + ")");
                    }
                    continue;
                }
                idleSince = System.currentTimeMillis();
                for (ConsumerRecord<ByteBuffer, ByteBuffer> r : batch) {
                    if (r.offset() >= chunk.end()) {
                        return;
                    }
                    add(r);
                }
            }
        }
    }

    /** The plain consumer's settings for reading committed ranges (the plan's {@code kafka.*} options and ours). */
    static Map<String, Object> consumerConfig(DigestSource.Plan plan) {
        Map<String, Object> config = new HashMap<>(plan.consumer);
        config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteBufferDeserializer.class.getName());
        config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteBufferDeserializer.class.getName());
        config.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        config.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        // Offsets below the log start are gone (retention): start at the log start, as Spark's source
        // does with failOnDataLoss=false; the driver notices a moved log start and verifies again.
        config.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        config.remove(ConsumerConfig.GROUP_ID_CONFIG);
        return config;
    }

    /** Aggregate one record of this chunk's partition; offsets outside [start, end) are not this chunk's. */
    void add(ConsumerRecord<ByteBuffer, ByteBuffer> r) {
        if (r.offset() < chunk.start() || r.offset() >= chunk.end()) {
            return;
        }
        if (source) {
            addSource(r);
        } else {
            addDestination(r);
        }
    }

    private void addSource(ConsumerRecord<ByteBuffer, ByteBuffer> r) {
        long o = r.offset();
        int p = chunk.partition();
        int cls;
        boolean rule = plan.skipOrigin != null || plan.keepOrigin != null;
        byte[] urep = rule ? RecordDigest.lastUrep(r.headers()) : null;
        boolean readable = urep != null && RecordDigest.valid(urep);
        long verifyTo = DigestSource.Plan.at(plan.verifyTo, p);
        if (readable && (plan.keepOrigin != null ? !RecordDigest.originIs(urep, plan.keepOrigin)
                                                 : RecordDigest.originIs(urep, plan.skipOrigin))) {
            cls = SKIPPED;
        } else if (verifyTo != DigestSource.Plan.ABSENT && o < verifyTo) {
            cls = VERIFIED;
        } else {
            cls = PENDING;
        }
        long h = RecordDigest.contentHash(r.key(), r.value(), r.timestamp(), r.headers());
        Aggregate a = group(cls, o / plan.bucketSize);
        a.add(RecordDigest.bucketHash(h, o));
        a.bound(o);
    }

    private void addDestination(ConsumerRecord<ByteBuffer, ByteBuffer> r) {
        long d = r.offset();
        int dp = chunk.partition();
        byte[] urep = RecordDigest.onlyUrep(r.headers());
        boolean valid = RecordDigest.valid(urep);
        long so = valid ? RecordDigest.sourceOffset(urep) : 0L;
        long end = DigestSource.Plan.at(plan.end, dp);
        int cls;
        if (plan.hopSource != null && (valid ? RecordDigest.otherHop(urep, plan.hopSource)
                                              : r.headers().lastHeader(RecordDigest.HEADER) == null)) {
            cls = FOREIGN;
        } else if (!valid || so < 0) {
            cls = UNREADABLE;
        } else if (RecordDigest.sourcePartition(urep) != dp) {
            cls = OTHER_PARTITION;
        } else if (end == DigestSource.Plan.ABSENT) {
            cls = NO_SOURCE_PARTITION;
        } else if (so >= end) {
            cls = BEYOND_END;
        } else if (so < DigestSource.Plan.at(plan.logStart, dp)) {
            cls = EXPIRED;
        } else if (so < DigestSource.Plan.at(plan.verifyFrom, dp)) {
            cls = OLD;
        } else if (so >= DigestSource.Plan.at(plan.verifyTo, dp)) {
            cls = PENDING;
        } else {
            cls = VERIFIED;
        }
        long h = RecordDigest.contentHash(r.key(), r.value(), r.timestamp(), r.headers());
        long bucket = cls == VERIFIED || cls == OLD ? so / plan.bucketSize : -1L;
        Aggregate a = group(cls, bucket);
        a.add(valid ? RecordDigest.bucketHash(h, so) : RecordDigest.bucketHash(h));
        if (valid) {
            a.bound(so);
        }
        a.firstDo = Math.min(a.firstDo, d);
        if (cls == EXPIRED || cls == PENDING || cls == VERIFIED) {
            if (orderCount++ == 0) {
                orderFirst = so;
            } else if (so <= orderLast) {
                ascending = false;
            }
            orderLast = so;
            a.hasDelta = true;
            a.deltaMin = Math.min(a.deltaMin, d - so);
            a.deltaMax = Math.max(a.deltaMax, d - so);
        }
    }
}
