/* informer/json_int.h — token scanners shared by json.c and decode.c.
 *
 * Private to informer/ (never include from another folder). Each helper
 * reads one token starting at b[*ip] and, on KB_JSON_OK, leaves *ip just
 * past it. When a write cursor is given (wp != NULL) the token's bytes are
 * also copied to *wp and *wp is advanced; the string copier may store up to
 * 8 bytes past what it keeps, so the caller guarantees at least
 * (n - *ip) + 8 writable bytes at *wp. With wp == NULL (a constant at every
 * call site) the copying code is compiled away.
 *
 * INCOMPLETE means the input ended inside the token; INVALID leaves *ip at
 * the offending byte. Pure functions; thread-safe.
 */
#ifndef KB_INFORMER_JSON_INT_H
#define KB_INFORMER_JSON_INT_H

#include "informer/json.h"

#include <stdint.h>
#include <string.h>

static inline bool kb_json__is_ws(char c) {
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static inline size_t kb_json__skip_ws(const char *b, size_t n, size_t i) {
    while (i < n && kb_json__is_ws(b[i]))
        i++;
    return i;
}

static inline bool kb_json__is_hex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Bytes that end the fast path inside a string: '"', '\\' and controls. */
static inline bool kb_json__string_special(unsigned char c) {
    return c == '"' || c == '\\' || c < 0x20;
}

#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define KB_JSON__SWAR 1
/* A mask whose lowest set bit is the high bit of the first byte of x that is
 * '"', '\\' or below 0x20; 0 when there is none. Borrows only propagate
 * upwards, so the lowest set bit is exact even though higher ones may not be. */
static inline uint64_t kb_json__special_mask(uint64_t x) {
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t q = x ^ (ones * '"'), s = x ^ (ones * '\\');
    return (((q - ones) & ~q) | ((s - ones) & ~s) | ((x - ones * 0x20) & ~x)) & highs;
}
#endif

/* A string token; *escaped is set when it contains a backslash escape. */
static inline kb_json_status_t kb_json__string(const char *b, size_t n, size_t *ip, char **wp,
                                               bool *escaped) {
    size_t i = *ip + 1;
    char *w = wp ? *wp : NULL;
    if (w)
        *w++ = '"';
    for (;;) {
#ifdef KB_JSON__SWAR
        while (i + 8 <= n) {
            uint64_t x;
            memcpy(&x, b + i, 8);
            if (w)
                memcpy(w, &x, 8);
            uint64_t m = kb_json__special_mask(x);
            if (m) {
                size_t k = (size_t)__builtin_ctzll(m) >> 3;
                i += k;
                if (w)
                    w += k;
                break;
            }
            i += 8;
            if (w)
                w += 8;
        }
#endif
        while (i < n && !kb_json__string_special((unsigned char)b[i])) {
            if (w)
                *w++ = b[i];
            i++;
        }
        if (i >= n)
            return KB_JSON_INCOMPLETE;
        char c = b[i];
        if (c == '"') {
            if (w) {
                *w++ = '"';
                *wp = w;
            }
            *ip = i + 1;
            return KB_JSON_OK;
        }
        if (c != '\\') {
            *ip = i; /* a control byte (NUL included) */
            return KB_JSON_INVALID;
        }
        *escaped = true;
        if (i + 1 >= n)
            return KB_JSON_INCOMPLETE;
        size_t elen = 2;
        switch (b[i + 1]) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
            break;
        case 'u':
            elen = 6;
            for (size_t k = 2; k < 6; k++) {
                if (i + k >= n)
                    return KB_JSON_INCOMPLETE;
                if (!kb_json__is_hex(b[i + k])) {
                    *ip = i + k;
                    return KB_JSON_INVALID;
                }
            }
            break;
        default:
            *ip = i + 1;
            return KB_JSON_INVALID;
        }
        if (w) {
            memcpy(w, b + i, elen);
            w += elen;
        }
        i += elen;
    }
}

/* One or more digits at b[*i]. */
static inline kb_json_status_t kb_json__digits(const char *b, size_t n, size_t *i) {
    if (*i >= n)
        return KB_JSON_INCOMPLETE;
    if (!(b[*i] >= '0' && b[*i] <= '9'))
        return KB_JSON_INVALID;
    while (*i < n && b[*i] >= '0' && b[*i] <= '9')
        (*i)++;
    return KB_JSON_OK;
}

/* A number token: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?. A number
 * that reaches the end of the input in an accepting state is OK (the caller
 * cannot know whether more digits follow; objects and arrays never end there). */
static inline kb_json_status_t kb_json__number(const char *b, size_t n, size_t *ip, char **wp) {
    size_t i = *ip;
    kb_json_status_t s;
    if (b[i] == '-')
        i++;
    if (i < n && b[i] == '0')
        i++;
    else if ((s = kb_json__digits(b, n, &i)) != KB_JSON_OK)
        goto out;
    if (i < n && b[i] == '.') {
        i++;
        if ((s = kb_json__digits(b, n, &i)) != KB_JSON_OK)
            goto out;
    }
    if (i < n && (b[i] == 'e' || b[i] == 'E')) {
        i++;
        if (i < n && (b[i] == '+' || b[i] == '-'))
            i++;
        if ((s = kb_json__digits(b, n, &i)) != KB_JSON_OK)
            goto out;
    }
    if (wp) {
        memcpy(*wp, b + *ip, i - *ip);
        *wp += i - *ip;
    }
    s = KB_JSON_OK;
out:
    *ip = i;
    return s;
}

/* true, false or null. */
static inline kb_json_status_t kb_json__literal(const char *b, size_t n, size_t *ip, char **wp) {
    size_t i = *ip;
    const char *lit = b[i] == 't' ? "true" : b[i] == 'f' ? "false" : "null";
    size_t len = strlen(lit);
    for (size_t k = 0; k < len; k++) {
        if (i + k >= n)
            return KB_JSON_INCOMPLETE;
        if (b[i + k] != lit[k]) {
            *ip = i + k;
            return KB_JSON_INVALID;
        }
    }
    if (wp) {
        memcpy(*wp, lit, len);
        *wp += len;
    }
    *ip = i + len;
    return KB_JSON_OK;
}

#endif
