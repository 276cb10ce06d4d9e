/* config/prepare.c — fix up config text for libconfig 1.5, and field paths.
 *
 * Design: libconfig 1.5 (Debian's) has two gaps that matter to users:
 *   - it rejects quoted setting names, yet librdkafka properties have dots:
 *     properties = { "compression.type" = "lz4"; };
 *   - it silently truncates an integer literal that does not fit 32 bits
 *     (queue_bytes = 4294967296 reads as 0) unless it ends in L.
 * A small scanner that knows libconfig's comments, strings, names and
 * numbers rewrites the text before libconfig sees it: a quoted name becomes
 * a plain name ("*" + the bytes, with anything outside [A-Za-z0-9_-] as *XX
 * hex; kept as-is when it already is a plain name), and a wide integer gets
 * an L. Newlines are never added or removed, so libconfig's line numbers
 * still point into the user's file. Everything else passes through for
 * libconfig to accept or reject.
 */
#include "config/config_int.h"

#include "common/alloc.h"
#include "common/buf.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool kb_is_alpha(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool kb_is_digit(char c) {
    return c >= '0' && c <= '9';
}

static bool kb_is_name_char(char c) {
    return kb_is_alpha(c) || kb_is_digit(c) || c == '-' || c == '_' || c == '*';
}

static int kb_hexval(char c) {
    if (kb_is_digit(c))
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The end of a string literal starting at p (the opening quote): the byte
 * after the closing quote, or the terminating NUL when unterminated. */
static const char *kb_string_end(const char *p) {
    for (p++; *p && *p != '"'; p++)
        if (*p == '\\' && p[1])
            p++;
    return *p ? p + 1 : p;
}

/* Decode the literal [p, end) (quotes included) as libconfig does. */
static void kb_string_decode(const char *p, const char *end, kb_buf_t *out) {
    const char *stop = end > p + 1 && end[-1] == '"' ? end - 1 : end;
    for (p++; p < stop; p++) {
        if (*p != '\\' || p + 1 >= stop) {
            kb_buf_append_char(out, *p);
            continue;
        }
        p++;
        switch (*p) {
        case 'n': kb_buf_append_char(out, '\n'); break;
        case 't': kb_buf_append_char(out, '\t'); break;
        case 'r': kb_buf_append_char(out, '\r'); break;
        case 'f': kb_buf_append_char(out, '\f'); break;
        case 'x':
            if (p + 2 < stop && kb_hexval(p[1]) >= 0 && kb_hexval(p[2]) >= 0) {
                kb_buf_append_char(out, (char)(kb_hexval(p[1]) * 16 + kb_hexval(p[2])));
                p += 2;
                break;
            }
            /* fall through */
        default: kb_buf_append_char(out, *p); break;
        }
    }
}

static void kb_name_encode(const char *s, size_t n, kb_buf_t *out) {
    bool plain = n > 0 && kb_is_alpha(s[0]);
    for (size_t i = 0; i < n && plain; i++)
        plain = kb_is_name_char(s[i]) && s[i] != '*';
    if (plain) {
        kb_buf_append(out, s, n);
        return;
    }
    kb_buf_append_char(out, '*');
    for (size_t i = 0; i < n; i++) {
        if (kb_is_name_char(s[i]) && s[i] != '*')
            kb_buf_append_char(out, s[i]);
        else
            kb_buf_appendf(out, "*%02X", (unsigned char)s[i]);
    }
}

void kb_config__name_decode(const char *name, char *out, size_t out_size) {
    size_t o = 0;
    if (!name)
        name = "";
    if (*name != '*') {
        snprintf(out, out_size, "%s", name);
        return;
    }
    for (const char *p = name + 1; *p && o + 1 < out_size; p++) {
        if (*p == '*' && kb_hexval(p[1]) >= 0 && kb_hexval(p[2]) >= 0) {
            char c = (char)(kb_hexval(p[1]) * 16 + kb_hexval(p[2]));
            p += 2;
            if (!c)
                break; /* a NUL in a quoted name ends it */
            out[o++] = c;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
}

/* Scan a number at p; append it (with an L when it needs 64 bits) and
 * return the byte after it. *too_big when an integer exceeds 64 bits. */
static const char *kb_number(const char *p, kb_buf_t *out, bool *too_big) {
    const char *start = p;
    bool hex = false;
    *too_big = false;
    if (*p == '+' || *p == '-')
        p++;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X') && kb_hexval(p[2]) >= 0) {
        hex = true;
        for (p += 2; kb_hexval(*p) >= 0; p++) {
        }
    } else {
        while (kb_is_digit(*p))
            p++;
        if (*p == '.' || *p == 'e' || *p == 'E') { /* a float: libconfig reads it whole */
            if (*p == '.')
                for (p++; kb_is_digit(*p); p++) {
                }
            if ((*p == 'e' || *p == 'E') && (kb_is_digit(p[1]) || ((p[1] == '+' || p[1] == '-') && kb_is_digit(p[2]))))
                for (p += 2; kb_is_digit(*p); p++) {
                }
            kb_buf_append(out, start, (size_t)(p - start));
            return p;
        }
    }
    char digits[64];
    size_t n = (size_t)(p - start);
    *too_big = n >= sizeof(digits);
    if (*too_big)
        return p;
    memcpy(digits, start, n);
    digits[n] = '\0';
    errno = 0;
    bool wide;
    if (hex) {
        unsigned long long v = strtoull(digits, NULL, 16);
        *too_big = errno == ERANGE || v > INT64_MAX;
        wide = v > INT32_MAX;
    } else {
        long long v = strtoll(digits, NULL, 10);
        *too_big = errno == ERANGE;
        wide = v > INT32_MAX || v < INT32_MIN;
    }
    if (*too_big)
        return p;
    kb_buf_append(out, start, n);
    if (*p != 'L' && wide)
        kb_buf_append_char(out, 'L');
    return p;
}

char *kb_config__prepare(const char *text, const char *path, bool allow_include, char *errstr,
                         size_t errstr_size) {
    kb_buf_t out = KB_BUF_INIT;
    kb_buf_t name = KB_BUF_INIT;
    int line = 1;
    kb_buf_reserve(&out, strlen(text) + 16);
    kb_buf_append(&out, "", 0); /* NUL-terminated even for empty text */
    for (const char *p = text; *p;) {
        const char *q = p;
        if (*p == '#' || (p[0] == '/' && p[1] == '/')) {
            q = p + strcspn(p, "\n");
        } else if (p[0] == '/' && p[1] == '*') {
            const char *end = strstr(p + 2, "*/");
            q = end ? end + 2 : p + strlen(p);
        } else if (*p == '"') {
            q = kb_string_end(p);
            const char *next = q + strspn(q, " \t\r\n");
            if (*next == '=' || *next == ':') { /* a quoted setting name */
                kb_buf_reset(&name);
                kb_string_decode(p, q, &name);
                kb_name_encode(name.data ? name.data : "", name.len, &out);
                for (const char *c = p; c < q; c++) /* keep the line count */
                    if (*c == '\n') {
                        kb_buf_append_char(&out, '\n');
                        line++;
                    }
                p = q;
                continue;
            }
        } else if (!allow_include && strncmp(p, "@include", 8) == 0) {
            snprintf(errstr, errstr_size, "%s:%d: @include is not allowed in a config given as text", path, line);
            kb_buf_fini(&out);
            kb_buf_fini(&name);
            return NULL;
        } else if (kb_is_alpha(*p) || *p == '*') {
            while (kb_is_name_char(*q))
                q++;
        } else if (kb_is_digit(*p) || ((*p == '+' || *p == '-') && kb_is_digit(p[1]))) {
            bool too_big;
            q = kb_number(p, &out, &too_big);
            if (too_big) {
                snprintf(errstr, errstr_size, "%s:%d: integer %.*s does not fit in 64 bits", path, line,
                         (int)(q - p), p);
                kb_buf_fini(&out);
                kb_buf_fini(&name);
                return NULL;
            }
            p = q;
            continue;
        } else {
            q = p + 1;
        }
        for (const char *c = p; c < q; c++)
            line += *c == '\n';
        kb_buf_append(&out, p, (size_t)(q - p));
        p = q;
    }
    kb_buf_fini(&name);
    return kb_buf_steal(&out, NULL);
}

bool kb_config__path_valid(const char *path, char *errstr, size_t errstr_size) {
    const char *p = path;
    if (!*p) {
        snprintf(errstr, errstr_size, "empty path");
        return false;
    }
    for (;;) {
        if (*p == '[') { /* a bracketed segment, taken whole */
            const char *close = strchr(p + 1, ']');
            if (!close) {
                snprintf(errstr, errstr_size, "unclosed [ at offset %zu", (size_t)(p - path));
                return false;
            }
            if (close == p + 1) {
                snprintf(errstr, errstr_size, "empty [] segment at offset %zu", (size_t)(p - path));
                return false;
            }
            p = close + 1;
            if (*p && *p != '.' && *p != '[') {
                snprintf(errstr, errstr_size, "expected '.' after ] at offset %zu", (size_t)(p - path));
                return false;
            }
        } else {
            size_t n = strcspn(p, ".[]");
            if (n == 0) {
                snprintf(errstr, errstr_size, "empty segment at offset %zu", (size_t)(p - path));
                return false;
            }
            p += n;
        }
        if (!*p)
            return true;
        if (*p == ']') {
            snprintf(errstr, errstr_size, "unexpected ] at offset %zu", (size_t)(p - path));
            return false;
        }
        if (*p == '.')
            p++;
        if (!*p) {
            snprintf(errstr, errstr_size, "trailing '.'");
            return false;
        }
    }
}
