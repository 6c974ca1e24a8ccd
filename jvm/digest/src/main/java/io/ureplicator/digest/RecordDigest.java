package io.ureplicator.digest;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;

import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import org.apache.spark.sql.catalyst.expressions.XXH64;
import org.apache.spark.unsafe.Platform;

/**
 * Record hash version 2 and the {@code urep} header, exactly as the verifier's SQL computes them.
 *
 * <p>The hash is Spark's {@code xxhash64} (seed 42) chained over typed fields — docs/verification.md
 * "The record hash": {@code key IS NULL, key, value IS NULL, value, timestamp_ms, size(kept), kept,
 * null_positions}. It calls Spark's own {@link XXH64}, so it is the SQL expression's hash by
 * construction; tests/support/verifier_xxh64.py checks it independently.
 */
final class RecordDigest {
    static final String HEADER = "urep";
    static final long SEED = 42L;

    private RecordDigest() {}

    static long bytes(ByteBuffer data, long seed) {
        if (data.hasArray()) {
            return XXH64.hashUnsafeBytes(
                data.array(), Platform.BYTE_ARRAY_OFFSET + data.arrayOffset() + data.position(), data.remaining(), seed);
        }
        byte[] copy = new byte[data.remaining()];
        data.duplicate().get(copy);
        return bytes(copy, seed);
    }

    static long bytes(byte[] data, long seed) {
        return XXH64.hashUnsafeBytes(data, Platform.BYTE_ARRAY_OFFSET, data.length, seed);
    }

    /** The content hash of one record: the urep headers are not content. */
    static long contentHash(ByteBuffer key, ByteBuffer value, long timestamp, Headers headers) {
        long h = XXH64.hashInt(key == null ? 1 : 0, SEED);
        if (key != null) {
            h = bytes(key, h);
        }
        h = XXH64.hashInt(value == null ? 1 : 0, h);
        if (value != null) {
            h = bytes(value, h);
        }
        h = XXH64.hashLong(timestamp, h);
        Header[] all = headers.toArray();
        int kept = 0;
        boolean nulls = false;
        for (Header header : all) {
            if (!HEADER.equals(header.key())) {
                kept++;
                nulls |= header.value() == null;
            }
        }
        h = XXH64.hashInt(kept, h);
        if (kept == 0) {
            return h;
        }
        for (Header header : all) {
            if (!HEADER.equals(header.key())) {
                h = bytes(header.key().getBytes(StandardCharsets.UTF_8), h);
                if (header.value() != null) {
                    h = bytes(header.value(), h);
                }
            }
        }
        if (nulls) {  // the 1-based positions in kept of the null values: Spark's hash skips a null
            int position = 0;
            for (Header header : all) {
                if (!HEADER.equals(header.key())) {
                    position++;
                    if (header.value() == null) {
                        h = XXH64.hashInt(position, h);
                    }
                }
            }
        }
        return h;
    }

    /** {@code xxhash64(content_hash, source_offset)}: content moved to another offset changes its bucket. */
    static long bucketHash(long contentHash, long offset) {
        return XXH64.hashLong(offset, XXH64.hashLong(contentHash, SEED));
    }

    /** {@code xxhash64(content_hash)}: a destination record without a readable source offset. */
    static long bucketHash(long contentHash) {
        return XXH64.hashLong(contentHash, SEED);
    }

    /** The value of the only urep header (destination records); null when there is none or several. */
    static byte[] onlyUrep(Headers headers) {
        byte[] found = null;
        int count = 0;
        for (Header header : headers) {
            if (HEADER.equals(header.key())) {
                found = header.value();
                count++;
            }
        }
        return count == 1 ? found : null;
    }

    /** The value of the last urep header (the origin of a source record); null when there is none. */
    static byte[] lastUrep(Headers headers) {
        Header last = headers.lastHeader(HEADER);
        return last == null ? null : last.value();
    }

    /**
     * Whether a urep value is well formed. Version 1: {@code u8 1 | i64 offset | i32 partition | u8 n |
     * n bytes origin}. Version 2 appends {@code u8 m | m bytes hop alias}. Offset and partition sit at the
     * same bytes in both.
     */
    static boolean valid(byte[] urep) {
        if (urep == null || urep.length < 14) {
            return false;
        }
        int n = urep[13] & 0xff;
        if (urep[0] == 1) {
            return urep.length <= 269 && n == urep.length - 14;
        }
        if (urep[0] == 2) {
            return 14 + n < urep.length && urep.length == 15 + n + (urep[14 + n] & 0xff);
        }
        return false;
    }

    static long sourceOffset(byte[] urep) {
        return ByteBuffer.wrap(urep, 1, 8).getLong();
    }

    static int sourcePartition(byte[] urep) {
        return ByteBuffer.wrap(urep, 9, 4).getInt();
    }

    /**
     * Whether a valid urep was written by another hop than the one from {@code source}: a version 2 value
     * naming another hop source alias. A version 1 value names no hop (written before routes): not foreign.
     */
    static boolean otherHop(byte[] urep, byte[] source) {
        if (urep[0] != 2) {
            return false;
        }
        int at = 14 + (urep[13] & 0xff);
        int m = urep[at] & 0xff;
        if (m != source.length) {
            return true;
        }
        for (int i = 0; i < m; i++) {
            if (urep[at + 1 + i] != source[i]) {
                return true;
            }
        }
        return false;
    }

    /** Whether a valid urep names {@code origin} as the record's origin cluster alias. */
    static boolean originIs(byte[] urep, byte[] origin) {
        int n = urep[13] & 0xff;
        if (n != origin.length) {
            return false;
        }
        for (int i = 0; i < n; i++) {
            if (urep[14 + i] != origin[i]) {
                return false;
            }
        }
        return true;
    }
}
