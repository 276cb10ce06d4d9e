/* bridge/main.c — the kbridge command: read like a start-up script.
 *
 *   parse arguments → load and validate the config (exit 2 on any error,
 *   before anything starts) → block signals → build the bridge → start →
 *   wait for a signal with sigwaitinfo → drain within shutdown_timeout →
 *   exit 0 (1 when changes were left unacknowledged and no state_dir holds
 *   them for the next start).
 *
 * Signals are blocked before any thread exists, so every thread inherits the
 * mask and only this thread ever sees SIGTERM/SIGINT/SIGHUP: no handlers.
 * This thread never waits for anything but a signal, so a SIGTERM is always
 * taken at once: a reload runs on its own thread (kb:reload), because a
 * reload may wait — for a worker handing a batch to a full sink, for HTTP
 * readers (bridge.h has its steps). The reloader's states:
 *
 *   state    SIGHUP                              reload ends             SIGTERM/SIGINT
 *   idle     → running                           —                       → stopping
 *   running  → running+again; a reload still     → idle                  → stopping: a reload
 *            waiting gives up (nothing changed)                          still waiting gives up
 *   r+again  (coalesced: stays r+again)          → running (reads the    → stopping
 *                                                file again)
 *
 * So SIGHUPs during a reload are coalesced into one more reload that reads
 * the file as it is then: the last one is never lost. On SIGTERM the
 * watchdog starts first, then the reloader is told to stop and joined (a
 * reload that has begun to change things finishes its bounded steps), then
 * the drain gets what is left of shutdown_timeout.
 *
 * While stopping, a watchdog thread takes over sigtimedwait: a second
 * SIGTERM/SIGINT, or shutdown_timeout + 1 s without the drain ending (a sink
 * blocked in a library call), ends the process at once with the same last
 * line and exit status as a drain that ended on its own (exit 1 only when
 * messages were lost: no state_dir). Its level says what was lost, not how
 * the stop came: GNU timeout sends SIGTERM to the child and then to its
 * group, so a second signal is routine. Shutdown is bounded whatever a sink
 * or a reload does.
 */
#include "bridge/bridge.h"
#include "bridge/cli.h"
#include "bridge/http.h"

#include "common/alloc.h"
#include "common/log.h"
#include "common/secret.h"
#include "common/time.h"
#include "config/config.h"
#include "tests/kubesim/kubesim.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { KB_EXIT_OK = 0, KB_EXIT_RUNTIME = 1, KB_EXIT_USAGE = 2 };

static void kb_setup_logging(const kb_config_t *cfg) {
    int level = kb_log_level_parse(cfg->log_level);
    kb_log_setup(level < 0 ? KB_LOG_INFO : (kb_log_level_t)level, cfg->log_format && !strcmp(cfg->log_format, "json"));
}

/* The reload thread and its state (the table above). */
typedef struct kb_reloader {
    kb_bridge_t *b;
    const char *path;
    pthread_mutex_t mtx;
    pthread_cond_t cond;
    bool again;                    /* mtx: a SIGHUP not yet taken up by a reload */
    bool running;                  /* mtx: a reload runs */
    bool quit;                     /* mtx: stopping; no reload starts any more */
    _Atomic bool abandon;          /* a reload still waiting gives up (set under mtx) */
    _Atomic int shutdown_timeout;  /* of the running config, seconds */
    pthread_t thread;
} kb_reloader_t;

/* One reload: reopen file sinks, read the config file again and apply it
 * (on any error keep running as we are), then try again every sink that had
 * stopped after a refusal. Thread: kb:reload. */
static void kb_reload(kb_reloader_t *r) {
    char errstr[1024];
    kb_bridge_reopen_sinks(r->b); /* first: a change delivered after this line goes to the reopened file */
    KB_INFO("main", "reloading %s (and reopening file sinks)", r->path);
    char **stopped;
    size_t n_stopped = kb_bridge_stopped_sinks(r->b, &stopped);
    kb_config_t *ncfg = kb_config_load(r->path, errstr, sizeof(errstr));
    kb_err_t err = ncfg ? kb_bridge_reload(r->b, ncfg, &r->abandon, errstr, sizeof(errstr)) : KB_ERR_CONFIG;
    if (err == KB_ERR_STOPPED) {
        KB_WARN("main", "reload %s", errstr);
    } else if (err != KB_OK) {
        KB_ERROR("main", "reload refused, keeping the running configuration: %s", errstr);
    } else {
        kb_setup_logging(ncfg);
        atomic_store(&r->shutdown_timeout, ncfg->shutdown_timeout);
        ncfg = NULL; /* the bridge's now */
    }
    kb_config_free(ncfg);
    if (n_stopped && !atomic_load(&r->abandon))
        KB_INFO("main", "SIGHUP: %zu stopped sink(s) tried again; %zu informer(s) reopened", n_stopped,
                kb_bridge_retry_sinks(r->b, stopped, n_stopped));
    for (size_t i = 0; i < n_stopped; i++)
        free(stopped[i]);
    free(stopped);
}

static void *kb_reloader_main(void *arg) {
    kb_reloader_t *r = arg;
    kb_thread_set_name("kb:reload");
    pthread_mutex_lock(&r->mtx);
    for (;;) {
        while (!r->again && !r->quit)
            pthread_cond_wait(&r->cond, &r->mtx);
        if (r->quit)
            break;
        r->again = false;
        r->running = true;
        atomic_store(&r->abandon, false);
        pthread_mutex_unlock(&r->mtx);
        kb_reload(r);
        pthread_mutex_lock(&r->mtx);
        r->running = false;
    }
    pthread_mutex_unlock(&r->mtx);
    return NULL;
}

static void kb_reloader_start(kb_reloader_t *r, kb_bridge_t *b, const kb_config_t *cfg) {
    *r = (kb_reloader_t){.b = b, .path = cfg->path};
    pthread_mutex_init(&r->mtx, NULL);
    pthread_cond_init(&r->cond, NULL);
    atomic_init(&r->abandon, false);
    atomic_init(&r->shutdown_timeout, cfg->shutdown_timeout);
    if (pthread_create(&r->thread, NULL, kb_reloader_main, r) != 0)
        KB_FATAL("cannot start the reload thread");
}

/* SIGHUP. Never waits for a reload. Thread: main. */
static void kb_reloader_ask(kb_reloader_t *r) {
    pthread_mutex_lock(&r->mtx);
    if (r->running)
        KB_INFO("main", "SIGHUP received during a reload: coalesced; %s is read again when the reload ends (one "
                "still waiting gives up for it)", r->path);
    else
        KB_INFO("main", "SIGHUP received: reopening file sinks, reloading %s", r->path);
    r->again = true;
    if (r->running)
        atomic_store(&r->abandon, true);
    pthread_cond_signal(&r->cond);
    pthread_mutex_unlock(&r->mtx);
}

/* SIGTERM: no reload starts any more, one still waiting gives up. Never waits. */
static void kb_reloader_quit(kb_reloader_t *r) {
    pthread_mutex_lock(&r->mtx);
    r->quit = true;
    atomic_store(&r->abandon, true);
    if (r->running)
        KB_INFO("main", "stopping during a reload: a reload still waiting gives up, one already applying finishes");
    pthread_cond_signal(&r->cond);
    pthread_mutex_unlock(&r->mtx);
}

static void kb_reloader_join(kb_reloader_t *r) {
    pthread_join(r->thread, NULL);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->mtx);
}

/* What the last line says about changes the sinks did not acknowledge, and
 * the exit code that goes with it: with state_dir they are delivered again at
 * the next start (not a loss); without, they are gone (exit 1). */
static int kb_stop_verdict(kb_bridge_t *b, const char *state_dir, const char *how, char *line, size_t size,
                           bool *all_acked) {
    uint64_t left = kb_bridge_unacknowledged(b);
    *all_acked = left == 0;
    bool persistent = state_dir[0] != '\0';
    if (left == UINT64_MAX) {
        snprintf(line, size, "%s; how many messages were not acknowledged is unknown (a reload held the bridge)%s",
                 how, persistent ? "; state_dir keeps them and the next start delivers them again" : "");
        return persistent ? KB_EXIT_OK : KB_EXIT_RUNTIME;
    }
    if (left == 0) {
        snprintf(line, size, "%s: every message handed to a sink was acknowledged", how);
        return KB_EXIT_OK;
    }
    if (persistent) {
        snprintf(line, size, "%s with %llu message(s) not acknowledged; state_dir %s keeps them and the next start "
                 "delivers them again", how, (unsigned long long)left, state_dir);
        return KB_EXIT_OK;
    }
    snprintf(line, size, "%s with %llu message(s) not acknowledged and no state_dir to deliver them again: they are "
             "lost to the sinks that missed them", how, (unsigned long long)left);
    return KB_EXIT_RUNTIME;
}

/* The drain watchdog: see the design note above. */
typedef struct kb_watchdog {
    kb_bridge_t *b;
    const char *state_dir; /* cannot change on reload */
    const sigset_t *sigs;
    int64_t deadline_ns;   /* monotonic */
    _Atomic bool done;     /* the drain ended on its own */
    bool by_signal;        /* the watchdog's own: a second signal, not the deadline, ended the drain */
    pthread_t thread;
} kb_watchdog_t;

static void *kb_watchdog_main(void *arg) {
    kb_watchdog_t *wd = arg;
    kb_thread_set_name("kb:watchdog");
    const char *why = NULL;
    while (!atomic_load(&wd->done) && !why) {
        struct timespec slice = {.tv_sec = 0, .tv_nsec = 100 * KB_NS_PER_MS};
        int sig = sigtimedwait(wd->sigs, NULL, &slice);
        if (sig == SIGTERM || sig == SIGINT) {
            why = sig == SIGTERM ? "a second SIGTERM" : "a second SIGINT";
            wd->by_signal = true;
        }
        else if (sig == SIGHUP)
            KB_INFO("main", "SIGHUP while stopping: ignored");
        else if (kb_now_mono_ns() >= wd->deadline_ns)
            why = "shutdown_timeout + 1 s passed";
    }
    if (atomic_load(&wd->done))
        return NULL;
    char line[512];
    bool all_acked;
    int rc = kb_stop_verdict(wd->b, wd->state_dir, "stopped at once", line, sizeof(line), &all_acked);
    /* The level follows what was lost, not how the stop came: GNU timeout
     * sends its SIGTERM twice (child, then group), and nothing lost is no error.
     * Nothing lost at the deadline still says the drain hung on something. */
    kb_log_level_t level = rc != KB_EXIT_OK                 ? KB_LOG_ERROR
                           : !all_acked || !wd->by_signal ? KB_LOG_WARN
                                                          : KB_LOG_INFO;
    kb_log(level, "main", "%s while draining: %s", why, line);
    _exit(rc);
}

/* Take signals until SIGTERM/SIGINT (returned; -1 if sigwaitinfo failed),
 * handing each SIGHUP to the reloader. */
static int kb_wait_for_stop(const sigset_t *sigs, kb_reloader_t *r) {
    for (;;) {
        siginfo_t si;
        int sig = sigwaitinfo(sigs, &si);
        if (sig == SIGHUP)
            kb_reloader_ask(r);
        else if (sig >= 0)
            return sig;
        else if (errno != EINTR)
            break;
    }
    KB_ERROR("main", "sigwaitinfo: %s", strerror(errno));
    return -1;
}

/* Run until SIGTERM/SIGINT; returns the exit code. */
static int kb_run(const kb_config_t *cfg, const sigset_t *sigs) {
    char errstr[1024];
    kb_bridge_t *b = kb_bridge_new(cfg, errstr, sizeof(errstr));
    if (!b) {
        fprintf(stderr, "kbridge: %s\n", errstr);
        return KB_EXIT_USAGE;
    }
    KB_INFO("main", "kbridge %s starting: cluster=%s informers=%zu sinks=%zu routes=%zu", KB_VERSION,
            cfg->cluster.name, cfg->n_informers, cfg->n_sinks, cfg->n_routes);
    kb_bridge_start(b);
    kb_http_t *http = NULL;
    if (kb_http_start(b, &http, errstr, sizeof(errstr)) != KB_OK) {
        KB_ERROR("main", "%s", errstr);
        kb_bridge_stop(b, 0);
        kb_bridge_destroy(b);
        return KB_EXIT_RUNTIME;
    }
    kb_reloader_t reloader;
    kb_reloader_start(&reloader, b, cfg);
    int sig = kb_wait_for_stop(sigs, &reloader);
    /* The running config's: a reload may have changed shutdown_timeout. */
    int timeout_s = atomic_load(&reloader.shutdown_timeout);
    KB_INFO("main", "%s received: draining (shutdown_timeout=%ds; a second signal stops at once)",
            sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "sigwaitinfo failed", timeout_s);
    int64_t drain_end = kb_now_mono_ns() + (int64_t)timeout_s * KB_NS_PER_SEC;
    kb_watchdog_t wd = {.b = b, .state_dir = cfg->state_dir, .sigs = sigs, .deadline_ns = drain_end + KB_NS_PER_SEC};
    atomic_init(&wd.done, false);
    if (pthread_create(&wd.thread, NULL, kb_watchdog_main, &wd) != 0)
        KB_FATAL("cannot start the shutdown watchdog");
    kb_reloader_quit(&reloader);
    kb_http_stop(http);
    kb_reloader_join(&reloader);
    int64_t left_ms = (drain_end - kb_now_mono_ns()) / KB_NS_PER_MS;
    (void)kb_bridge_stop(b, left_ms > 0 ? (int)left_ms : 0);
    char line[512];
    bool all_acked;
    int rc = kb_stop_verdict(b, cfg->state_dir, "stopped", line, sizeof(line), &all_acked);
    atomic_store(&wd.done, true);
    pthread_join(wd.thread, NULL);
    kb_bridge_log_stats(b);
    kb_bridge_destroy(b);
    if (rc == KB_EXIT_OK)
        KB_INFO("main", "%s", line);
    else
        KB_ERROR("main", "%s", line);
    return rc;
}

int main(int argc, char **argv) {
    struct option opts[16] = {{0}};
    KB_ASSERT(kb_cli_n_opts < 16);
    for (int i = 0; i < kb_cli_n_opts; i++)
        opts[i] = (struct option){kb_cli_opts[i].name, kb_cli_opts[i].arg ? required_argument : no_argument, NULL,
                                  kb_cli_opts[i].id};
    const char *config_path = NULL;
    bool check = false, demo = false;
    int c;
    while ((c = getopt_long(argc, argv, "c:Vh", opts, NULL)) != -1) {
        switch (c) {
        case 'c': config_path = optarg; break;
        case KB_OPT_CHECK: check = true; break;
        case KB_OPT_DEMO: demo = true; break;
        case KB_OPT_HELP_CONFIG: kb_config_print_reference(stdout, false); return KB_EXIT_OK;
        case KB_OPT_HELP_MAN: kb_cli_man(stdout); return KB_EXIT_OK;
        case KB_OPT_HELP_COMPLETION: kb_cli_bash_completion(stdout); return KB_EXIT_OK;
        case 'V': printf("kbridge %s\n", KB_VERSION); return KB_EXIT_OK;
        case 'h': kb_cli_usage(stdout); return KB_EXIT_OK;
        default: kb_cli_usage(stderr); return KB_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "kbridge: unexpected argument \"%s\"\n", argv[optind]);
        kb_cli_usage(stderr);
        return KB_EXIT_USAGE;
    }
    if (demo == (config_path != NULL) || (check && !config_path)) {
        fprintf(stderr, "kbridge: give exactly one of --config FILE or --demo%s\n",
                check ? " (--check needs --config)" : "");
        kb_cli_usage(stderr);
        return KB_EXIT_USAGE;
    }

    /* The config may hold secrets inline (Kafka sasl.password) and every
     * token file is read into memory: no core dump may carry them. */
    kb_secret_no_core_dumps();

    /* Block the signals we wait for before any thread starts. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    char errstr[1024];
    kb_sim_t *sim = NULL;
    kb_config_t *cfg = NULL;
    if (demo) {
        kb_sim_opts_t so = {.host = "127.0.0.1", .port = 0, .demo_objects = 12, .demo_rate = 2.0};
        sim = kb_sim_start(&so, errstr, sizeof(errstr));
        if (!sim) {
            fprintf(stderr, "kbridge: cannot start the demo simulator: %s\n", errstr);
            return KB_EXIT_RUNTIME;
        }
        char *text = kb_demo_config_text(kb_sim_port(sim));
        cfg = kb_config_load_string(text, "<demo>", errstr, sizeof(errstr));
        free(text);
        fprintf(stderr, "kbridge --demo: simulator on 127.0.0.1:%d; streaming its pods as JSON Lines; Ctrl-C stops\n",
                kb_sim_port(sim));
    } else {
        cfg = kb_config_load(config_path, errstr, sizeof(errstr));
    }
    if (!cfg) {
        fprintf(stderr, "kbridge: %s\n", errstr);
        kb_sim_stop(sim);
        return KB_EXIT_USAGE;
    }
    /* What start-up reads before it starts anything, --check reads too: the same refusal, exit 2. */
    if ((check ? kb_bridge_check(cfg, errstr, sizeof(errstr)) : kb_bridge_validate(cfg, errstr, sizeof(errstr))) !=
            KB_OK ||
        kb_http_token_check(cfg, errstr, sizeof(errstr)) != KB_OK) {
        fprintf(stderr, "kbridge: %s\n", errstr);
        kb_config_free(cfg);
        kb_sim_stop(sim);
        return KB_EXIT_USAGE;
    }
    if (check) {
        kb_config_summary(cfg, stdout);
        printf("%s: configuration is valid\n", cfg->path);
        kb_config_free(cfg);
        return KB_EXIT_OK;
    }
    kb_setup_logging(cfg);
    int rc = kb_run(cfg, &sigs);
    kb_config_free(cfg);
    kb_sim_stop(sim);
    return rc;
}
