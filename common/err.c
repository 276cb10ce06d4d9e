/* common/err.c — the tables behind kb_err_str() and friends. */
#include "common/err.h"

#include <stddef.h>

struct kb_err_row {
    kb_err_t code;
    bool retriable;
    const char *name;
    const char *msg;
};

static const struct kb_err_row kb_err_rows[] = {
#define KB__ERR_ROW(name, code, retr, msg) {KB_ERR_##name, retr, #name, msg},
    KB_ERRORS(KB__ERR_ROW)
#undef KB__ERR_ROW
};

static const struct kb_err_row *kb_err_row(kb_err_t err) {
    for (size_t i = 0; i < sizeof(kb_err_rows) / sizeof(kb_err_rows[0]); i++)
        if (kb_err_rows[i].code == err)
            return &kb_err_rows[i];
    return NULL;
}

const char *kb_err_str(kb_err_t err) {
    const struct kb_err_row *row = kb_err_row(err);
    return row ? row->msg : "unknown error";
}

const char *kb_err_name(kb_err_t err) {
    const struct kb_err_row *row = kb_err_row(err);
    return row ? row->name : "UNKNOWN";
}

bool kb_err_is_retriable(kb_err_t err) {
    const struct kb_err_row *row = kb_err_row(err);
    return row ? row->retriable : false;
}
