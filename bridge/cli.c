/* bridge/cli.c — the option table and what is generated from it (cli.h).
 *
 * DESIGN. A man page written by hand goes stale the first time an option or
 * a config key is added; this one is printed by the binary itself from the
 * option table below and the config key table (kb_config_print_reference),
 * and the build runs `kbridge --help-man` to produce kbridge.1 for
 * `cmake --install`. The bash completion comes from the same table.
 */
#include "bridge/cli.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "config/config.h"

#include <stdlib.h>
#include <string.h>

const kb_cli_opt_t kb_cli_opts[] = {
    {"config", 'c', "FILE", 'c', "run with this libconfig file"},
    {"check", 0, NULL, KB_OPT_CHECK, "validate the config, print a summary, exit (0 valid, 2 not)"},
    {"demo", 0, NULL, KB_OPT_DEMO, "run the bundled API-server simulator and stream its pods to stdout"},
    {"help-config", 0, NULL, KB_OPT_HELP_CONFIG, "every configuration key with its type, default and meaning"},
    {"help-man", 0, NULL, KB_OPT_HELP_MAN, "print the manual page (roff; man -l - reads it)"},
    {"help-bash-completion", 0, NULL, KB_OPT_HELP_COMPLETION, "print a bash completion script"},
    {"version", 'V', NULL, 'V', "print the version"},
    {"help", 'h', NULL, 'h', "this text"},
};
const int kb_cli_n_opts = (int)(sizeof(kb_cli_opts) / sizeof(kb_cli_opts[0]));

static const char kb_cli_summary[] = "Streams changes of Kubernetes resources (list + watch) into Kafka, MQTT or files.";

/* The SIGNALS text (malloc'd): which settings need a restart comes from the
 * config key table, so it cannot fall behind docs/configuration.md. */
static char *kb_cli_signals(void) {
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    KB_ASSERT(mem);
    fputs("SIGTERM/SIGINT drain (a second one stops at once); SIGHUP reopens file sinks and reloads the config "
          "(an invalid one is refused and the running one kept; changes to ", mem);
    kb_config_print_restart_only(mem);
    fputs(" need a restart).", mem);
    fclose(mem);
    return text;
}

/* The options that only print something and exit, for the synopsis. */
static bool kb_cli_prints_only(const kb_cli_opt_t *o) {
    return o->id != 'c' && o->id != KB_OPT_CHECK && o->id != KB_OPT_DEMO;
}
static const char kb_cli_exit[] = "0 clean stop, 1 runtime failure (also: changes left unacknowledged without "
                                  "state_dir), 2 usage or configuration error.";

void kb_cli_usage(FILE *out) {
    fputs("Usage: kbridge --config FILE [--check]\n       kbridge --demo\n       kbridge", out);
    for (int i = 0, n = 0; i < kb_cli_n_opts; i++)
        if (kb_cli_prints_only(&kb_cli_opts[i]))
            fprintf(out, "%s--%s", n++ ? " | " : " ", kb_cli_opts[i].name);
    fprintf(out, "\n\n%s\n\n", kb_cli_summary);
    for (int i = 0; i < kb_cli_n_opts; i++) {
        const kb_cli_opt_t *o = &kb_cli_opts[i];
        char left[48];
        snprintf(left, sizeof(left), "%s%c%s--%s%s%s", o->short_name ? "-" : " ", o->short_name ? o->short_name : ' ',
                 o->short_name ? ", " : "  ", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        fprintf(out, "  %-28s%s\n", left, o->help);
    }
    char *signals = kb_cli_signals();
    kb_buf_t text = KB_BUF_INIT, b = KB_BUF_INIT;
    kb_buf_appendf(&text, "Signals: %s\nExit codes: %s", signals, kb_cli_exit);
    kb_buf_append_filled(&b, "", text.data, 79);
    fprintf(out, "\n%s", b.data);
    kb_buf_fini(&text);
    kb_buf_fini(&b);
    free(signals);
}

/* Text for a roff line: backslashes doubled, '-' as \-, a leading '.' or '\'' protected. */
static void kb_roff(FILE *out, const char *s, size_t n) {
    bool bol = true;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (bol && (c == '.' || c == '\''))
            fputs("\\&", out);
        if (c == '\\')
            fputs("\\e", out);
        else if (c == '-')
            fputs("\\-", out);
        else
            fputc(c, out);
        bol = c == '\n';
    }
}

static void kb_roff_str(FILE *out, const char *s) {
    kb_roff(out, s, strlen(s));
}

void kb_cli_man(FILE *out) {
    fprintf(out, ".TH KBRIDGE 1 \"\" \"kbridge %s\" \"User Commands\"\n.SH NAME\n"
                 "kbridge \\- stream Kubernetes resource changes into Kafka, MQTT or files\n"
                 ".SH SYNOPSIS\n.B kbridge\n\\fB\\-\\-config\\fR \\fIFILE\\fR [\\fB\\-\\-check\\fR]\n.br\n"
                 ".B kbridge \\-\\-demo\n.br\n.B kbridge\n",
            KB_VERSION);
    for (int i = 0, n = 0; i < kb_cli_n_opts; i++)
        if (kb_cli_prints_only(&kb_cli_opts[i])) {
            fputs(n++ ? " | \\fB\\-\\-" : "\\fB\\-\\-", out);
            kb_roff_str(out, kb_cli_opts[i].name);
            fputs("\\fR", out);
        }
    fputs("\n.SH DESCRIPTION\n", out);
    kb_roff_str(out, kb_cli_summary);
    fputs(" It lists and watches the configured resources like a Kubernetes informer, keeps a cache "
          "(optionally persisted in state_dir), and hands every change to the routes' sinks as a JSON "
          "envelope; checkpoints advance only on the sinks' acknowledgements.\n.SH OPTIONS\n", out);
    for (int i = 0; i < kb_cli_n_opts; i++) {
        const kb_cli_opt_t *o = &kb_cli_opts[i];
        fputs(".TP\n", out);
        if (o->short_name)
            fprintf(out, "\\fB\\-%c\\fR, ", o->short_name);
        fputs("\\fB\\-\\-", out);
        kb_roff_str(out, o->name);
        fputs("\\fR", out);
        if (o->arg)
            fprintf(out, " \\fI%s\\fR", o->arg);
        fputc('\n', out);
        kb_roff_str(out, o->help);
        fputc('\n', out);
    }
    fputs(".SH SIGNALS\n", out);
    char *signals = kb_cli_signals();
    kb_roff_str(out, signals);
    free(signals);
    fputs("\n.SH EXIT STATUS\n", out);
    kb_roff_str(out, kb_cli_exit);
    fputs("\n.SH ENVIRONMENT\n.TP\n.B KUBECONFIG\nthe kubeconfig read when the config names neither "
          "cluster.server nor cluster.kubeconfig (default ~/.kube/config)\n"
          ".TP\n.BR KUBERNETES_SERVICE_HOST \", \" KUBERNETES_SERVICE_PORT\nin a pod: the API server, with the "
          "service-account token and CA from /var/run/secrets/kubernetes.io/serviceaccount\n"
          ".TP\n.B HOSTNAME\nsharding.index = \\-1 takes the StatefulSet ordinal from it\n"
          ".TP\n.B ${NAME}\nany variable, in a string value of the configuration as ${NAME} or "
          "${NAME:\\-default}\n.SH CONFIGURATION\n", out);
    fputs("The configuration file uses the libconfig syntax. Every key:\n.PP\n.nf\n", out);
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (mem) {
        kb_config_print_reference(mem, false);
        fclose(mem);
        kb_roff(out, text, len);
        free(text);
    }
    fputs(".fi\n.SH SEE ALSO\nThe documentation in docs/ of the source tree (installed under "
          "share/doc/kbridge): configuration, routing, guarantees, the envelope, HTTP API and metrics, "
          "Kafka, MQTT, cluster deployment.\n", out);
}

void kb_cli_bash_completion(FILE *out) {
    fputs("# bash completion for kbridge (generated by kbridge --help-bash-completion)\n"
          "_kbridge() {\n"
          "    local cur prev\n"
          "    cur=${COMP_WORDS[COMP_CWORD]}\n"
          "    prev=${COMP_WORDS[COMP_CWORD-1]}\n"
          "    case $prev in\n", out);
    for (int i = 0; i < kb_cli_n_opts; i++) {
        const kb_cli_opt_t *o = &kb_cli_opts[i];
        if (!o->arg)
            continue;
        fprintf(out, "        --%s", o->name);
        if (o->short_name)
            fprintf(out, "|-%c", o->short_name);
        fputs(") COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n", out);
    }
    fputs("    esac\n    COMPREPLY=($(compgen -W '", out);
    for (int i = 0; i < kb_cli_n_opts; i++)
        fprintf(out, "%s--%s", i ? " " : "", kb_cli_opts[i].name);
    fputs("' -- \"$cur\"))\n}\ncomplete -o filenames -F _kbridge kbridge\n", out);
}
