/* informer/definition.h — an informer's definition, as state_dir keeps it.
 *
 * The definition is everything that decides which objects an informer's
 * consumers get and with which bytes: the API server (cluster.server, or the
 * one a kubeconfig or the pod's service account names), group, version,
 * resource, namespaces,
 * label and field selectors, drop/redact/keep fields, compaction. state_dir
 * stores it with the informer's state, so a restart with another definition
 * relists and converges instead of resuming as if nothing changed
 * (informer.c). The text is canonical — one `key=<JSON value>` line per key,
 * in a fixed order, namespaces sorted — so equal definitions are equal
 * strings, and a stored one reads as what it says.
 *
 * Pure functions; any thread.
 */
#ifndef KB_INFORMER_DEFINITION_H
#define KB_INFORMER_DEFINITION_H

#include "common/buf.h"
#include "config/config.h"

/* What a change of definition means (kb_definition_diff's flags). */
#define KB_DEF_CHANGED 0x1u  /* which objects or bytes: relist and diff */
#define KB_DEF_RESHAPED 0x2u /* the objects' bytes (drop/redact/keep fields): send unchanged ones again */
#define KB_DEF_SERVER 0x4u   /* another API server: another history (a new epoch, as after a restore) */

/* The line a pending definition carries when the start that recorded it
 * re-sends every object in its shape (informer.c): compared with any
 * definition it is a reshaping change, so a later start re-sends too. */
#define KB_DEF_RESEND_LINE "resend=true\n"

/* The canonical text of conf's definition against server (the API server's
 * URL; NULL counts as ""). Caller frees. */
char *kb_definition_text(const kb_config_informer_t *conf, const char *server);

/* A stored text written before the server was part of the definition (it has
 * no server key): now's server put in front of it, so that the two compare as
 * equal when nothing else changed (caller frees); NULL when stored has one
 * (or now has none). */
char *kb_definition_adopt(const char *stored, const char *now);

/* Compare a stored definition with the current one (both canonical texts):
 * 0 when equal, else KB_DEF_* flags, and in what (appended) one
 * `key old -> new` per key that differs, joined by "; " (a key one side
 * lacks shows as (none)). */
unsigned kb_definition_diff(const char *old, const char *now, kb_buf_t *what);

/* What a reload (SIGHUP) does with informer nc of the new config: the
 * decision kb_bridge_reload carries out, here (no threads, clocks or I/O) so
 * that tests/sim steps the same one. */
typedef enum {
    KB_DEF_RELOAD_KEEP,    /* running[*keep] goes on as nc: unchanged, or changed only in keys applied live */
    KB_DEF_RELOAD_ADD,     /* no informer of its name runs: a new one starts; with state_dir its own directory
                            * decides (kb_informer_new): resume at its checkpoint, or, under another definition
                            * than the one stored there, list and converge */
    KB_DEF_RELOAD_REBUILD, /* one of its name runs under another definition, no state_dir: a new one lists */
    KB_DEF_RELOAD_REFUSE,  /* one of its name runs under another definition and state_dir is set: the running
                            * one holds that directory, so the whole reload is refused (a restart applies it) */
} kb_def_reload_t;

/* running[0..n): the running informers' configs; state_dir: the new config
 * sets one. *keep: the index for KEEP; what (may be NULL): for REBUILD and
 * REFUSE, the first key that changed. */
kb_def_reload_t kb_definition_reload(const kb_config_informer_t *const *running, size_t n,
                                     const kb_config_informer_t *nc, bool state_dir, size_t *keep, char *what,
                                     size_t what_size);

#endif
