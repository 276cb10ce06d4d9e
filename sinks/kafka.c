/* sinks/kafka.c — the Kafka sink (librdkafka).
 *
 * Design
 *  - One producer (rd_kafka_t) per configured sink. Shard workers call
 *    produce() concurrently; librdkafka is thread-safe, so produce() calls
 *    rd_kafka_producev() holding no mutex of ours.
 *  - One poller thread per sink (kb:kafka/<name>) loops on rd_kafka_poll():
 *    delivery reports, statistics, errors and logs are served there, so acks
 *    normally run on that thread (a flush inside a transaction commit serves
 *    them on the same thread too; destroy serves the last ones on the caller's).
 *  - Ordering: the idempotent producer with acks=all (both defaults; a setting
 *    that could reorder or lose a key's changes is refused by validate()).
 *    librdkafka keeps per-partition order across its own retries, and a key
 *    always maps to one partition, so acks of one key come in produce order.
 *  - Backpressure, not loss: message.timeout.ms defaults to 0 (librdkafka
 *    never gives up on a message) and queue.buffering.max.kbytes to 64 MiB.
 *    While the broker is away, librdkafka's bounded queue fills, produce()
 *    waits up to timeout_ms for room and returns KB_ERR_FULL, and the bridge
 *    stops reading watches. A delivery report that does fail (a user-set
 *    message.timeout.ms, a topic that does not exist, a record too large)
 *    acks with KB_ERR_DELIVERY, is counted, and is logged at most every 10 s.
 *  - No copy of the object: the value is either the event's own object bytes
 *    (state mode, CloudEvents binary; the event is referenced until the
 *    delivery report) or an envelope built for this message and handed to
 *    librdkafka to free (RD_KAFKA_MSG_F_FREE).
 *  - State mode, DELETED: two records with the same key, the DELETED record
 *    (value = the object as last seen) and then a tombstone (NULL value);
 *    the change is acked once, after both are delivered.
 *  - Transactions (transactional = true): the poller initialises the
 *    transactional producer, keeps one transaction open, and commits it every
 *    KB_KAFKA_TXN_MS or when flush() asks. (KB_TEST_KAFKA_TXN_MS, for tests
 *    only, keeps each one open longer, so that a test can stop a leader while
 *    its transaction is open without racing a 100 ms commit.) A delivery report inside a
 *    transaction does not ack: the message waits on the transaction's list
 *    and is acked when the commit succeeds (or with an error when it aborts),
 *    so a checkpoint never passes a change a read_committed consumer cannot see.
 *    produce() and commit are mutually exclusive (the transactional API wants
 *    no produce during commit): ks->gate is a writer-preferring rwlock that
 *    producers take shared around rd_kafka_producev() and the poller takes
 *    exclusively around init/commit/abort/begin. It is the one lock held
 *    across librdkafka calls, by design; no callback of ours takes it.
 *  - Exactly-once across restarts: msg->enqueued is called once the whole
 *    change is inside librdkafka, still under the shared gate, so a commit
 *    cannot fall between the two. Right before each commit (exclusive gate:
 *    nobody producing) the checkpoint provider gives its records, which go to
 *    checkpoint_topic in the same transaction: a read_committed reader sees a
 *    change and the checkpoint that passed it together or not at all. The
 *    poller creates checkpoint_topic (compacted, one partition) before it
 *    initialises transactions; read_checkpoint() waits for that
 *    initialisation (it fences and aborts a killed predecessor's open
 *    transaction, which would otherwise hold back the last stable offset),
 *    then reads the topic with a short-lived read_committed consumer.
 *  - ha.enabled: both replicas have the same transactional.id, and
 *    initialising transactions fences whoever had it. So a standby's poller
 *    waits (ks->held) until activate() says this replica leads; a producer
 *    the broker fenced stays fatal until the process restarts.
 *
 * Locks: ks->mtx guards the transaction's ack list and is the condition
 * variable's mutex; it is never held while calling librdkafka or an ack.
 * Order: gate before mtx.
 */
#include "common/alloc.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/secret.h"
#include "common/time.h"
#include "sinks/envelope.h"
#include "sinks/sink.h"

#include <errno.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KB_KAFKA_TXN_MS 100           /* how long a transaction stays open */
#define KB_KAFKA_TXN_TIMEOUT_MS 30000 /* per init/commit/abort call */
#define KB_KAFKA_WAIT_SLICE_MS 20     /* re-try a full queue this often */
#define KB_KAFKA_TOMBSTONE_GRACE_MS 5000
#define KB_KAFKA_ADMIN_TIMEOUT_MS 10000 /* creating the checkpoint topic, per attempt */
#define KB_KAFKA_CKPT_TOPIC_DEFAULT "__kbridge_checkpoints"
#define KB_KAFKA_CKPT_CREATE_TRIES 3

/* One produced change: librdkafka's msg_opaque for its record(s). */
typedef struct kb_kafka_msg {
    kb_ack_fn ack;
    void *ack_opaque;
    kb_event_t *ev;            /* referenced while librdkafka points into ev->obj; else NULL */
    size_t bytes;              /* value bytes, for queue accounting */
    _Atomic int parts;         /* records not yet reported (2 for DELETED + tombstone) */
    _Atomic int err;           /* first kb_err_t of any part */
    struct kb_kafka_msg *next; /* the open transaction's list; ks->mtx */
} kb_kafka_msg_t;

typedef struct kb_kafka_sink {
    char *name;
    rd_kafka_t *rk;
    bool transactional;
    pthread_t poller;
    atomic_bool stop;           /* poller: leave */
    atomic_bool fatal;          /* librdkafka raised a fatal error: produce refuses */
    atomic_bool commit_now;     /* flush() asks the poller to commit */
    atomic_bool connected;
    pthread_rwlock_t gate;      /* transactional mode only, see the design note */
    pthread_mutex_t mtx;
    pthread_cond_t cond;        /* an ack happened, the poller started; on CLOCK_MONOTONIC */
    bool poller_up;             /* mtx */
    _Atomic int waiters;        /* threads waiting on cond */
    kb_kafka_msg_t *txn_head, *txn_tail; /* delivered in the open transaction, waiting for commit; mtx */
    _Atomic uint64_t txn_msgs;  /* produced into the open transaction */
    int64_t txn_started_ns;     /* poller only */
    int64_t txn_ms;             /* KB_KAFKA_TXN_MS, or KB_TEST_KAFKA_TXN_MS; immutable */
    atomic_bool txn_ready;      /* transactions initialised (a predecessor is fenced) */
    atomic_bool held;           /* ha.enabled standby: transactions wait for activate() */
    bool ckpt_topic_done;       /* created, found, or given up on; poller only */
    int ckpt_create_tries;      /* poller only */
    char *ckpt_topic;           /* checkpoint_topic; immutable */
    kb_ckpt_provider_fn ckpt_fn;/* mtx */
    void *ckpt_opaque;          /* mtx */
    rd_kafka_conf_t *cconf;     /* template of the checkpoint reader's config; transactional only */
    _Atomic uint64_t produced, acked, failed, retries, queue_bytes, outstanding;
    kb_ratelimit_t rl_fail, rl_err;
} kb_kafka_sink_t;

static void kb_kafka_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf);

/* ---- configuration ------------------------------------------------------ */

typedef struct kb_kafka_setting {
    const char *name;
    const char *value;
} kb_kafka_setting_t;

/* Applied before the user's properties, which may override them (within the
 * ordering checks below). */
static const kb_kafka_setting_t kb_kafka_defaults[] = {
    {"client.id", "kbridge"},
    {"enable.idempotence", "true"},
    {"acks", "all"},
    {"partitioner", "murmur2_random"}, /* same key → partition mapping as the Java client */
    {"queue.buffering.max.kbytes", "65536"},
    {"statistics.interval.ms", "1000"},
};

static const char *kb_kafka_file_suffix = "_file";

static const kb_kv_t *kb_kafka_find_prop(const kb_config_sink_t *conf, const char *a, const char *b) {
    for (size_t i = 0; i < conf->n_properties; i++) {
        const char *k = conf->properties[i].key;
        if (!strcmp(k, a) || (b && !strcmp(k, b)))
            return &conf->properties[i];
    }
    return NULL;
}

static int kb_kafka_line(const kb_config_sink_t *conf, const kb_kv_t *kv) {
    return kv && kv->line > 0 ? kv->line : conf->line;
}

/* Read a secret from a file: whole content, trailing newlines trimmed; an
 * empty one is refused. Never logged. */
static char *kb_kafka_read_secret(const char *path, char *why, size_t why_size) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(why, why_size, "cannot read \"%s\": %s", path, strerror(errno));
        return NULL;
    }
    kb_buf_t b = KB_BUF_INIT;
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        kb_buf_append(&b, chunk, n);
    bool bad = ferror(f) != 0;
    fclose(f);
    if (bad) {
        snprintf(why, why_size, "cannot read \"%s\"", path);
        kb_buf_fini(&b);
        return NULL;
    }
    while (b.len > 0 && (b.data[b.len - 1] == '\n' || b.data[b.len - 1] == '\r'))
        b.len--;
    if (b.len == 0) { /* a placeholder Secret nobody filled: say so, never connect with "" */
        snprintf(why, why_size, "\"%s\" is empty (fill the Secret it comes from)", path);
        kb_buf_fini(&b);
        return NULL;
    }
    kb_buf_reserve(&b, 0); /* allocated even when empty */
    b.data[b.len] = '\0';
    return kb_buf_steal(&b, NULL);
}

/* Set one user property; "X_file" = path sets X to the file's content. */
static kb_err_t kb_kafka_set_prop(rd_kafka_conf_t *rconf, const kb_config_sink_t *conf, const kb_config_t *cfg,
                                  const kb_kv_t *kv, char *errstr, size_t errstr_size) {
    char why[512] = "";
    size_t klen = strlen(kv->key), slen = strlen(kb_kafka_file_suffix);
    bool from_file = klen > slen && !strcmp(kv->key + klen - slen, kb_kafka_file_suffix);
    char *name = from_file ? kb_strndup(kv->key, klen - slen) : kb_strdup(kv->key);
    char *value = from_file ? kb_kafka_read_secret(kv->value, why, sizeof(why)) : kb_strdup(kv->value);
    kb_err_t err = KB_OK;
    if (!value) {
        err = KB_ERR_CONFIG;
    } else if (rd_kafka_conf_set(rconf, name, value, why, sizeof(why)) != RD_KAFKA_CONF_OK) {
        /* librdkafka's message may quote the value: keep a secret out of it. */
        if (from_file)
            snprintf(why, sizeof(why), "librdkafka refuses the value read from \"%s\" for \"%s\"", kv->value, name);
        else if (kb_secret_key_like(name))
            snprintf(why, sizeof(why), "librdkafka refuses the value (not shown: a secret) for \"%s\"", name);
        err = KB_ERR_CONFIG;
    }
    if (err != KB_OK)
        snprintf(errstr, errstr_size, "%s:%d: sinks.%s.properties.%s: %s", cfg->path, kb_kafka_line(conf, kv),
                 conf->name, kv->key, why);
    if (value) {
        memset(value, 0, strlen(value));
        free(value);
    }
    free(name);
    return err;
}

static void kb_kafka_conf_get(rd_kafka_conf_t *rconf, const char *name, char *buf, size_t size) {
    size_t n = size;
    if (rd_kafka_conf_get(rconf, name, buf, &n) != RD_KAFKA_CONF_OK)
        buf[0] = '\0';
}

/* Refuse what could reorder or lose a key's changes. */
static kb_err_t kb_kafka_check_ordering(rd_kafka_conf_t *rconf, const kb_config_sink_t *conf,
                                        const kb_config_t *cfg, char *errstr, size_t errstr_size) {
    char acks[32], idem[16], inflight[32], retries[32], dronly[16];
    kb_kafka_conf_get(rconf, "acks", acks, sizeof(acks));
    kb_kafka_conf_get(rconf, "enable.idempotence", idem, sizeof(idem));
    kb_kafka_conf_get(rconf, "max.in.flight", inflight, sizeof(inflight));
    kb_kafka_conf_get(rconf, "retries", retries, sizeof(retries));
    kb_kafka_conf_get(rconf, "delivery.report.only.error", dronly, sizeof(dronly));
    long n_inflight = strtol(inflight, NULL, 10), n_retries = strtol(retries, NULL, 10);
    const kb_kv_t *kv = NULL;
    const char *why = NULL;
    if (strcmp(acks, "-1") != 0 && strcmp(acks, "all") != 0) {
        kv = kb_kafka_find_prop(conf, "acks", "request.required.acks");
        why = "kbridge needs acks=all (-1): with fewer acks a change the broker acknowledged can be lost "
              "when the partition leader fails over";
    } else if (!strcmp(idem, "false") && n_inflight > 1 && n_retries > 0) {
        kv = kb_kafka_find_prop(conf, "enable.idempotence", NULL);
        why = "enable.idempotence=false with max.in.flight > 1 and retries would reorder a key's changes on "
              "retry; keep enable.idempotence=true (the default) or set max.in.flight=1";
    } else if (!strcmp(idem, "true") && n_inflight > 5 &&
               (kv = kb_kafka_find_prop(conf, "max.in.flight", "max.in.flight.requests.per.connection"))) {
        /* librdkafka lowers its own default to 5; a value the user set is kept and refused later. */
        why = "the idempotent producer keeps order only with max.in.flight <= 5";
    } else if (!strcmp(dronly, "true")) {
        kv = kb_kafka_find_prop(conf, "delivery.report.only.error", NULL);
        why = "kbridge acknowledges changes from delivery reports and needs every one of them";
    } else if (conf->transactional && !strcmp(idem, "false")) {
        kv = kb_kafka_find_prop(conf, "enable.idempotence", NULL);
        why = "transactional = true needs the idempotent producer";
    }
    if (!why)
        return KB_OK;
    snprintf(errstr, errstr_size, "%s:%d: sinks.%s.properties.%s: %s", cfg->path, kb_kafka_line(conf, kv),
             conf->name, kv ? kv->key : "acks", why);
    return KB_ERR_CONFIG;
}

/* Build the librdkafka configuration: defaults, brokers, the user's
 * properties, checks. NULL with "FILE:LINE: key: reason" in errstr. */
static rd_kafka_conf_t *kb_kafka_conf_build(const kb_config_sink_t *conf, const kb_config_t *cfg, char *errstr,
                                            size_t errstr_size) {
    rd_kafka_conf_t *rconf = rd_kafka_conf_new();
    char why[512];
    for (size_t i = 0; i < KB_ARRAY_LEN(kb_kafka_defaults); i++)
        if (rd_kafka_conf_set(rconf, kb_kafka_defaults[i].name, kb_kafka_defaults[i].value, why, sizeof(why)) !=
            RD_KAFKA_CONF_OK)
            KB_FATAL("a built-in librdkafka default is refused");
    /* Never give up on a message (backpressure instead); a transactional
     * producer derives it from transaction.timeout.ms instead. */
    if (!conf->transactional)
        rd_kafka_conf_set(rconf, "message.timeout.ms", "0", why, sizeof(why));

    const kb_kv_t *bs = kb_kafka_find_prop(conf, "bootstrap.servers", "metadata.broker.list");
    bool have_brokers = conf->brokers && conf->brokers[0];
    if (have_brokers && bs) {
        snprintf(errstr, errstr_size, "%s:%d: sinks.%s.properties.%s: set brokers or this property, not both",
                 cfg->path, kb_kafka_line(conf, bs), conf->name, bs->key);
        goto fail;
    }
    if (!have_brokers && !bs) {
        snprintf(errstr, errstr_size, "%s:%d: sinks.%s.brokers: required (\"host:port,host:port\")", cfg->path,
                 conf->line, conf->name);
        goto fail;
    }
    if (have_brokers && rd_kafka_conf_set(rconf, "bootstrap.servers", conf->brokers, why, sizeof(why)) !=
                            RD_KAFKA_CONF_OK) {
        snprintf(errstr, errstr_size, "%s:%d: sinks.%s.brokers: %s", cfg->path, conf->line, conf->name, why);
        goto fail;
    }
    if (conf->transactional && !kb_kafka_find_prop(conf, "transactional.id", NULL)) {
        char id[512];
        if (cfg->sharding_replicas > 1)
            snprintf(id, sizeof(id), "kbridge-%s-%s-%d", cfg->cluster.name, conf->name, cfg->sharding_index);
        else
            snprintf(id, sizeof(id), "kbridge-%s-%s", cfg->cluster.name, conf->name);
        rd_kafka_conf_set(rconf, "transactional.id", id, why, sizeof(why));
    }
    for (size_t i = 0; i < conf->n_properties; i++)
        if (kb_kafka_set_prop(rconf, conf, cfg, &conf->properties[i], errstr, errstr_size) != KB_OK)
            goto fail;
    if (kb_kafka_check_ordering(rconf, conf, cfg, errstr, errstr_size) != KB_OK)
        goto fail;
    return rconf;
fail:
    rd_kafka_conf_destroy(rconf);
    return NULL;
}

/* The user properties a consumer takes too: where the brokers are and how to
 * reach them (TLS, SASL, sockets); producer tuning stays out. */
static const char *const kb_kafka_reader_prefixes[] = {
    "bootstrap.servers", "metadata.broker.list", "security.protocol", "ssl.", "ssl_", "sasl.", "enable.ssl.",
    "enable.sasl.", "socket.", "broker.", "api.version", "client.", "reconnect.", "connections.max.idle.ms",
    "resolve.canonical.", "https.",
};

/* The checkpoint reader's configuration (read_committed, manual
 * assignment, no offset commits); duplicated for every read. The user's
 * properties were already accepted for the producer, so none fails here. */
static rd_kafka_conf_t *kb_kafka_reader_conf(const kb_config_sink_t *conf, const kb_config_t *cfg,
                                             kb_kafka_sink_t *ks) {
    static const kb_kafka_setting_t fixed[] = {
        {"client.id", "kbridge-checkpoint-reader"}, {"group.id", "kbridge-checkpoint-reader"},
        {"enable.auto.commit", "false"}, {"enable.auto.offset.store", "false"},
        {"isolation.level", "read_committed"}, {"enable.partition.eof", "true"},
        {"allow.auto.create.topics", "false"},
    };
    rd_kafka_conf_t *rconf = rd_kafka_conf_new();
    char why[512];
    if (conf->brokers && conf->brokers[0])
        rd_kafka_conf_set(rconf, "bootstrap.servers", conf->brokers, why, sizeof(why));
    for (size_t i = 0; i < conf->n_properties; i++)
        for (size_t j = 0; j < KB_ARRAY_LEN(kb_kafka_reader_prefixes); j++)
            if (!strncmp(conf->properties[i].key, kb_kafka_reader_prefixes[j],
                         strlen(kb_kafka_reader_prefixes[j]))) {
                kb_kafka_set_prop(rconf, conf, cfg, &conf->properties[i], why, sizeof(why));
                break;
            }
    for (size_t i = 0; i < KB_ARRAY_LEN(fixed); i++)
        if (rd_kafka_conf_set(rconf, fixed[i].name, fixed[i].value, why, sizeof(why)) != RD_KAFKA_CONF_OK)
            KB_FATAL("a built-in librdkafka consumer setting is refused");
    rd_kafka_conf_set_opaque(rconf, ks);
    rd_kafka_conf_set_log_cb(rconf, kb_kafka_log_cb);
    return rconf;
}

static kb_err_t kb_kafka_validate(const kb_config_sink_t *conf, const kb_config_t *cfg, char *errstr,
                                  size_t errstr_size) {
    rd_kafka_conf_t *rconf = kb_kafka_conf_build(conf, cfg, errstr, errstr_size);
    if (!rconf)
        return KB_ERR_CONFIG;
    rd_kafka_conf_destroy(rconf);
    return KB_OK;
}

/* ---- acknowledgements --------------------------------------------------- */

static void kb_kafka_wake(kb_kafka_sink_t *ks) {
    if (atomic_load(&ks->waiters) == 0)
        return;
    pthread_mutex_lock(&ks->mtx);
    pthread_cond_broadcast(&ks->cond);
    pthread_mutex_unlock(&ks->mtx);
}

/* Call the ack of km and free it. Thread: any; no lock held. */
static void kb_kafka_ack(kb_kafka_sink_t *ks, kb_kafka_msg_t *km, kb_err_t err) {
    atomic_fetch_sub(&ks->queue_bytes, km->bytes);
    if (err == KB_OK) {
        atomic_fetch_add(&ks->acked, 1);
    } else {
        atomic_fetch_add(&ks->failed, 1);
    }
    km->ack(km->ack_opaque, err);
    kb_event_unref(km->ev);
    free(km);
    atomic_fetch_sub(&ks->outstanding, 1);
}

/* One record of km is done (delivered, failed, or never enqueued). */
static void kb_kafka_part_done(kb_kafka_sink_t *ks, kb_kafka_msg_t *km, kb_err_t err) {
    if (err != KB_OK) {
        int expected = KB_OK;
        atomic_compare_exchange_strong(&km->err, &expected, (int)err);
    }
    if (atomic_fetch_sub(&km->parts, 1) != 1)
        return;
    if (!ks->transactional) {
        kb_kafka_ack(ks, km, (kb_err_t)atomic_load(&km->err));
        return;
    }
    /* Inside a transaction: acked when it commits or aborts. */
    pthread_mutex_lock(&ks->mtx);
    km->next = NULL;
    if (ks->txn_tail)
        ks->txn_tail->next = km;
    else
        ks->txn_head = km;
    ks->txn_tail = km;
    pthread_mutex_unlock(&ks->mtx);
}

/* Ack everything of the finished transaction: OK if it committed, else err. */
static void kb_kafka_txn_settle(kb_kafka_sink_t *ks, kb_err_t err) {
    pthread_mutex_lock(&ks->mtx);
    kb_kafka_msg_t *km = ks->txn_head;
    ks->txn_head = ks->txn_tail = NULL;
    pthread_mutex_unlock(&ks->mtx);
    while (km) {
        kb_kafka_msg_t *next = km->next;
        kb_err_t own = (kb_err_t)atomic_load(&km->err);
        /* a record the broker refused keeps its own verdict; the rest of an
         * aborted transaction was given no verdict: not a refusal */
        kb_kafka_ack(ks, km, own != KB_OK ? own : err == KB_OK || err == KB_ERR_STOPPED ? err : KB_ERR_TIMEDOUT);
        km = next;
    }
}

static kb_err_t kb_kafka_dr_err(rd_kafka_resp_err_t rerr) {
    switch (rerr) {
    case RD_KAFKA_RESP_ERR_NO_ERROR: return KB_OK;
    case RD_KAFKA_RESP_ERR__PURGE_QUEUE:
    case RD_KAFKA_RESP_ERR__PURGE_INFLIGHT: return KB_ERR_STOPPED;
    /* librdkafka stopped trying (message.timeout.ms, no broker): no verdict on
     * the record, so not a refusal (sinks/sink.h) */
    case RD_KAFKA_RESP_ERR__MSG_TIMED_OUT:
    case RD_KAFKA_RESP_ERR__TIMED_OUT:
    case RD_KAFKA_RESP_ERR__TIMED_OUT_QUEUE:
    case RD_KAFKA_RESP_ERR__TRANSPORT:
    case RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN: return KB_ERR_TIMEDOUT;
    default: return KB_ERR_DELIVERY;
    }
}

static void kb_kafka_dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    KB_UNUSED(rk);
    kb_kafka_sink_t *ks = opaque;
    kb_kafka_msg_t *km = m->_private;
    uint64_t suppressed = 0;
    kb_err_t err = kb_kafka_dr_err(m->err);
    if (!km) { /* a checkpoint record: a failure makes the commit fail, which settles the acks */
        if (m->err)
            KB_WARN("kafka", "sink=%s topic=%s checkpoint record not delivered: %s; the transaction will abort",
                    ks->name, rd_kafka_topic_name(m->rkt), rd_kafka_err2str(m->err));
        return;
    }
    if ((err == KB_ERR_DELIVERY || err == KB_ERR_TIMEDOUT) && kb_ratelimit_allow(&ks->rl_fail, 10000, &suppressed)) {
        KB_WARN("kafka", "sink=%s topic=%s partition=%d key=%.*s delivery failed: %s; the change is handed "
                "back unacknowledged (failed=%llu suppressed=%llu)", ks->name, rd_kafka_topic_name(m->rkt),
                (int)m->partition, (int)m->key_len, (const char *)m->key, rd_kafka_err2str(m->err),
                (unsigned long long)atomic_load(&ks->failed) + 1, (unsigned long long)suppressed);
    } else if (!m->err) {
        atomic_store(&ks->connected, true);
    }
    kb_kafka_part_done(ks, km, err);
}

/* ---- librdkafka callbacks: logs, errors, statistics ---------------------- */

static void kb_kafka_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    const kb_kafka_sink_t *ks = rd_kafka_opaque(rk);
    /* librdkafka logs a refused connection at LOG_ERR; for a bridge that
     * rides out broker restarts that is a warning. */
    kb_log_level_t lvl = level <= 2 ? KB_LOG_ERROR : level <= 4 ? KB_LOG_WARN : level <= 6 ? KB_LOG_INFO
                                                                                         : KB_LOG_DEBUG;
    kb_log(lvl, "kafka", "sink=%s rdkafka %s: %s", ks ? ks->name : "?", fac, buf);
}

static void kb_kafka_error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
    kb_kafka_sink_t *ks = opaque;
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
        atomic_store(&ks->connected, false);
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char why[512];
        rd_kafka_fatal_error(rk, why, sizeof(why));
        atomic_store(&ks->fatal, true);
        atomic_store(&ks->connected, false);
        KB_ERROR("kafka", "sink=%s fatal producer error, the sink stops accepting changes: %s", ks->name, why);
        return;
    }
    /* Transport errors are already in librdkafka's own log lines. */
    uint64_t suppressed = 0;
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN && kb_ratelimit_allow(&ks->rl_err, 10000, &suppressed))
        KB_WARN("kafka", "sink=%s no broker reachable: %s; changes wait in the bounded queue (suppressed=%llu)",
                ks->name, reason, (unsigned long long)suppressed);
    else
        KB_DEBUG("kafka", "sink=%s %s: %s", ks->name, rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

/* Sum of retries over brokers and whether a real broker (nodeid >= 0) is UP. */
static int kb_kafka_stats_cb(rd_kafka_t *rk, char *json, size_t json_len, void *opaque) {
    KB_UNUSED(rk);
    kb_kafka_sink_t *ks = opaque;
    json_t *root = json_loadb(json, json_len, 0, NULL);
    json_t *brokers = root ? json_object_get(root, "brokers") : NULL;
    const char *bname;
    json_t *b;
    uint64_t retries = 0;
    bool up = false;
    json_object_foreach(brokers, bname, b) {
        json_int_t r = json_integer_value(json_object_get(b, "txretries"));
        retries += r > 0 ? (uint64_t)r : 0;
        const char *state = json_string_value(json_object_get(b, "state"));
        if (json_integer_value(json_object_get(b, "nodeid")) >= 0 && state && !strcmp(state, "UP"))
            up = true;
    }
    if (brokers) {
        atomic_store(&ks->retries, retries);
        atomic_store(&ks->connected, up);
    }
    json_decref(root);
    return 0; /* librdkafka frees json */
}

/* ---- transactions (poller thread) ---------------------------------------- */

/* Log e, then say what it means: 1 retry, 0 abort, -1 fatal. Destroys e. */
static int kb_kafka_txn_error(kb_kafka_sink_t *ks, rd_kafka_error_t *e, const char *what) {
    int verdict = rd_kafka_error_is_fatal(e) ? -1 : rd_kafka_error_txn_requires_abort(e) ? 0
                                                  : rd_kafka_error_is_retriable(e)         ? 1
                                                                                           : 0;
    kb_log(verdict < 0 ? KB_LOG_ERROR : KB_LOG_WARN, "kafka", "sink=%s %s: %s (%s)", ks->name, what,
           rd_kafka_error_string(e), verdict < 0 ? "fatal" : verdict ? "retrying" : "aborting the transaction");
    if (verdict < 0)
        atomic_store(&ks->fatal, true);
    rd_kafka_error_destroy(e);
    return verdict;
}

/* 1 if checkpoint_topic exists, 0 if not, -1 if the cluster did not answer.
 * Lists all topics: asking for the one topic could auto-create it. */
static int kb_kafka_ckpt_topic_exists(kb_kafka_sink_t *ks) {
    const rd_kafka_metadata_t *md = NULL;
    if (rd_kafka_metadata(ks->rk, 1, NULL, &md, KB_KAFKA_ADMIN_TIMEOUT_MS) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return -1;
    int found = 0;
    for (int i = 0; i < md->topic_cnt && !found; i++)
        found = !strcmp(md->topics[i].topic, ks->ckpt_topic) && !md->topics[i].err;
    rd_kafka_metadata_destroy(md);
    return found;
}

/* Create checkpoint_topic (compacted, one partition) unless it exists.
 * True when done: found, created, or refused for good (logged; an operator
 * may have to create it). False on a transient failure: call again (a
 * reachable cluster gets KB_KAFKA_CKPT_CREATE_TRIES attempts). Thread: the
 * poller, before transactions start. */
static bool kb_kafka_ckpt_topic_create(kb_kafka_sink_t *ks) {
    char why[512];
    int exists = kb_kafka_ckpt_topic_exists(ks);
    if (exists != 0)
        return exists > 0;
    if (++ks->ckpt_create_tries > KB_KAFKA_CKPT_CREATE_TRIES) {
        KB_WARN("kafka", "sink=%s topic=%s the checkpoint topic could not be created; it must exist (compacted) "
                "for checkpoints to commit", ks->name, ks->ckpt_topic);
        return true;
    }
    rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(ks->ckpt_topic, 1, -1, why, sizeof(why));
    if (!nt) {
        KB_WARN("kafka", "sink=%s topic=%s cannot describe the checkpoint topic: %s", ks->name, ks->ckpt_topic, why);
        return true;
    }
    rd_kafka_NewTopic_set_config(nt, "cleanup.policy", "compact");
    rd_kafka_AdminOptions_t *opt = rd_kafka_AdminOptions_new(ks->rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
    rd_kafka_AdminOptions_set_request_timeout(opt, KB_KAFKA_ADMIN_TIMEOUT_MS, why, sizeof(why));
    rd_kafka_queue_t *q = rd_kafka_queue_new(ks->rk);
    rd_kafka_CreateTopics(ks->rk, &nt, 1, opt, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, KB_KAFKA_ADMIN_TIMEOUT_MS + 1000);
    rd_kafka_resp_err_t rerr = ev ? rd_kafka_event_error(ev) : RD_KAFKA_RESP_ERR__TIMED_OUT;
    const char *reason = ev && rerr ? rd_kafka_event_error_string(ev) : rd_kafka_err2str(rerr);
    const rd_kafka_CreateTopics_result_t *res = ev ? rd_kafka_event_CreateTopics_result(ev) : NULL;
    size_t cnt = 0;
    const rd_kafka_topic_result_t **tr = res ? rd_kafka_CreateTopics_result_topics(res, &cnt) : NULL;
    if (!rerr && cnt == 1 && rd_kafka_topic_result_error(tr[0])) {
        rerr = rd_kafka_topic_result_error(tr[0]);
        reason = rd_kafka_topic_result_error_string(tr[0]);
    }
    bool done = true;
    if (rerr == RD_KAFKA_RESP_ERR_NO_ERROR) {
        KB_INFO("kafka", "sink=%s topic=%s checkpoint topic created (compacted)", ks->name, ks->ckpt_topic);
    } else if (rerr == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
        KB_DEBUG("kafka", "sink=%s topic=%s checkpoint topic exists", ks->name, ks->ckpt_topic);
    } else if (rerr == RD_KAFKA_RESP_ERR__TIMED_OUT || rerr == RD_KAFKA_RESP_ERR__TRANSPORT ||
               rerr == RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT || rerr == RD_KAFKA_RESP_ERR_NOT_CONTROLLER) {
        KB_WARN("kafka", "sink=%s topic=%s creating the checkpoint topic: %s; retrying", ks->name, ks->ckpt_topic,
                reason);
        done = false;
    } else {
        KB_WARN("kafka", "sink=%s topic=%s cannot create the checkpoint topic: %s; it must exist (compacted) for "
                "checkpoints to commit", ks->name, ks->ckpt_topic, reason);
    }
    if (ev)
        rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(q);
    rd_kafka_AdminOptions_destroy(opt);
    rd_kafka_NewTopic_destroy(nt);
    return done;
}

/* Get the transactional producer ready and a transaction open. Gate held
 * exclusively. False while not ready (broker away): call again later. */
static bool kb_kafka_txn_init(kb_kafka_sink_t *ks) {
    if (!ks->ckpt_topic_done)
        ks->ckpt_topic_done = kb_kafka_ckpt_topic_create(ks);
    if (!ks->ckpt_topic_done)
        return false;
    rd_kafka_error_t *e = rd_kafka_init_transactions(ks->rk, KB_KAFKA_TXN_TIMEOUT_MS);
    if (e) {
        kb_kafka_txn_error(ks, e, "initialising transactions");
        return false;
    }
    e = rd_kafka_begin_transaction(ks->rk);
    if (e) {
        kb_kafka_txn_error(ks, e, "beginning a transaction");
        atomic_store(&ks->fatal, true);
        return false;
    }
    ks->txn_started_ns = kb_now_mono_ns();
    atomic_store(&ks->txn_ready, true);
    kb_kafka_wake(ks);
    KB_INFO("kafka", "sink=%s transactional producer ready", ks->name);
    return true;
}

/* Produce the provider's checkpoint records into the open transaction and
 * free them. Gate held exclusively (nothing else produces), so the records
 * describe exactly what the transaction holds. KB_OK with no provider or
 * no records; an error means the transaction must abort. */
static kb_err_t kb_kafka_ckpt_produce(kb_kafka_sink_t *ks) {
    pthread_mutex_lock(&ks->mtx);
    kb_ckpt_provider_fn fn = ks->ckpt_fn;
    void *opaque = ks->ckpt_opaque;
    pthread_mutex_unlock(&ks->mtx);
    kb_ckpt_rec_t *recs = NULL;
    size_t n = 0;
    if (fn)
        fn(opaque, &recs, &n);
    kb_err_t err = KB_OK;
    int64_t deadline_ns = kb_now_mono_ns() + KB_KAFKA_TXN_TIMEOUT_MS * KB_NS_PER_MS;
    for (size_t i = 0; i < n; i++) {
        rd_kafka_resp_err_t rerr = RD_KAFKA_RESP_ERR_NO_ERROR;
        while (err == KB_OK) {
            rerr = rd_kafka_producev(ks->rk, RD_KAFKA_V_TOPIC(ks->ckpt_topic),
                                     RD_KAFKA_V_KEY(recs[i].key, strlen(recs[i].key)),
                                     RD_KAFKA_V_VALUE(recs[i].value, strlen(recs[i].value)),
                                     RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
            if (rerr != RD_KAFKA_RESP_ERR__QUEUE_FULL || kb_now_mono_ns() >= deadline_ns)
                break;
            if (rd_kafka_poll(ks->rk, KB_KAFKA_WAIT_SLICE_MS) > 0) /* serve delivery reports to make room */
                kb_kafka_wake(ks);
        }
        if (err == KB_OK && rerr != RD_KAFKA_RESP_ERR_NO_ERROR) {
            KB_WARN("kafka", "sink=%s topic=%s key=%s checkpoint record refused: %s; aborting the transaction",
                    ks->name, ks->ckpt_topic, recs[i].key, rd_kafka_err2str(rerr));
            err = KB_ERR_DELIVERY;
        }
        free(recs[i].key);
        free(recs[i].value);
    }
    free(recs);
    return err;
}

/* Commit the open transaction with its checkpoint records (retrying what
 * librdkafka calls retriable, aborting what must be aborted), settle its
 * acks, open the next one. Gate held exclusively. */
static void kb_kafka_txn_commit(kb_kafka_sink_t *ks) {
    kb_err_t outcome = kb_kafka_ckpt_produce(ks);
    while (outcome == KB_OK) {
        rd_kafka_error_t *e = rd_kafka_commit_transaction(ks->rk, KB_KAFKA_TXN_TIMEOUT_MS);
        if (!e)
            break;
        int verdict = kb_kafka_txn_error(ks, e, "committing a transaction");
        if (verdict > 0 && !atomic_load(&ks->stop))
            continue;
        outcome = KB_ERR_DELIVERY;
    }
    if (outcome != KB_OK && !atomic_load(&ks->fatal)) {
        rd_kafka_error_t *e = rd_kafka_abort_transaction(ks->rk, KB_KAFKA_TXN_TIMEOUT_MS);
        if (e)
            kb_kafka_txn_error(ks, e, "aborting a transaction");
    }
    atomic_store(&ks->txn_msgs, 0);
    kb_kafka_txn_settle(ks, outcome);
    kb_kafka_wake(ks);
    if (atomic_load(&ks->fatal))
        return;
    rd_kafka_error_t *e = rd_kafka_begin_transaction(ks->rk);
    if (e) {
        kb_kafka_txn_error(ks, e, "beginning a transaction");
        atomic_store(&ks->fatal, true);
    }
    ks->txn_started_ns = kb_now_mono_ns();
}

static void kb_kafka_txn_tick(kb_kafka_sink_t *ks) {
    bool now = atomic_exchange(&ks->commit_now, false);
    if (atomic_load(&ks->txn_msgs) == 0) {
        ks->txn_started_ns = kb_now_mono_ns();
        return;
    }
    if (!now && kb_now_mono_ns() - ks->txn_started_ns < ks->txn_ms * KB_NS_PER_MS)
        return;
    pthread_rwlock_wrlock(&ks->gate);
    if (!atomic_load(&ks->fatal))
        kb_kafka_txn_commit(ks);
    pthread_rwlock_unlock(&ks->gate);
}

/* ---- poller ------------------------------------------------------------ */

static void *kb_kafka_poller(void *arg) {
    kb_kafka_sink_t *ks = arg;
    char tname[16];
    snprintf(tname, sizeof(tname), "kb:kafka/%s", ks->name);
    kb_thread_set_name(tname);
    /* In transactional mode the gate stays closed until the producer is ready. */
    if (ks->transactional)
        pthread_rwlock_wrlock(&ks->gate);
    pthread_mutex_lock(&ks->mtx);
    ks->poller_up = true;
    pthread_cond_broadcast(&ks->cond);
    pthread_mutex_unlock(&ks->mtx);

    bool ready = !ks->transactional;
    while (!atomic_load(&ks->stop)) {
        if (!ready && !atomic_load(&ks->fatal) && !atomic_load(&ks->held)) {
            ready = kb_kafka_txn_init(ks);
            if (ready || atomic_load(&ks->fatal))
                pthread_rwlock_unlock(&ks->gate);
        }
        /* One wake-up per batch of delivery reports, not per ack: a
         * producer waiting for queue room retries once per batch. */
        if (rd_kafka_poll(ks->rk, 100) > 0)
            kb_kafka_wake(ks);
        if (!ks->transactional)
            continue;
        if (atomic_load(&ks->fatal))
            kb_kafka_txn_settle(ks, KB_ERR_DELIVERY); /* nothing will commit any more */
        else if (ready)
            kb_kafka_txn_tick(ks);
    }
    if (!ready && ks->transactional && !atomic_load(&ks->fatal))
        pthread_rwlock_unlock(&ks->gate);
    return NULL;
}

/* ---- lifecycle ------------------------------------------------------------ */

static kb_err_t kb_kafka_create(const kb_config_sink_t *conf, const kb_config_t *cfg, void **state, char *errstr,
                                size_t errstr_size) {
    rd_kafka_conf_t *rconf = kb_kafka_conf_build(conf, cfg, errstr, errstr_size);
    if (!rconf)
        return KB_ERR_CONFIG;
    kb_kafka_sink_t *ks = kb_calloc(1, sizeof(*ks));
    ks->name = kb_strdup(conf->name);
    ks->transactional = conf->transactional;
    const char *txn_env = getenv("KB_TEST_KAFKA_TXN_MS");
    long long txn_test = txn_env && *txn_env ? strtoll(txn_env, NULL, 10) : 0;
    ks->txn_ms = txn_test > 0 && txn_test <= 60000 ? txn_test : KB_KAFKA_TXN_MS; /* out of range: the default */
    atomic_store(&ks->held, conf->transactional && cfg->ha_enabled);
    ks->ckpt_topic = kb_strdup(conf->checkpoint_topic && conf->checkpoint_topic[0] ? conf->checkpoint_topic
                                                                                   : KB_KAFKA_CKPT_TOPIC_DEFAULT);
    if (ks->transactional)
        ks->cconf = kb_kafka_reader_conf(conf, cfg, ks);
    rd_kafka_conf_set_opaque(rconf, ks);
    rd_kafka_conf_set_dr_msg_cb(rconf, kb_kafka_dr_cb);
    rd_kafka_conf_set_log_cb(rconf, kb_kafka_log_cb);
    rd_kafka_conf_set_error_cb(rconf, kb_kafka_error_cb);
    rd_kafka_conf_set_stats_cb(rconf, kb_kafka_stats_cb);
    char why[512];
    ks->rk = rd_kafka_new(RD_KAFKA_PRODUCER, rconf, why, sizeof(why));
    if (!ks->rk) {
        rd_kafka_conf_destroy(rconf);
        snprintf(errstr, errstr_size, "%s:%d: sinks.%s: cannot create the Kafka producer: %s", cfg->path,
                 conf->line, conf->name, why);
        if (ks->cconf)
            rd_kafka_conf_destroy(ks->cconf);
        free(ks->ckpt_topic);
        free(ks->name);
        free(ks);
        return KB_ERR_CONFIG;
    }
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&ks->gate, &ra);
    pthread_rwlockattr_destroy(&ra);
    pthread_mutex_init(&ks->mtx, NULL);
    kb_cond_init_mono(&ks->cond);
    if (pthread_create(&ks->poller, NULL, kb_kafka_poller, ks) != 0)
        KB_FATAL("cannot start the Kafka poller thread");
    pthread_mutex_lock(&ks->mtx);
    while (!ks->poller_up)
        pthread_cond_wait(&ks->cond, &ks->mtx);
    pthread_mutex_unlock(&ks->mtx);
    KB_INFO("kafka", "sink=%s producer created brokers=%s transactional=%s", ks->name,
            conf->brokers && conf->brokers[0] ? conf->brokers : "(properties)", ks->transactional ? "true" : "false");
    *state = ks;
    return KB_OK;
}

/* Wait on cond until deadline or at most slice_ms. False once the deadline passed. */
static bool kb_kafka_wait(kb_kafka_sink_t *ks, int64_t deadline_ns, int64_t slice_ms) {
    int64_t now = kb_now_mono_ns();
    if (deadline_ns >= 0 && now >= deadline_ns)
        return false;
    int64_t ms = slice_ms;
    if (deadline_ns >= 0 && (deadline_ns - now) / KB_NS_PER_MS < ms)
        ms = (deadline_ns - now) / KB_NS_PER_MS + 1;
    struct timespec ts = kb_deadline_mono(ms);
    atomic_fetch_add(&ks->waiters, 1);
    pthread_mutex_lock(&ks->mtx);
    pthread_cond_timedwait(&ks->cond, &ks->mtx, &ts);
    pthread_mutex_unlock(&ks->mtx);
    atomic_fetch_sub(&ks->waiters, 1);
    return true;
}

static kb_err_t kb_kafka_produce_err(rd_kafka_resp_err_t rerr) {
    switch (rerr) {
    case RD_KAFKA_RESP_ERR__QUEUE_FULL: return KB_ERR_FULL;
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE: return KB_ERR_TOOBIG;
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
    case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION: return KB_ERR_NOTFOUND;
    case RD_KAFKA_RESP_ERR__STATE: return KB_ERR_STOPPED;
    default: return KB_ERR_DELIVERY;
    }
}

static void kb_kafka_header(rd_kafka_headers_t *h, const char *name, const char *v, size_t n) {
    rd_kafka_header_add(h, name, -1, v, (ssize_t)n);
}

/* The headers every record of msg carries; with ce, the CloudEvents ones too. */
static rd_kafka_headers_t *kb_kafka_headers(const kb_msg_t *msg, bool ce, const char *content_type) {
    const kb_event_t *ev = msg->ev;
    rd_kafka_headers_t *h = rd_kafka_headers_new(ce ? 14 : 5);
    const char *type = kb_event_type_name(ev->type);
    kb_kafka_header(h, "k8s-type", type, strlen(type));
    kb_kafka_header(h, "k8s-resource-version", ev->rv, ev->rv_len);
    kb_kafka_header(h, "k8s-uid", ev->uid, ev->uid_len);
    if (ev->final_state_unknown)
        kb_kafka_header(h, "k8s-final-state-unknown", "true", 4);
    if (content_type)
        kb_kafka_header(h, "content-type", content_type, strlen(content_type));
    if (!ce)
        return h;
    kb_ce_attr_t attrs[KB_CE_ATTR_COUNT];
    kb_buf_t storage = KB_BUF_INIT;
    kb_envelope_ce_attrs(ev, msg->key, msg->key_len, attrs, &storage);
    for (int i = 0; i < KB_CE_ATTR_COUNT; i++) {
        if (!strcmp(attrs[i].name, "datacontenttype"))
            continue; /* the Kafka binding carries it as content-type */
        char name[64];
        snprintf(name, sizeof(name), "ce_%s", attrs[i].name);
        kb_kafka_header(h, name, attrs[i].value, strlen(attrs[i].value));
    }
    kb_buf_fini(&storage);
    return h;
}

/* Enqueue one record; on QUEUE_FULL wait for room until deadline_ns (-1:
 * no deadline, until stop). On success librdkafka owns hdrs (and val with
 * RD_KAFKA_MSG_F_FREE); on error the caller still does. */
static kb_err_t kb_kafka_send(kb_kafka_sink_t *ks, const kb_msg_t *msg, void *val, size_t len, int flags,
                              rd_kafka_headers_t *hdrs, kb_kafka_msg_t *km, int64_t deadline_ns) {
    for (;;) {
        rd_kafka_resp_err_t rerr = rd_kafka_producev(
            ks->rk, RD_KAFKA_V_TOPIC(msg->topic), RD_KAFKA_V_KEY(msg->key, msg->key_len),
            RD_KAFKA_V_VALUE(val, len), RD_KAFKA_V_MSGFLAGS(flags), RD_KAFKA_V_HEADERS(hdrs),
            RD_KAFKA_V_OPAQUE(km), RD_KAFKA_V_END);
        if (rerr == RD_KAFKA_RESP_ERR_NO_ERROR)
            return KB_OK;
        if (rerr != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            KB_DEBUG("kafka", "sink=%s topic=%s produce refused: %s", ks->name, msg->topic, rd_kafka_err2str(rerr));
            return kb_kafka_produce_err(rerr);
        }
        if (atomic_load(&ks->stop) || !kb_kafka_wait(ks, deadline_ns, KB_KAFKA_WAIT_SLICE_MS))
            return KB_ERR_FULL;
    }
}

/* Take the gate shared (transactional mode), waiting until deadline_ns. */
static bool kb_kafka_gate_enter(kb_kafka_sink_t *ks, int64_t deadline_ns) {
    if (!ks->transactional)
        return true;
    if (deadline_ns < 0)
        return pthread_rwlock_rdlock(&ks->gate) == 0;
    struct timespec ts = {.tv_sec = deadline_ns / KB_NS_PER_SEC, .tv_nsec = deadline_ns % KB_NS_PER_SEC};
    return pthread_rwlock_clockrdlock(&ks->gate, CLOCK_MONOTONIC, &ts) == 0;
}

static void kb_kafka_gate_leave(kb_kafka_sink_t *ks) {
    if (ks->transactional)
        pthread_rwlock_unlock(&ks->gate);
}

/* The whole change is inside the open transaction: tell the producer while
 * the gate is still held shared, so no commit falls in between. */
static void kb_kafka_enqueued(kb_kafka_sink_t *ks, const kb_msg_t *msg) {
    if (ks->transactional && msg->enqueued)
        msg->enqueued(msg->ack_opaque);
}

/* Free what produce() built for a record librdkafka did not take. */
static void kb_kafka_unsent(kb_kafka_msg_t *km, void *val, int flags, rd_kafka_headers_t *hdrs) {
    rd_kafka_headers_destroy(hdrs);
    if (flags & RD_KAFKA_MSG_F_FREE)
        free(val);
    kb_event_unref(km->ev);
    free(km);
}

static kb_err_t kb_kafka_produce_raw(kb_kafka_sink_t *ks, const kb_msg_t *msg, int timeout_ms);

static kb_err_t kb_kafka_produce(void *state, const kb_msg_t *msg, int timeout_ms) {
    kb_kafka_sink_t *ks = state;
    const kb_event_t *ev = msg->ev;
    if (atomic_load(&ks->fatal))
        return KB_ERR_DELIVERY;
    if (atomic_load(&ks->stop))
        return KB_ERR_STOPPED;
    if (!ev)
        return kb_kafka_produce_raw(ks, msg, timeout_ms);
    const bool state_mode = msg->mode == KB_MODE_STATE;
    const bool tombstone = state_mode && ev->type == KB_EV_DELETED;
    const int64_t deadline_ns = timeout_ms < 0 ? -1 : kb_now_mono_ns() + timeout_ms * KB_NS_PER_MS;

    kb_kafka_msg_t *km = kb_calloc(1, sizeof(*km));
    km->ack = msg->ack;
    km->ack_opaque = msg->ack_opaque;
    atomic_init(&km->parts, tombstone ? 2 : 1);
    atomic_init(&km->err, KB_OK);

    /* The value: the object itself (no copy) or an envelope librdkafka frees. */
    void *val;
    size_t len;
    int flags = 0;
    const char *ctype = "application/json";
    if (msg->format == KB_FORMAT_CE_BINARY || (state_mode && msg->format == KB_FORMAT_JSON)) {
        km->ev = kb_event_ref(msg->ev);
        val = (void *)ev->obj;
        len = ev->obj_len;
    } else {
        kb_buf_t buf = KB_BUF_INIT;
        if (msg->format == KB_FORMAT_CE_STRUCTURED) {
            kb_envelope_ce_structured(ev, msg->key, msg->key_len, &buf);
            ctype = "application/cloudevents+json";
        } else {
            kb_envelope_json(ev, &buf);
        }
        val = kb_buf_steal(&buf, &len);
        flags = RD_KAFKA_MSG_F_FREE;
    }
    km->bytes = len;
    rd_kafka_headers_t *hdrs = kb_kafka_headers(msg, msg->format == KB_FORMAT_CE_BINARY, ctype);

    if (!kb_kafka_gate_enter(ks, deadline_ns)) {
        kb_kafka_unsent(km, val, flags, hdrs);
        return KB_ERR_FULL;
    }
    /* Count before enqueueing: the delivery report may come at once. */
    atomic_fetch_add(&ks->outstanding, 1);
    atomic_fetch_add(&ks->queue_bytes, len);
    kb_err_t err = kb_kafka_send(ks, msg, val, len, flags, hdrs, km, deadline_ns);
    if (err != KB_OK) {
        kb_kafka_gate_leave(ks);
        atomic_fetch_sub(&ks->outstanding, 1);
        atomic_fetch_sub(&ks->queue_bytes, len);
        kb_kafka_unsent(km, val, flags, hdrs);
        return err;
    }
    atomic_fetch_add(&ks->produced, 1);
    if (ks->transactional)
        atomic_fetch_add(&ks->txn_msgs, 1);
    if (tombstone) {
        /* The DELETED record is on its way, so the change will be acked
         * whatever happens here; a tombstone that cannot be enqueued turns
         * that ack into an error (the bridge retries the whole change). */
        rd_kafka_headers_t *th = kb_kafka_headers(msg, false, NULL);
        int64_t td = deadline_ns < 0 ? -1 : deadline_ns + KB_KAFKA_TOMBSTONE_GRACE_MS * KB_NS_PER_MS;
        kb_err_t terr = kb_kafka_send(ks, msg, NULL, 0, 0, th, km, td);
        if (terr != KB_OK) {
            rd_kafka_headers_destroy(th);
            kb_kafka_part_done(ks, km, terr);
            kb_kafka_gate_leave(ks); /* not whole in the transaction: no enqueued() */
            return KB_OK;
        }
    }
    kb_kafka_enqueued(ks, msg);
    kb_kafka_gate_leave(ks);
    return KB_OK;
}

static kb_err_t kb_kafka_flush(void *state, int timeout_ms) {
    kb_kafka_sink_t *ks = state;
    int64_t deadline_ns = timeout_ms < 0 ? -1 : kb_now_mono_ns() + timeout_ms * KB_NS_PER_MS;
    while (atomic_load(&ks->outstanding) > 0) {
        if (ks->transactional)
            atomic_store(&ks->commit_now, true);
        if (!kb_kafka_wait(ks, deadline_ns, 50))
            return KB_ERR_TIMEDOUT;
    }
    return KB_OK;
}

static void kb_kafka_stats(void *state, kb_sink_stats_t *st) {
    kb_kafka_sink_t *ks = state;
    st->produced = atomic_load(&ks->produced);
    st->acked = atomic_load(&ks->acked);
    st->failed = atomic_load(&ks->failed);
    st->retries = atomic_load(&ks->retries);
    st->queue_bytes = atomic_load(&ks->queue_bytes);
    st->connected = atomic_load(&ks->connected) && !atomic_load(&ks->fatal);
    st->broken = atomic_load(&ks->fatal);
}

/* Stop the poller, give every message still inside librdkafka its ack
 * (KB_ERR_STOPPED), destroy the producer. Bounded: a few seconds at most. */
static void kb_kafka_destroy(void *state) {
    kb_kafka_sink_t *ks = state;
    if (!ks)
        return;
    atomic_store(&ks->stop, true);
    pthread_join(ks->poller, NULL);
    if (atomic_load(&ks->outstanding) > 0) {
        KB_WARN("kafka", "sink=%s %llu changes not delivered at stop; they stay unacknowledged", ks->name,
                (unsigned long long)atomic_load(&ks->outstanding));
        rd_kafka_purge(ks->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        for (int i = 0; i < 50 && rd_kafka_outq_len(ks->rk) > 0; i++)
            rd_kafka_poll(ks->rk, 100);
        kb_kafka_txn_settle(ks, KB_ERR_STOPPED);
    }
    rd_kafka_destroy(ks->rk);
    pthread_cond_destroy(&ks->cond);
    pthread_mutex_destroy(&ks->mtx);
    pthread_rwlock_destroy(&ks->gate);
    if (ks->cconf)
        rd_kafka_conf_destroy(ks->cconf);
    free(ks->ckpt_topic);
    free(ks->name);
    free(ks);
}

/* A raw record (a heartbeat): the bytes as the value, content-type only. */
static kb_err_t kb_kafka_produce_raw(kb_kafka_sink_t *ks, const kb_msg_t *msg, int timeout_ms) {
    const int64_t deadline_ns = timeout_ms < 0 ? -1 : kb_now_mono_ns() + timeout_ms * KB_NS_PER_MS;
    kb_kafka_msg_t *km = kb_calloc(1, sizeof(*km));
    km->ack = msg->ack;
    km->ack_opaque = msg->ack_opaque;
    atomic_init(&km->parts, 1);
    atomic_init(&km->err, KB_OK);
    void *val = kb_memdup(msg->raw, msg->raw_len);
    size_t len = msg->raw_len;
    km->bytes = len;
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(1);
    kb_kafka_header(hdrs, "content-type", "application/json", 16);
    if (!kb_kafka_gate_enter(ks, deadline_ns)) {
        kb_kafka_unsent(km, val, RD_KAFKA_MSG_F_FREE, hdrs);
        return KB_ERR_FULL;
    }
    atomic_fetch_add(&ks->outstanding, 1);
    atomic_fetch_add(&ks->queue_bytes, len);
    kb_err_t err = kb_kafka_send(ks, msg, val, len, RD_KAFKA_MSG_F_FREE, hdrs, km, deadline_ns);
    if (err != KB_OK) {
        kb_kafka_gate_leave(ks);
        atomic_fetch_sub(&ks->outstanding, 1);
        atomic_fetch_sub(&ks->queue_bytes, len);
        kb_kafka_unsent(km, val, RD_KAFKA_MSG_F_FREE, hdrs);
        return err;
    }
    atomic_fetch_add(&ks->produced, 1);
    if (ks->transactional)
        atomic_fetch_add(&ks->txn_msgs, 1);
    kb_kafka_enqueued(ks, msg);
    kb_kafka_gate_leave(ks);
    return KB_OK;
}

/* ---- checkpoints (transactional mode) ------------------------------------ */

static bool kb_kafka_is_transactional(void *state) {
    const kb_kafka_sink_t *ks = state;
    return ks->transactional;
}

static void kb_kafka_set_checkpoint_provider(void *state, kb_ckpt_provider_fn fn, void *opaque) {
    kb_kafka_sink_t *ks = state;
    pthread_mutex_lock(&ks->mtx);
    ks->ckpt_fn = fn;
    ks->ckpt_opaque = opaque;
    pthread_mutex_unlock(&ks->mtx);
}

/* Milliseconds left until deadline_ns, at least 1. */
static int kb_kafka_ms_left(int64_t deadline_ns) {
    int64_t ms = (deadline_ns - kb_now_mono_ns()) / KB_NS_PER_MS;
    return ms < 1 ? 1 : ms > INT32_MAX ? INT32_MAX : (int)ms;
}

/* One checkpoint read: the end of every partition of the topic (high
 * watermark when the read starts), what is read so far. */
typedef struct kb_kafka_ckpt_read {
    int n_parts;
    int64_t *end;       /* per partition: read up to here */
    bool *done;         /* per partition */
    int n_done;
    char *value;        /* the key's last value (NULL after a tombstone); malloc'd */
    bool found;
} kb_kafka_ckpt_read_t;

/* Find the partitions and their ends, assign the unfinished ones from the
 * beginning. KB_ERR_NOTFOUND when the topic does not exist. */
static kb_err_t kb_kafka_ckpt_assign(kb_kafka_sink_t *ks, rd_kafka_t *rk, kb_kafka_ckpt_read_t *rd,
                                     int64_t deadline_ns) {
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, ks->ckpt_topic, NULL);
    const rd_kafka_metadata_t *md = NULL;
    rd_kafka_resp_err_t rerr = rd_kafka_metadata(rk, 0, rkt, &md, kb_kafka_ms_left(deadline_ns));
    rd_kafka_topic_destroy(rkt);
    if (rerr)
        return rerr == RD_KAFKA_RESP_ERR__TIMED_OUT ? KB_ERR_TIMEDOUT : KB_ERR_CONNECT;
    rerr = md->topic_cnt == 1 ? md->topics[0].err : RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
    rd->n_parts = rerr ? 0 : md->topics[0].partition_cnt;
    rd_kafka_metadata_destroy(md);
    if (rerr == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
        return KB_ERR_NOTFOUND;
    if (rerr)
        return KB_ERR_UNAVAILABLE;
    rd->end = kb_calloc((size_t)rd->n_parts + 1, sizeof(*rd->end));
    rd->done = kb_calloc((size_t)rd->n_parts + 1, sizeof(*rd->done));
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(rd->n_parts);
    for (int p = 0; p < rd->n_parts; p++) {
        int64_t lo = 0, hi = 0;
        rerr = rd_kafka_query_watermark_offsets(rk, ks->ckpt_topic, p, &lo, &hi, kb_kafka_ms_left(deadline_ns));
        if (rerr)
            break;
        rd->end[p] = hi;
        rd->done[p] = hi <= lo;
        rd->n_done += rd->done[p];
        if (!rd->done[p])
            rd_kafka_topic_partition_list_add(parts, ks->ckpt_topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    }
    if (!rerr && parts->cnt > 0)
        rerr = rd_kafka_assign(rk, parts);
    rd_kafka_topic_partition_list_destroy(parts);
    if (rerr)
        KB_WARN("kafka", "sink=%s topic=%s reading checkpoints: %s", ks->name, ks->ckpt_topic,
                rd_kafka_err2str(rerr));
    return !rerr ? KB_OK : rerr == RD_KAFKA_RESP_ERR__TIMED_OUT ? KB_ERR_TIMEDOUT : KB_ERR_UNAVAILABLE;
}

/* Take one consumed message (or partition EOF) into rd. */
static void kb_kafka_ckpt_take(kb_kafka_ckpt_read_t *rd, const rd_kafka_message_t *m, const char *key) {
    if (m->partition < 0 || m->partition >= rd->n_parts || rd->done[m->partition])
        return;
    int64_t next = m->offset + 1; /* EOF's offset is the next one to fetch */
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        next = m->offset;
    } else if (m->err) {
        return;
    } else if (m->key_len == strlen(key) && !memcmp(m->key, key, m->key_len)) {
        free(rd->value);
        rd->value = m->payload ? kb_strndup(m->payload, m->len) : NULL;
        rd->found = m->payload != NULL;
    }
    if (next >= rd->end[m->partition]) {
        rd->done[m->partition] = true;
        rd->n_done++;
    }
}

/* Wait until transactions are initialised: any transaction a killed
 * predecessor left open is aborted by then, so the committed end is near. */
static kb_err_t kb_kafka_wait_txn_ready(kb_kafka_sink_t *ks, int64_t deadline_ns) {
    while (!atomic_load(&ks->txn_ready)) {
        if (atomic_load(&ks->fatal))
            return KB_ERR_DELIVERY;
        if (!kb_kafka_wait(ks, deadline_ns, 50))
            return KB_ERR_TIMEDOUT;
    }
    return KB_OK;
}

static kb_err_t kb_kafka_read_checkpoint(void *state, const char *key, char *value, size_t value_size,
                                         int timeout_ms) {
    kb_kafka_sink_t *ks = state;
    if (!ks->transactional)
        return KB_ERR_UNSUPPORTED;
    const int64_t deadline_ns = kb_now_mono_ns() + (timeout_ms < 0 ? INT32_MAX : timeout_ms) * KB_NS_PER_MS;
    kb_err_t err = kb_kafka_wait_txn_ready(ks, deadline_ns);
    if (err != KB_OK)
        return err;
    char why[512];
    rd_kafka_conf_t *rconf = rd_kafka_conf_dup(ks->cconf);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, rconf, why, sizeof(why));
    if (!rk) {
        rd_kafka_conf_destroy(rconf);
        KB_ERROR("kafka", "sink=%s cannot create the checkpoint reader: %s", ks->name, why);
        return KB_ERR_INTERNAL;
    }
    kb_kafka_ckpt_read_t rd = {0};
    err = kb_kafka_ckpt_assign(ks, rk, &rd, deadline_ns);
    while (err == KB_OK && rd.n_done < rd.n_parts) {
        if (kb_now_mono_ns() >= deadline_ns) {
            err = KB_ERR_TIMEDOUT;
            break;
        }
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, kb_kafka_ms_left(deadline_ns) < 100 ? 10 : 100);
        if (!m)
            continue;
        kb_kafka_ckpt_take(&rd, m, key);
        rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    if (err == KB_OK && !rd.found)
        err = KB_ERR_NOTFOUND;
    else if (err == KB_OK && strlen(rd.value) >= value_size)
        err = KB_ERR_TOOBIG;
    else if (err == KB_OK)
        memcpy(value, rd.value, strlen(rd.value) + 1);
    KB_INFO("kafka", "sink=%s topic=%s key=%s checkpoint read: %s", ks->name, ks->ckpt_topic, key,
            err == KB_OK ? value : kb_err_str(err));
    free(rd.value);
    free(rd.end);
    free(rd.done);
    return err;
}

/* ha.enabled: this replica leads; the poller initialises transactions
 * (fencing the previous leader's producer) on its next turn. A producer the
 * broker fenced while this replica led before stays fatal: that replica must
 * restart to deliver through this sink again (stats say broken, so /healthz
 * fails and a liveness probe restarts it; logged when it is asked to lead). */
static void kb_kafka_activate(void *state) {
    kb_kafka_sink_t *ks = state;
    if (ks->transactional && atomic_exchange(&ks->held, false))
        KB_INFO("kafka", "sink=%s leading: initialising transactions (this fences the previous leader's producer)",
                ks->name);
    else if (ks->transactional && atomic_load(&ks->fatal))
        KB_ERROR("kafka", "sink=%s leading again with a producer that is fenced or failed: it delivers nothing; "
                 "restart this replica", ks->name);
}

const kb_sink_ops_t kb_sink_kafka_ops = {
    .type = "kafka",
    .validate = kb_kafka_validate,
    .create = kb_kafka_create,
    .produce = kb_kafka_produce,
    .flush = kb_kafka_flush,
    .stats = kb_kafka_stats,
    .destroy = kb_kafka_destroy,
    .is_transactional = kb_kafka_is_transactional,
    .set_checkpoint_provider = kb_kafka_set_checkpoint_provider,
    .read_checkpoint = kb_kafka_read_checkpoint,
    .activate = kb_kafka_activate,
};
