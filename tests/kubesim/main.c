/* tests/kubesim/main.c — the standalone simulator, build/kubesim.
 *
 *   kubesim [--port N] [--host H] [--history N] [--bookmark-ms N]
 *           [--demo-objects N] [--demo-rate R] [--watch-list on|off|ignore]
 *           [--sharded-list on|off]
 *
 * Prints exactly one line, "kubesim listening on HOST:PORT", once ready
 * (tests read the port from it), then waits for SIGTERM/SIGINT and exits 0.
 * Signals are blocked before any thread starts and taken with sigwaitinfo.
 */
#include "tests/kubesim/kubesim.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fputs("usage: kubesim [--port N] [--host H] [--history N] [--bookmark-ms N]\n"
          "               [--demo-objects N] [--demo-rate R] [--watch-list on|off|ignore]\n"
          "               [--sharded-list on|off]\n",
          f);
}

static int parse_int(const char *s, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 0 || v > 1000000000)
        return -1;
    *out = (int)v;
    return 0;
}

int main(int argc, char **argv) {
    kb_sim_opts_t opts = {.host = "127.0.0.1"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!v) {
            bad = 1;
        } else if (!strcmp(a, "--port")) {
            bad = parse_int(v, &opts.port);
        } else if (!strcmp(a, "--host")) {
            opts.host = v;
        } else if (!strcmp(a, "--history")) {
            bad = parse_int(v, &opts.history);
        } else if (!strcmp(a, "--bookmark-ms")) {
            bad = parse_int(v, &opts.bookmark_ms);
        } else if (!strcmp(a, "--demo-objects")) {
            bad = parse_int(v, &opts.demo_objects);
        } else if (!strcmp(a, "--watch-list")) { /* off: refuse sendInitialEvents as the gate being off does */
            opts.no_watch_list = !strcmp(v, "off");
            opts.ignore_watch_list = !strcmp(v, "ignore");
            bad = !opts.no_watch_list && !opts.ignore_watch_list && strcmp(v, "on") != 0;
        } else if (!strcmp(a, "--sharded-list")) { /* on: honour shardSelector (ShardedListAndWatch) */
            opts.sharded_list = !strcmp(v, "on");
            bad = !opts.sharded_list && strcmp(v, "off") != 0;
        } else if (!strcmp(a, "--demo-rate")) {
            char *end;
            opts.demo_rate = strtod(v, &end);
            bad = *end != '\0' || opts.demo_rate < 0;
        } else {
            bad = 1;
        }
        if (bad) {
            fprintf(stderr, "kubesim: bad argument %s%s%s\n", a, v ? " " : "", v ? v : "");
            usage(stderr);
            return 2;
        }
        i++;
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);

    char err[256];
    kb_sim_t *sim = kb_sim_start(&opts, err, sizeof(err));
    if (!sim) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    printf("kubesim listening on %s:%d\n", opts.host, kb_sim_port(sim));
    fflush(stdout);
    sigdelset(&set, SIGPIPE);
    int sig;
    do {
        sig = sigwaitinfo(&set, NULL);
    } while (sig < 0);
    kb_sim_stop(sim);
    return 0;
}
