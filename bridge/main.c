/* bridge/main.c — the kbridge command: read like a start-up script.
 *
 *   parse arguments → load and validate the config (exit 2 on any error,
 *   before anything starts) → block signals → build the bridge → start →
 *   wait for a signal with sigwaitinfo → drain within shutdown_timeout →
 *   exit 0.
 *
 * Signals are blocked before any thread exists, so every thread inherits the
 * mask and only this thread ever sees SIGTERM/SIGINT/SIGHUP: no handlers.
 */
#include "bridge/bridge.h"
#include "bridge/http.h"

#include "common/log.h"
#include "common/secret.h"
#include "config/config.h"
#include "tests/kubesim/kubesim.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { KB_EXIT_OK = 0, KB_EXIT_RUNTIME = 1, KB_EXIT_USAGE = 2 };

static void kb_usage(FILE *out) {
    fprintf(out,
            "Usage: kbridge --config FILE [--check]\n"
            "       kbridge --demo\n"
            "       kbridge --version | --help | --help-config\n"
            "\n"
            "Streams changes of Kubernetes resources (list + watch) into Kafka, MQTT or files.\n"
            "\n"
            "  -c, --config FILE   run with this libconfig file\n"
            "      --check         validate the config, print a summary, exit (0 valid, 2 not)\n"
            "      --demo          run the bundled API-server simulator and stream its pods to stdout\n"
            "      --help-config   every configuration key with its type, default and meaning\n"
            "  -V, --version       print the version\n"
            "  -h, --help          this text\n"
            "\n"
            "Signals: SIGTERM/SIGINT drain and exit 0; SIGHUP reloads the config (an invalid one is refused\n"
            "and the running one kept; cluster, state_dir, sharding and http changes need a restart).\n"
            "Exit codes: 0 clean stop, 1 runtime failure, 2 usage or configuration error.\n");
}

static void kb_setup_logging(const kb_config_t *cfg) {
    int level = kb_log_level_parse(cfg->log_level);
    kb_log_setup(level < 0 ? KB_LOG_INFO : (kb_log_level_t)level, cfg->log_format && !strcmp(cfg->log_format, "json"));
}

/* SIGHUP: read the config file again and apply it; on any error keep running as we are. */
static void kb_reload(kb_bridge_t *b, const char *path) {
    char errstr[1024];
    KB_INFO("main", "SIGHUP received: reloading %s", path);
    kb_config_t *ncfg = kb_config_load(path, errstr, sizeof(errstr));
    if (!ncfg) {
        KB_ERROR("main", "reload refused, keeping the running configuration: %s", errstr);
        return;
    }
    if (kb_bridge_reload(b, ncfg, errstr, sizeof(errstr)) != KB_OK) {
        KB_ERROR("main", "reload refused, keeping the running configuration: %s", errstr);
        kb_config_free(ncfg);
        return;
    }
    kb_setup_logging(ncfg);
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
        KB_INFO("main", "%s received: draining (shutdown_timeout=%ds)", sig == SIGTERM ? "SIGTERM" : "SIGINT",
                cfg->shutdown_timeout);
        break;
    }
    kb_http_stop(http);
    kb_err_t err = kb_bridge_stop(b, cfg->shutdown_timeout * 1000);
    kb_bridge_log_stats(b);
    kb_bridge_destroy(b);
    KB_INFO("main", "stopped%s", err == KB_OK ? "" : " (some messages were not acknowledged in time)");
    return KB_EXIT_OK;
}

int main(int argc, char **argv) {
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'}, {"check", no_argument, NULL, 'k'},
        {"demo", no_argument, NULL, 'd'},         {"help-config", no_argument, NULL, 'H'},
        {"version", no_argument, NULL, 'V'},      {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *config_path = NULL;
    bool check = false, demo = false;
    int c;
    while ((c = getopt_long(argc, argv, "c:Vh", opts, NULL)) != -1) {
        switch (c) {
        case 'c': config_path = optarg; break;
        case 'k': check = true; break;
        case 'd': demo = true; break;
        case 'H': kb_config_print_reference(stdout, false); return KB_EXIT_OK;
        case 'V': printf("kbridge %s\n", KB_VERSION); return KB_EXIT_OK;
        case 'h': kb_usage(stdout); return KB_EXIT_OK;
        default: kb_usage(stderr); return KB_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "kbridge: unexpected argument \"%s\"\n", argv[optind]);
        kb_usage(stderr);
        return KB_EXIT_USAGE;
    }
    if (demo == (config_path != NULL) || (check && !config_path)) {
        fprintf(stderr, "kbridge: give exactly one of --config FILE or --demo%s\n",
                check ? " (--check needs --config)" : "");
        kb_usage(stderr);
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
