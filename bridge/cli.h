/* bridge/cli.h — the command line: one table of options drives --help, the
 * getopt parser in main.c, the man page (--help-man) and the bash
 * completion (--help-bash-completion), so none of them can drift.
 *
 * Everything here only writes to the FILE it is given. Thread: main.
 */
#ifndef KB_BRIDGE_CLI_H
#define KB_BRIDGE_CLI_H

#include <stdbool.h>
#include <stdio.h>

typedef struct kb_cli_opt {
    const char *name;   /* long name without "--" */
    char short_name;    /* 0 = none */
    const char *arg;    /* "FILE", or NULL when the option takes none */
    int id;             /* what getopt_long returns (the short name, or a code above 255) */
    const char *help;   /* one line */
} kb_cli_opt_t;

enum { KB_OPT_CHECK = 256, KB_OPT_DEMO, KB_OPT_HELP_CONFIG, KB_OPT_HELP_MAN, KB_OPT_HELP_COMPLETION };

extern const kb_cli_opt_t kb_cli_opts[];
extern const int kb_cli_n_opts;

void kb_cli_usage(FILE *out);
/* roff for man(1): synopsis, options, signals, exit codes, environment and
 * the whole configuration reference from the key table. */
void kb_cli_man(FILE *out);
/* A bash completion script (complete -F) for the options; files after --config. */
void kb_cli_bash_completion(FILE *out);

#endif
