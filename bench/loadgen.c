/* A C-speed Kafka load generator over librdkafka, so that on a 2-core machine the client is
 * not what a benchmark measures (issue 17). bench/c_client.py builds and runs it.
 *
 *   loadgen produce BOOTSTRAP TOPIC RECORDS VALUE_BYTES PARTITIONS ACKS LINGER_MS RATE [WARMUP]
 *   loadgen consume BOOTSTRAP TOPIC RECORDS PARTITIONS [GROUP]
 *   loadgen version
 *
 * produce: RECORDS records of VALUE_BYTES random bytes, no key, record i to partition
 * i % PARTITIONS, batch.size 1 MiB, idempotent when ACKS is "all" (as Kafka's clients default).
 * RATE 0 sends as fast as the queue takes them; RATE > 0 paces to RATE records/s (sleeping,
 * never spinning: a spinning client would take the broker's CPU) and records each record's
 * latency, produce() to delivery report; the first WARMUP records are left out of the
 * percentiles. consume: assigns every partition from offset 0 and reads RECORDS records; with
 * GROUP, subscribes as a member of that consumer group instead (from the earliest offset, offsets
 * auto-committed), as an application's consumer does.
 * version: the librdkafka that runs (it may be newer than the headers compiled against: the
 * bench links the confluent-kafka wheel's, see c_client.py), the headers' and its file.
 * LOADGEN_CONFIG, if set, names a file of KEY=VALUE librdkafka settings applied after the
 * defaults above (e.g. enable.idempotence=false for an acks=all producer that is not idempotent).
 *
 * Prints one JSON object on stdout; exits 1 on any delivery or consume error.
 */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <librdkafka/rdkafka.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FLUSH_TIMEOUT_MS (300 * 1000)
#define CONSUME_TIMEOUT_S 300.0

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, const char *detail) {
    fprintf(stderr, "loadgen: %s: %s\n", what, detail);
    exit(1);
}

static void set(rd_kafka_conf_t *conf, const char *key, const char *value) {
    char err[512];
    if (rd_kafka_conf_set(conf, key, value, err, sizeof err) != RD_KAFKA_CONF_OK) die(key, err);
}

/* LOADGEN_CONFIG names a file of key=value lines applied to every client's config (a listener's
 * security.protocol, SASL and TLS settings: bench/sasl_tls_overhead.py); unset, nothing is added */
static void set_extra(rd_kafka_conf_t *conf) {
    const char *path = getenv("LOADGEN_CONFIG");
    if (!path || !*path) return;
    FILE *f = fopen(path, "r");
    if (!f) die("LOADGEN_CONFIG", path);
    char line[1024];
    while (fgets(line, sizeof line, f)) { /* bounded by the file */
        line[strcspn(line, "\r\n")] = 0;
        char *eq = strchr(line, '=');
        if (!eq || line[0] == '#') continue;
        *eq = 0;
        set(conf, line, eq + 1);
    }
    fclose(f);
}

/* per-record send times and latencies, indexed by the record number carried as msg_opaque */
static double *sent_at;
static double *latency_s;
static long delivered, failed;
static double last_delivery;
static char first_error[512];

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque) {
    (void)rk;
    (void)opaque;
    long i = (long)(intptr_t)msg->_private;
    last_delivery = now_s();
    if (msg->err) {
        if (!failed) snprintf(first_error, sizeof first_error, "%s", rd_kafka_err2str(msg->err));
        failed++;
        return;
    }
    delivered++;
    if (latency_s) latency_s[i] = last_delivery - sent_at[i];
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double quantile(const double *sorted, long n, double q) {
    if (n == 0) return 0.0;
    long k = (long)(q * (double)(n - 1) + 0.5);
    return sorted[k];
}

static void sleep_until(double t) {
    double left = t - now_s();
    if (left <= 0) return;
    struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
    nanosleep(&ts, NULL);
}

static int produce(const char *bootstrap, const char *topic, long records, long value_bytes, int partitions,
                   const char *acks, const char *linger_ms, double rate, long warmup) {
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set(conf, "bootstrap.servers", bootstrap);
    set(conf, "acks", acks);
    set(conf, "linger.ms", linger_ms);
    set(conf, "batch.size", "1048576");
    set(conf, "message.max.bytes", "1049600");
    set(conf, "queue.buffering.max.messages", "2000000");
    set(conf, "queue.buffering.max.kbytes", "2097152");
    set(conf, "enable.idempotence", strcmp(acks, "all") == 0 ? "true" : "false");
    set_extra(conf); /* last: the caller's settings win over these defaults */
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk) die("rd_kafka_new", err);
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *md;
    if (rd_kafka_metadata(rk, 0, rkt, &md, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR) die("metadata", topic);
    rd_kafka_metadata_destroy(md); /* connected before the clock starts */

    char *value = malloc((size_t)value_bytes);
    for (long b = 0; b < value_bytes; b++) value[b] = (char)rand();
    sent_at = calloc((size_t)records, sizeof *sent_at);
    if (rate > 0) latency_s = calloc((size_t)records, sizeof *latency_s);
    /* Above 1,000 records/s a record may go up to 1 ms early: one sleep per millisecond, not one
     * per record (which cost this thread 10-15 % of a core from 10,000 records/s; now 2-8 %). */
    const double slack_s = rate > 1000 ? 1e-3 : 0.0;
    double start = now_s();
    for (long i = 0; i < records; i++) {
        if (rate > 0) {
            double due = start + (double)i / rate;
            if (due - now_s() > slack_s) sleep_until(due);
        }
        sent_at[i] = now_s();
        /* bounded: a full queue drains as the broker acknowledges (or times records out) */
        while (rd_kafka_produce(rkt, (int32_t)(i % partitions), 0, value, (size_t)value_bytes, NULL, 0,
                                (void *)(intptr_t)i) == -1) {
            if (rd_kafka_last_error() != RD_KAFKA_RESP_ERR__QUEUE_FULL) die("produce", rd_kafka_err2str(rd_kafka_last_error()));
            rd_kafka_poll(rk, 1);
        }
        if (rate > 0 || i % 10000 == 0) rd_kafka_poll(rk, 0);
    }
    rd_kafka_resp_err_t flushed = rd_kafka_flush(rk, FLUSH_TIMEOUT_MS);
    double seconds = last_delivery - start;
    printf("{\"records\": %ld, \"delivered\": %ld, \"failed\": %ld, \"seconds\": %.6f, \"payload_bytes\": %ld",
           records, delivered, failed, seconds, records * value_bytes);
    if (latency_s && records > warmup) {
        long n = records - warmup;
        qsort(latency_s + warmup, (size_t)n, sizeof *latency_s, by_value);
        const double *s = latency_s + warmup;
        printf(", \"p50_ms\": %.3f, \"p99_ms\": %.3f, \"p999_ms\": %.3f, \"max_ms\": %.3f",
               quantile(s, n, 0.50) * 1e3, quantile(s, n, 0.99) * 1e3, quantile(s, n, 0.999) * 1e3,
               s[n - 1] * 1e3);
    }
    printf(", \"error\": \"%s\"}\n", failed ? first_error : (flushed ? "flush timed out" : ""));
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
    return failed || flushed || delivered != records;
}

static int consume(const char *bootstrap, const char *topic, long records, int partitions, const char *group) {
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set(conf, "bootstrap.servers", bootstrap);
    set_extra(conf);
    set(conf, "group.id", group ? group : "loadgen-never-joined");
    set(conf, "enable.auto.commit", group ? "true" : "false");
    set(conf, "auto.offset.reset", "earliest");
    set(conf, "enable.partition.eof", "false");
    /* librdkafka >= 2.2 stops fetching a partition for fetch.queue.backoff.ms (1 s) once its
     * local queue passes queued.min.messages: with a broker that serves faster than this loop
     * drains, the phase then measures those pauses, not the broker. Same setting for every
     * peer; older librdkafka has no such pause (and no such property). */
    rd_kafka_conf_set(conf, "fetch.queue.backoff.ms", "10", err, sizeof err);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (!rk) die("rd_kafka_new", err);
    rd_kafka_topic_partition_list_t *tps = rd_kafka_topic_partition_list_new(partitions);
    for (int p = 0; p < partitions; p++) rd_kafka_topic_partition_list_add(tps, topic, p)->offset = 0;
    double start = now_s();
    if (group) {
        rd_kafka_poll_set_consumer(rk);
        rd_kafka_topic_partition_list_t *subscription = rd_kafka_topic_partition_list_new(1);
        rd_kafka_topic_partition_list_add(subscription, topic, RD_KAFKA_PARTITION_UA);
        if (rd_kafka_subscribe(rk, subscription)) die("subscribe", topic);
        rd_kafka_topic_partition_list_destroy(subscription);
    } else if (rd_kafka_assign(rk, tps)) {
        die("assign", topic);
    }
    long got = 0, payload = 0;
    char error[512] = "";
    /* bounded by the deadline */
    while (got < records && now_s() - start < CONSUME_TIMEOUT_S) {
        rd_kafka_message_t *msg = rd_kafka_consumer_poll(rk, 500);
        if (!msg) continue;
        if (msg->err) {
            snprintf(error, sizeof error, "%s", rd_kafka_message_errstr(msg));
            rd_kafka_message_destroy(msg);
            break;
        }
        got++;
        payload += (long)msg->len;
        rd_kafka_message_destroy(msg);
    }
    double seconds = now_s() - start;
    printf("{\"records\": %ld, \"seconds\": %.6f, \"payload_bytes\": %ld, \"error\": \"%s\"}\n", got, seconds,
           payload, got < records && !error[0] ? "timed out" : error);
    rd_kafka_topic_partition_list_destroy(tps);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return got != records;
}

static int version(void) {
    Dl_info where = {0};
    dladdr((void *)rd_kafka_version_str, &where);
    printf("{\"runtime\": \"%s\", \"headers\": \"%d.%d.%d\", \"library\": \"%s\"}\n", rd_kafka_version_str(),
           (RD_KAFKA_VERSION >> 24) & 0xff, (RD_KAFKA_VERSION >> 16) & 0xff, (RD_KAFKA_VERSION >> 8) & 0xff,
           where.dli_fname ? where.dli_fname : "?");
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "version") == 0) return version();
    if (argc >= 10 && strcmp(argv[1], "produce") == 0)
        return produce(argv[2], argv[3], atol(argv[4]), atol(argv[5]), atoi(argv[6]), argv[7], argv[8],
                       atof(argv[9]), argc > 10 ? atol(argv[10]) : 0);
    if ((argc == 6 || argc == 7) && strcmp(argv[1], "consume") == 0)
        return consume(argv[2], argv[3], atol(argv[4]), atoi(argv[5]), argc == 7 ? argv[6] : NULL);
    fprintf(stderr, "usage: loadgen produce BOOTSTRAP TOPIC RECORDS VALUE_BYTES PARTITIONS ACKS LINGER_MS RATE [WARMUP]\n"
                    "       loadgen consume BOOTSTRAP TOPIC RECORDS PARTITIONS [GROUP]\n"
                    "       loadgen version\n");
    return 2;
}
