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
 * While draining, a watchdog thread takes over sigtimedwait: a second
 * SIGTERM/SIGINT, or shutdown_timeout + 1 s without the drain ending (a sink
 * blocked in a library call), ends the process at once with exit 1 and a
 * line saying what was not delivered. Shutdown is bounded whatever a sink does.
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

/* SIGHUP: read the config file again and apply it (on any error keep running
 * as we are), then try again every sink that had stopped after a refusal. */
static void kb_reload(kb_bridge_t *b, const char *path) {
    char errstr[1024];
    KB_INFO("main", "SIGHUP received: reopening file sinks, reloading %s", path);
    kb_bridge_reopen_sinks(b);
    char **stopped;
    size_t n_stopped = kb_bridge_stopped_sinks(b, &stopped);
    kb_config_t *ncfg = kb_config_load(path, errstr, sizeof(errstr));
    if (!ncfg) {
        KB_ERROR("main", "reload refused, keeping the running configuration: %s", errstr);
    } else if (kb_bridge_reload(b, ncfg, errstr, sizeof(errstr)) != KB_OK) {
        KB_ERROR("main", "reload refused, keeping the running configuration: %s", errstr);
        kb_config_free(ncfg);
    } else {
        kb_setup_logging(ncfg);
    }
    if (n_stopped)
        KB_INFO("main", "SIGHUP: %zu stopped sink(s) tried again; %zu informer(s) reopened", n_stopped,
                kb_bridge_retry_sinks(b, stopped, n_stopped));
    for (size_t i = 0; i < n_stopped; i++)
        free(stopped[i]);
    free(stopped);
}

/* What the last line says about changes the sinks did not acknowledge, and
 * the exit code that goes with it: with state_dir they are delivered again at
 * the next start (not a loss); without, they are gone (exit 1). */
static int kb_stop_verdict(kb_bridge_t *b, const char *how, char *line, size_t size) {
    uint64_t left = kb_bridge_unacknowledged(b);
    bool persistent = kb_bridge_config(b)->state_dir[0] != '\0';
    if (left == 0) {
        snprintf(line, size, "%s: every change was acknowledged", how);
        return KB_EXIT_OK;
    }
    if (persistent) {
        snprintf(line, size, "%s with %llu change(s) not acknowledged; state_dir %s keeps them and the next start "
                 "delivers them again", how, (unsigned long long)left, kb_bridge_config(b)->state_dir);
        return KB_EXIT_OK;
    }
    snprintf(line, size, "%s with %llu change(s) not acknowledged and no state_dir to deliver them again: they are "
             "lost to the sinks that missed them", how, (unsigned long long)left);
    return KB_EXIT_RUNTIME;
}

/* The drain watchdog: see the design note above. */
typedef struct kb_watchdog {
    kb_bridge_t *b;
    const sigset_t *sigs;
    int64_t deadline_ns;   /* monotonic */
    _Atomic bool done;     /* the drain ended on its own */
    pthread_t thread;
} kb_watchdog_t;

static void *kb_watchdog_main(void *arg) {
    kb_watchdog_t *wd = arg;
    kb_thread_set_name("kb:watchdog");
    const char *why = NULL;
    while (!atomic_load(&wd->done) && !why) {
        struct timespec slice = {.tv_sec = 0, .tv_nsec = 100 * KB_NS_PER_MS};
        int sig = sigtimedwait(wd->sigs, NULL, &slice);
        if (sig == SIGTERM || sig == SIGINT)
            why = sig == SIGTERM ? "a second SIGTERM" : "a second SIGINT";
        else if (sig == SIGHUP)
            KB_INFO("main", "SIGHUP while stopping: ignored");
        else if (kb_now_mono_ns() >= wd->deadline_ns)
            why = "shutdown_timeout + 1 s passed";
    }
    if (atomic_load(&wd->done))
        return NULL;
    char line[512];
    (void)kb_stop_verdict(wd->b, "stopped at once", line, sizeof(line));
    KB_ERROR("main", "%s while draining: %s", why, line);
    _exit(KB_EXIT_RUNTIME);
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
    for (;;) {
        siginfo_t si;
        int sig = sigwaitinfo(sigs, &si);
        if (sig < 0) {
            if (errno == EINTR)
                continue;
            KB_ERROR("main", "sigwaitinfo: %s", strerror(errno));
            break;
        }
        if (sig == SIGHUP) {
            kb_reload(b, cfg->path);
            continue;
        }
        KB_INFO("main", "%s received: draining (shutdown_timeout=%ds; a second signal stops at once)",
                sig == SIGTERM ? "SIGTERM" : "SIGINT", kb_bridge_config(b)->shutdown_timeout);
        break;
    }
    /* The running config: a reload may have changed shutdown_timeout. */
    int timeout_s = kb_bridge_config(b)->shutdown_timeout;
    kb_watchdog_t wd = {.b = b, .sigs = sigs,
                        .deadline_ns = kb_now_mono_ns() + ((int64_t)timeout_s + 1) * KB_NS_PER_SEC};
    atomic_init(&wd.done, false);
    if (pthread_create(&wd.thread, NULL, kb_watchdog_main, &wd) != 0)
        KB_FATAL("cannot start the shutdown watchdog");
    kb_http_stop(http);
    (void)kb_bridge_stop(b, timeout_s * 1000);
    char line[512];
    int rc = kb_stop_verdict(b, "stopped", line, sizeof(line));
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
    if (kb_bridge_validate(cfg, errstr, sizeof(errstr)) != KB_OK) {
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
