package io.ureplicator.digest;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code spark.read.format("io.ureplicator.digest.DigestSource")}: pass 1 of the verifier, aggregated in the reader.
 *
 * <p>Each input partition is one offset range {@code [start, end)} of one Kafka partition, or a few small
 * ranges of distinct partitions read by one task (option {@code chunks}: {@code p:start:end,...}, the ranges
 * of one task joined by {@code ;}). Its reader consumes the range with the plain Kafka consumer
 * (read_committed) and emits one row per (class, bucket) with the aggregates pass 1 computes in SQL:
 * count, the two 32-bit halves of the exact sum and the xor of the bucket hashes, the smallest and
 * largest (source) offset, and on the destination side the smallest destination offset and the
 * smallest and largest {@code destination offset - source offset}. Rows of chunks of the same bucket
 * are merged by the caller's aggregation. Options other than {@code kafka.*} are written by
 * verifier/digest.py; nobody configures this by hand.
 */
public final class DigestSource implements TableProvider {
    static final StructType SCHEMA = new StructType()
        .add("p", DataTypes.IntegerType, false)
        .add("cls", DataTypes.IntegerType, false)
        .add("bucket", DataTypes.LongType, false)
        .add("n", DataTypes.LongType, false)
        .add("high", DataTypes.LongType, false)
        .add("low", DataTypes.LongType, false)
        .add("xor", DataTypes.LongType, false)
        .add("first", DataTypes.LongType, true)
        .add("last", DataTypes.LongType, true)
        .add("first_do", DataTypes.LongType, true)
        .add("delta_min", DataTypes.LongType, true)
        .add("delta_max", DataTypes.LongType, true);

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return SCHEMA;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new DigestTable(Plan.parse(properties));
    }

    static final class DigestTable implements Table, SupportsRead {
        private final Plan plan;

        DigestTable(Plan plan) {
            this.plan = plan;
        }

        @Override
        public String name() {
            return "ureplicator-digest(" + plan.side + " " + plan.topic + ")";
        }

        @Override
        public StructType schema() {
            return SCHEMA;
        }

        @Override
        public Set<TableCapability> capabilities() {
            return EnumSet.of(TableCapability.BATCH_READ);
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            return () -> new DigestScan(plan);
        }
    }

    static final class DigestScan implements Scan, Batch {
        private final Plan plan;

        DigestScan(Plan plan) {
            this.plan = plan;
        }

        @Override
        public StructType readSchema() {
            return SCHEMA;
        }

        @Override
        public String description() {
            return "ureplicator-digest " + plan.side + " " + plan.topic + " (" + plan.chunks.size() + " ranges)";
        }

        @Override
        public Batch toBatch() {
            return this;
        }

        @Override
        public InputPartition[] planInputPartitions() {
            List<InputPartition> tasks = new ArrayList<>();
            for (List<Chunk> task : plan.tasks) {
                tasks.add(task.size() == 1 ? task.get(0) : new Group(task));
            }
            return tasks.toArray(new InputPartition[0]);
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            return new Factory(plan);
        }
    }

    /** One offset range of one Kafka partition. */
    record Chunk(int partition, long start, long end) implements InputPartition {}

    /** Small ranges of distinct Kafka partitions, read by one task with one consumer (DriverDigest.read). */
    record Group(List<Chunk> chunks) implements InputPartition {}

    static final class Factory implements PartitionReaderFactory {
        private static final long serialVersionUID = 1L;
        private final Plan plan;

        Factory(Plan plan) {
            this.plan = plan;
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            if (partition instanceof Group group) {
                return new GroupReader(DriverDigest.read(plan, group.chunks(), false));
            }
            return new DigestReader(plan, (Chunk) partition);
        }
    }

    /** The rows of a group's chunks, aggregated by DigestReader as each chunk's own task would. */
    static final class GroupReader implements PartitionReader<InternalRow> {
        private final java.util.Iterator<Object[]> rows;
        private InternalRow current;

        GroupReader(List<Object[]> rows) {
            this.rows = rows.iterator();
        }

        @Override
        public boolean next() {
            if (!rows.hasNext()) {
                return false;
            }
            current = new org.apache.spark.sql.catalyst.expressions.GenericInternalRow(rows.next());
            return true;
        }

        @Override
        public InternalRow get() {
            return current;
        }

        @Override
        public void close() {}
    }

    /** Everything a reader needs, parsed once on the driver and shipped to the executors. */
    static final class Plan implements Serializable {
        private static final long serialVersionUID = 1L;
        static final long ABSENT = Long.MIN_VALUE;

        final String side;
        final String topic;
        final long bucketSize;
        final long pollTimeoutMs;
        final List<Chunk> chunks;  // every range, in order
        final List<List<Chunk>> tasks;  // the ranges each input partition reads
        final Map<String, Object> consumer;
        // Indexed by (source) partition; ABSENT where the snapshot has no such partition.
        final long[] verifyTo;
        final long[] verifyFrom;
        final long[] logStart;
        final long[] end;
        final byte[] skipOrigin;  // source side: records whose urep origin is this alias are SKIPPED
        // Source side, forward: origin: records whose readable urep names another origin are SKIPPED.
        final byte[] keepOrigin;
        // Destination side of a declared route: records this route did not write (no urep header, or a
        // version 2 urep naming another hop source) are FOREIGN, neither verified nor orphans.
        final byte[] hopSource;

        private Plan(Map<String, String> o) {
            side = required(o, "side");
            if (!side.equals("source") && !side.equals("destination")) {
                throw new IllegalArgumentException("side must be source or destination, not " + side);
            }
            topic = required(o, "topic");
            bucketSize = Long.parseLong(required(o, "bucket.size"));
            pollTimeoutMs = Long.parseLong(o.getOrDefault("poll.timeout.ms", "120000"));
            chunks = new ArrayList<>();
            tasks = new ArrayList<>();
            for (String task : o.getOrDefault("chunks", "").split(",")) {
                List<Chunk> ranges = new ArrayList<>();
                for (String item : task.split(";")) {
                    if (!item.isEmpty()) {
                        String[] f = item.split(":");
                        ranges.add(new Chunk(Integer.parseInt(f[0]), Long.parseLong(f[1]), Long.parseLong(f[2])));
                    }
                }
                if (!ranges.isEmpty()) {
                    chunks.addAll(ranges);
                    tasks.add(ranges);
                }
            }
            verifyTo = perPartition(o.get("verify.to"));
            verifyFrom = perPartition(o.get("verify.from"));
            logStart = perPartition(o.get("log.start"));
            end = perPartition(o.get("end"));
            String origin = o.getOrDefault("skip.origin", "");
            skipOrigin = origin.isEmpty() ? null : hex(origin);
            String keep = o.getOrDefault("keep.origin", "");
            keepOrigin = keep.isEmpty() ? null : hex(keep);
            String hop = o.getOrDefault("hop.source", "");
            hopSource = hop.isEmpty() ? null : hex(hop);
            consumer = new HashMap<>();
            for (Map.Entry<String, String> e : o.entrySet()) {
                if (e.getKey().startsWith("kafka.")) {
                    consumer.put(e.getKey().substring("kafka.".length()), e.getValue());
                }
            }
        }

        static Plan parse(Map<String, String> properties) {
            // Spark hands the options case-insensitively; our keys are lower case, Kafka's need their case.
            return new Plan(properties);
        }

        static long at(long[] values, int partition) {
            return partition >= 0 && partition < values.length ? values[partition] : ABSENT;
        }

        private static String required(Map<String, String> o, String key) {
            String value = o.get(key);
            if (value == null || value.isEmpty()) {
                throw new IllegalArgumentException("ureplicator-digest: option " + key + " is required");
            }
            return value;
        }

        private static long[] perPartition(String text) {
            if (text == null || text.isEmpty()) {
                return new long[0];
            }
            Map<Integer, Long> values = new HashMap<>();
            int highest = -1;
            for (String item : text.split(",")) {
                String[] f = item.split(":");
                int p = Integer.parseInt(f[0]);
                values.put(p, Long.parseLong(f[1]));
                highest = Math.max(highest, p);
            }
            long[] dense = new long[highest + 1];
            java.util.Arrays.fill(dense, ABSENT);
            values.forEach((p, v) -> dense[p] = v);
            return dense;
        }

        private static byte[] hex(String text) {
            byte[] out = new byte[text.length() / 2];
            for (int i = 0; i < out.length; i++) {
                out[i] = (byte) Integer.parseInt(text.substring(2 * i, 2 * i + 2), 16);
            }
            return out;
        }
    }
}
