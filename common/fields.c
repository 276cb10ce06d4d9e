/* common/fields.c — members of an object read from its JSON bytes (fields.h).
 *
 * Design: a lookup skips whole values by bracket depth (strings honoured)
 * instead of validating them, so reading "status.phase" of a 5 KB Pod costs
 * one pass over at most the bytes before it and no allocation; bytes that do
 * not parse read as "absent", never as a crash. Member names are compared as
 * written (Kubernetes field names need no escapes); values are decoded, so a
 * selector or template sees the same text the API server would.
 */
#include "common/fields.h"

#include <stdint.h>
#include <string.h>

/* ---- reading JSON bytes -------------------------------------------------- */

static const char *kb_fj_ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* Past the closing quote of the string that opens at p; NULL if unterminated. */
static const char *kb_fj_str_end(const char *p, const char *e) {
    for (p++; p < e; p++) {
        if (*p == '\\')
            p++;
        else if (*p == '"')
            return p + 1;
    }
    return NULL;
}

static bool kb_fj_scalar_ch(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '+' ||
           c == '.';
}

/* Past the value that starts at p; NULL if it does not end before e. */
static const char *kb_fj_skip(const char *p, const char *e) {
    if (p >= e)
        return NULL;
    if (*p == '"')
        return kb_fj_str_end(p, e);
    if (*p == '{' || *p == '[') {
        size_t depth = 0;
        while (p < e) {
            if (*p == '"') {
                p = kb_fj_str_end(p, e);
                if (!p)
                    return NULL;
                continue;
            }
            if (*p == '{' || *p == '[')
                depth++;
            else if ((*p == '}' || *p == ']') && --depth == 0)
                return p + 1;
            p++;
        }
        return NULL;
    }
    const char *s = p;
    while (p < e && kb_fj_scalar_ch(*p))
        p++;
    return p > s ? p : NULL;
}

bool kb_fields_iter_init(kb_fields_iter_t *it, const char *obj, size_t len) {
    const char *e = obj + len, *p = kb_fj_ws(obj, e);
    it->e = e;
    it->p = NULL;
    if (p >= e || *p != '{')
        return false;
    p = kb_fj_ws(p + 1, e);
    if (p < e && *p != '}')
        it->p = p;
    return true;
}

bool kb_fields_iter_next(kb_fields_iter_t *it, const char **key, size_t *klen, const char **val, size_t *vlen) {
    const char *p = it->p, *e = it->e;
    it->p = NULL;
    if (!p || p >= e || *p != '"')
        return false;
    const char *ks = p + 1, *ke = kb_fj_str_end(p, e);
    if (!ke)
        return false;
    p = kb_fj_ws(ke, e);
    if (p >= e || *p != ':')
        return false;
    const char *v = kb_fj_ws(p + 1, e), *ve = kb_fj_skip(v, e);
    if (!ve)
        return false;
    *key = ks;
    *klen = (size_t)(ke - 1 - ks);
    *val = v;
    *vlen = (size_t)(ve - v);
    p = kb_fj_ws(ve, e);
    if (p < e && *p == ',')
        it->p = kb_fj_ws(p + 1, e);
    return true;
}

bool kb_fields_member(const char *obj, size_t len, const char *name, size_t name_len, const char **val,
                      size_t *vlen) {
    kb_fields_iter_t it;
    const char *k;
    size_t kl;
    kb_fields_iter_init(&it, obj, len);
    while (kb_fields_iter_next(&it, &k, &kl, val, vlen))
        if (kl == name_len && !memcmp(k, name, name_len))
            return true;
    return false;
}

static int kb_fj_hex4(const char *p, const char *e) {
    if (e - p < 4)
        return -1;
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

static void kb_fj_utf8(kb_buf_t *out, uint32_t cp) {
    char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (char)(0xc0 | (cp >> 6));
        b[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (char)(0xe0 | (cp >> 12));
        b[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        b[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        b[0] = (char)(0xf0 | (cp >> 18));
        b[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        b[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    kb_buf_append(out, b, n);
}

/* Decode the \u escape at p ("\uXXXX", maybe a surrogate pair); past it. */
static const char *kb_fj_unicode(const char *p, const char *e, kb_buf_t *out) {
    int hi = kb_fj_hex4(p + 2, e);
    if (hi < 0)
        return p + 2; /* not an escape after all: keep the bytes that follow */
    p += 6;
    uint32_t cp = (uint32_t)hi;
    if (hi >= 0xd800 && hi < 0xdc00 && e - p >= 6 && p[0] == '\\' && p[1] == 'u') {
        int lo = kb_fj_hex4(p + 2, e);
        if (lo >= 0xdc00 && lo < 0xe000) {
            cp = 0x10000 + (((uint32_t)hi - 0xd800) << 10) + ((uint32_t)lo - 0xdc00);
            p += 6;
        }
    }
    kb_fj_utf8(out, cp);
    return p;
}

void kb_fields_text(const char *val, size_t vlen, kb_buf_t *out) {
    if (!vlen || *val == '{' || *val == '[' || (vlen == 4 && !memcmp(val, "null", 4)))
        return;
    if (*val != '"') {
        kb_buf_append(out, val, vlen);
        return;
    }
    const char *p = val + 1, *e = val + vlen - 1; /* inside the quotes */
    while (p < e) {
        const char *bs = memchr(p, '\\', (size_t)(e - p));
        if (!bs) {
            kb_buf_append(out, p, (size_t)(e - p));
            return;
        }
        kb_buf_append(out, p, (size_t)(bs - p));
        if (bs + 1 >= e)
            return;
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *m = bs[1] ? strchr(from, bs[1]) : NULL;
        if (bs[1] == 'u') {
            p = kb_fj_unicode(bs, e, out);
            continue;
        }
        if (m)
            kb_buf_append_char(out, to[m - from]);
        p = bs + 2;
    }
}

bool kb_fields_get(const char *obj, size_t len, const char *path, kb_buf_t *out) {
    const char *v = obj;
    size_t vlen = len;
    for (const char *seg = path;;) {
        const char *dot = strchr(seg, '.');
        size_t n = dot ? (size_t)(dot - seg) : strlen(seg);
        if (!kb_fields_member(v, vlen, seg, n, &v, &vlen))
            return false;
        if (!dot)
            break;
        seg = dot + 1;
    }
    kb_fields_text(v, vlen, out);
    return true;
}
