/* config/config_int.h — private to config/: the key table and its helpers.
 *
 * Every configuration key is one kb_ckey_t row in config/table.c. A row
 * says where the value lives (an offset into the struct being filled), its
 * type, its default (as text, so the docs print exactly what the loader
 * applies), its range or allowed values, extra checks and the doc string.
 * Groups and lists of groups point at another section of rows. The loader
 * (load.c) and the reference printer (table.c) both walk these rows; no key
 * name appears anywhere else except in the few cross-key checks (hooks).
 */
#ifndef KB_CONFIG_CONFIG_INT_H
#define KB_CONFIG_CONFIG_INT_H

#include "config/config.h"

#include <libconfig.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum {
    KB_CT_STRING,  /* char * */
    KB_CT_INT,     /* int; range required */
    KB_CT_INT64,   /* int64_t */
    KB_CT_FLOAT,   /* double; integers accepted */
    KB_CT_BOOL,    /* bool */
    KB_CT_ENUM,    /* a string from values[], stored as its index in an int-sized enum */
    KB_CT_CHOICE,  /* a string from values[], stored as char * */
    KB_CT_STRLIST, /* kb_strlist_t; default: comma-separated */
    KB_CT_TYPES,   /* list of event type names → uint32_t bit mask; default: all */
    KB_CT_PROPS,   /* group of scalars → kb_kv_t array at off, count (size_t) at off2 */
    KB_CT_GROUP,   /* nested section; its rows' offsets are relative to base + off */
    KB_CT_LIST,    /* list of groups: element array at off, count (size_t) at off2 */
} kb_ctype_t;

enum {
    KB_CF_REQUIRED = 1u << 0, /* must be present (for variants: when the variant applies) */
    KB_CF_NONEMPTY = 1u << 1, /* a string that must not be "" */
    KB_CF_NAME = 1u << 2,     /* letters, digits, '.', '_', '-' only */
    KB_CF_UNIQUE = 1u << 3,   /* unique among the elements of the enclosing list */
    KB_CF_TEMPLATE = 1u << 4, /* compiles with kb_template_compile */
    KB_CF_PATH = 1u << 5,     /* every string is a field path (informer/decode.h grammar) */
    KB_CF_LISTEN = 1u << 6,   /* "" or "host:port" */
    KB_CF_SEEN = 1u << 7,     /* set the bool at off2 when the key is present */
    KB_CF_FILE = 1u << 8,     /* a file name: a leading "~/" becomes $HOME/ */
    /* What a SIGHUP that changes the key does (config/reload.c). A key with
     * neither flag rebuilds the informer or sink it belongs to; outside
     * informers[] and sinks[] a key with neither flag needs a restart. */
    KB_CF_LIVE = 1u << 9,     /* applies in place: nothing is rebuilt */
    KB_CF_RESTART = 1u << 10, /* only a restart applies it: the reload is refused */
};

struct kb_csection;

typedef struct kb_ckey {
    const char *name;
    kb_ctype_t type;
    size_t off, off2;
    const char *def;    /* default as text (strings unquoted); NULL = computed, see defdoc */
    const char *defdoc; /* shown instead of def in the reference when set */
    double min, max;    /* numeric range (inclusive) when min < max */
    const char *const *values; /* ENUM/CHOICE names, or allowed INT values as text; NULL-terminated */
    unsigned flags;            /* KB_CF_* */
    unsigned only;             /* variant mask (1 << discriminator value); 0 = all variants */
    const struct kb_csection *sub;
    const char *doc;
} kb_ckey_t;

typedef struct kb_loader kb_loader_t;

/* Called after a section's rows are loaded into base; index is the element
 * index inside a list (0 otherwise). false after kb_config__fail(). */
typedef bool kb_csection_hook_t(kb_loader_t *ld, void *base, size_t index, const config_setting_t *grp,
                                const char *prefix);

typedef struct kb_csection {
    const char *title;      /* for the reference: "cluster", "informers[]" */
    const char *doc;        /* paragraph for the reference */
    size_t size;            /* element size (lists) */
    size_t line_off;        /* offset of an int that gets the group's line; SIZE_MAX = none */
    const kb_ckey_t *keys;
    size_t n_keys;
    int disc;               /* index of the discriminating ENUM row; -1 = none */
    kb_csection_hook_t *finish;
} kb_csection_t;

/* The root section (table.c), and the list elements' sections. */
extern const kb_csection_t kb_config__root;
extern const kb_csection_t kb_config__sec_informer, kb_config__sec_sink;

struct kb_loader {
    const char *path;  /* for messages when a setting has no file of its own */
    char *errstr;
    size_t errstr_size;
    kb_config_t *cfg;  /* being filled */
    const char *hostname; /* $HOSTNAME as seen at load (sharding.index = -1) */
    const char *home;     /* $HOME as seen at load ("~/" in file names) */
    const char *include_dir; /* where @include names are resolved; NULL = refused */
};

/* Write "FILE:LINE: " (or "FILE: " when s is NULL or has no line) and the
 * message to ld->errstr. Always returns false. */
bool kb_config__fail(kb_loader_t *ld, const config_setting_t *s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Hooks (table.c refers to them, load.c defines them). */
kb_csection_hook_t kb_config__finish_root, kb_config__finish_sink, kb_config__finish_route;

/* The text libconfig 1.5 is given: quoted setting names ("compression.type" = …)
 * become encoded names, integer literals that do not fit 32 bits get an L so
 * libconfig keeps them 64-bit. Line structure is preserved. NULL with
 * "FILE:LINE: …" in errstr for an integer literal beyond 64 bits, or an
 * @include when !allow_include. Caller frees. */
char *kb_config__prepare(const char *text, const char *path, bool allow_include, char *errstr,
                         size_t errstr_size);
/* Undo the name encoding of kb_config__prepare (names not starting with '*'
 * are copied). Writes at most out_size-1 bytes and NUL-terminates. */
void kb_config__name_decode(const char *name, char *out, size_t out_size);

/* "none" / "latest". */
const char *kb_config__compaction_name(kb_compaction_t c);

/* Field path syntax (informer/decode.h): dot-separated names, a [bracketed]
 * segment taken whole, no empty segments. */
bool kb_config__path_valid(const char *path, char *errstr, size_t errstr_size);

#endif
