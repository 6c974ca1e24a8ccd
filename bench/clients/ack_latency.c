/* The librdkafka side of bench.ack_latency: produce -> delivery report latency at a fixed rate.
 *
 * usage: ack_latency LIBRDKAFKA BOOTSTRAP TOPIC RATE SECONDS WARMUP_S PARTITIONS LINGER_MS
 *
 * Produces 100-byte records round-robin over partitions 0..PARTITIONS-1 on schedule, with the worker's
 * producer settings (acks=all, idempotence, lz4, batch.size 1000000, 5 requests in flight); a second
 * thread serves delivery reports as they come, so a report is timed when librdkafka hands it over.
 * Prints one JSON line: the counted reports' percentiles (records created in the first WARMUP_S not
 * counted) and librdkafka's count of ProduceRequests sent, from its statistics after the flush.
 * librdkafka is dlopen'ed from the path given (the one confluent-kafka bundles), as no header ships.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* rd_kafka_message_t as rdkafka.h declares it (stable ABI since librdkafka 0.9). */
typedef struct {
    int err;
    void *rkt;
    int32_t partition;
    void *payload;
    size_t len;
    void *key;
    size_t key_len;
    int64_t offset;
    void *_private;
} message_t;

enum { QUEUE_FULL = -184 }; /* RD_KAFKA_RESP_ERR__QUEUE_FULL */

static double *sent_at, *latency;
static long counted, failed;
static volatile int done;
static char *last_stats;
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;
static int (*poll_fn)(void *, int);

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void on_delivery(void *rk, const message_t *m, void *opaque) {
    long i = (long)(intptr_t)m->_private;
    (void)rk;
    (void)opaque;
    if (m->err) failed++;
    else if (i >= 0) latency[counted++] = now() - sent_at[i];
}

static int on_stats(void *rk, char *json, size_t len, void *opaque) {
    (void)rk;
    (void)len;
    (void)opaque;
    pthread_mutex_lock(&stats_lock);
    free(last_stats);
    last_stats = json;
    pthread_mutex_unlock(&stats_lock);
    return 1; /* we keep json; librdkafka must not free it */
}

static void *serve_reports(void *rk) {
    while (!done) poll_fn(rk, 100);
    return NULL;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double quantile(double q) { return counted ? latency[(long)(q * (double)(counted - 1))] * 1e3 : 0.0; }

int main(int argc, char **argv) {
    if (argc != 9) {
        fprintf(stderr, "usage: %s LIBRDKAFKA BOOTSTRAP TOPIC RATE SECONDS WARMUP_S PARTITIONS LINGER_MS\n", argv[0]);
        return 2;
    }
    const char *topic = argv[3], *linger = argv[8];
    long rate = atol(argv[4]);
    double seconds = atof(argv[5]), warmup = atof(argv[6]);
    int partitions = atoi(argv[7]);
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "cannot load librdkafka: %s\n", dlerror());
        return 2;
    }
    void *(*conf_new)(void) = (void *(*)(void))dlsym(lib, "rd_kafka_conf_new");
    int (*conf_set)(void *, const char *, const char *, char *, size_t) =
        (int (*)(void *, const char *, const char *, char *, size_t))dlsym(lib, "rd_kafka_conf_set");
    void (*set_dr)(void *, void *) = (void (*)(void *, void *))dlsym(lib, "rd_kafka_conf_set_dr_msg_cb");
    void (*set_stats)(void *, void *) = (void (*)(void *, void *))dlsym(lib, "rd_kafka_conf_set_stats_cb");
    void *(*kafka_new)(int, void *, char *, size_t) = (void *(*)(int, void *, char *, size_t))dlsym(lib, "rd_kafka_new");
    void *(*topic_new)(void *, const char *, void *) = (void *(*)(void *, const char *, void *))dlsym(lib, "rd_kafka_topic_new");
    int (*produce)(void *, int32_t, int, void *, size_t, const void *, size_t, void *) =
        (int (*)(void *, int32_t, int, void *, size_t, const void *, size_t, void *))dlsym(lib, "rd_kafka_produce");
    int (*flush)(void *, int) = (int (*)(void *, int))dlsym(lib, "rd_kafka_flush");
    int (*last_error)(void) = (int (*)(void))dlsym(lib, "rd_kafka_last_error");
    poll_fn = (int (*)(void *, int))dlsym(lib, "rd_kafka_poll");
    if (!conf_new || !conf_set || !set_dr || !set_stats || !kafka_new || !topic_new || !produce || !flush || !poll_fn ||
        !last_error) {
        fprintf(stderr, "librdkafka lacks a symbol this program needs\n");
        return 2;
    }
    char err[512];
    void *conf = conf_new();
    const char *settings[][2] = {
        {"bootstrap.servers", argv[2]}, {"acks", "all"}, {"enable.idempotence", "true"},
        {"linger.ms", linger}, {"compression.type", "lz4"}, {"batch.size", "1000000"},
        {"max.in.flight.requests.per.connection", "5"}, {"statistics.interval.ms", "500"},
    };
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
        if (conf_set(conf, settings[i][0], settings[i][1], err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 2;
        }
    }
    set_dr(conf, (void *)on_delivery);
    set_stats(conf, (void *)on_stats);
    void *rk = kafka_new(0 /* producer */, conf, err, sizeof err);
    if (!rk) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    void *rkt = topic_new(rk, topic, NULL);
    long total = (long)((double)rate * (seconds + warmup));
    sent_at = calloc((size_t)total, sizeof(double));
    latency = calloc((size_t)total, sizeof(double));
    char value[100];
    memset(value, 'x', sizeof value);
    /* one record first, so the connection and the producer id exist before the clock starts */
    produce(rkt, 0, 2 /* RD_KAFKA_MSG_F_COPY */, value, sizeof value, NULL, 0, (void *)(intptr_t)-1);
    flush(rk, 30000);
    pthread_t reporter;
    pthread_create(&reporter, NULL, serve_reports, rk);
    double start = now();
    for (long n = 0; n < total;) {
        double due = start + (double)n / (double)rate, t = now();
        if (due > t) {
            struct timespec pause = {0, (long)((due - t) * 1e9)};
            nanosleep(&pause, NULL);
        }
        long owed = (long)((now() - start) * (double)rate) + 1;
        for (; n < owed && n < total; n++) {
            double created = now();
            sent_at[n] = created;
            while (produce(rkt, (int32_t)(n % partitions), 2, value, sizeof value, NULL, 0,
                           (void *)(intptr_t)(created - start >= warmup ? n : -1)) != 0) {
                if (last_error() != QUEUE_FULL) {
                    fprintf(stderr, "produce to partition %ld failed: librdkafka error %d\n", n % partitions,
                            last_error());
                    return 2;
                }
                struct timespec wait = {0, 100000}; /* the schedule slips, and the latency shows it */
                nanosleep(&wait, NULL);
            }
        }
    }
    double produced_s = now() - start;
    flush(rk, 60000);
    struct timespec settle = {0, 700000000}; /* one more statistics interval after the last request */
    nanosleep(&settle, NULL);
    done = 1;
    pthread_join(reporter, NULL);
    qsort(latency, (size_t)counted, sizeof(double), by_value);
    printf("{\"reports\": %ld, \"failed\": %ld, \"produced_s\": %.3f, \"p50_ms\": %.3f, \"p90_ms\": %.3f, "
           "\"p99_ms\": %.3f, \"max_ms\": %.3f}\n",
           counted, failed, produced_s, quantile(0.5), quantile(0.9), quantile(0.99), quantile(1.0));
    pthread_mutex_lock(&stats_lock);
    printf("%s\n", last_stats ? last_stats : "{}");
    pthread_mutex_unlock(&stats_lock);
    return failed ? 1 : 0;
}
