/* common/buf.c — growable byte buffer (see buf.h). Grows by doubling. */
#include "common/buf.h"

#include "common/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kb_buf_init(kb_buf_t *b) {
    b->data = NULL;
    b->len = b->cap = 0;
}

void kb_buf_fini(kb_buf_t *b) {
    free(b->data);
    kb_buf_init(b);
}

void kb_buf_reset(kb_buf_t *b) {
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

void kb_buf_reserve(kb_buf_t *b, size_t extra) {
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap *= 2;
    b->data = kb_realloc(b->data, cap);
    b->cap = cap;
}

void kb_buf_append(kb_buf_t *b, const void *p, size_t n) {
    kb_buf_reserve(b, n);
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void kb_buf_append_str(kb_buf_t *b, const char *s) {
    kb_buf_append(b, s, strlen(s));
}

void kb_buf_append_char(kb_buf_t *b, char c) {
    kb_buf_reserve(b, 1);
    b->data[b->len++] = c;
    b->data[b->len] = '\0';
}

void kb_buf_vappendf(kb_buf_t *b, const char *fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    char small[256];
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    if (n < 0) {
        va_end(ap2);
        return;
    }
    if ((size_t)n < sizeof(small)) {
        kb_buf_append(b, small, (size_t)n);
    } else {
        kb_buf_reserve(b, (size_t)n);
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
        b->len += (size_t)n;
    }
    va_end(ap2);
}

void kb_buf_appendf(kb_buf_t *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    kb_buf_vappendf(b, fmt, ap);
    va_end(ap);
}

void kb_buf_append_json_str(kb_buf_t *b, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    kb_buf_reserve(b, n + 2);
    b->data[b->len++] = '"';
    size_t run = 0; /* start of the pending run of plain bytes */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        kb_buf_append(b, s + run, i - run);
        run = i + 1;
        switch (c) {
        case '"': kb_buf_append(b, "\\\"", 2); break;
        case '\\': kb_buf_append(b, "\\\\", 2); break;
        case '\n': kb_buf_append(b, "\\n", 2); break;
        case '\r': kb_buf_append(b, "\\r", 2); break;
        case '\t': kb_buf_append(b, "\\t", 2); break;
        default: {
            char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            kb_buf_append(b, esc, 6);
        }
        }
    }
    kb_buf_append(b, s + run, n - run);
    kb_buf_append_char(b, '"');
}

/* Length of the valid UTF-8 sequence at p (n bytes left), 0 if invalid. */
static size_t kb_utf8_seq(const unsigned char *p, size_t n) {
    unsigned char c = p[0];
    size_t len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!len || len > n)
        return 0;
    unsigned char lo = 0x80, hi = 0xBF; /* the second byte's range: no overlongs, surrogates or > U+10FFFF */
    if (c == 0xE0)
        lo = 0xA0;
    else if (c == 0xED)
        hi = 0x9F;
    else if (c == 0xF0)
        lo = 0x90;
    else if (c == 0xF4)
        hi = 0x8F;
    for (size_t i = 1; i < len; i++) {
        if (p[i] < (i == 1 ? lo : 0x80) || p[i] > (i == 1 ? hi : 0xBF))
            return 0;
    }
    return len;
}

void kb_buf_append_json_text(kb_buf_t *b, const char *s, size_t n) {
    kb_buf_t clean = KB_BUF_INIT;
    const unsigned char *p = (const unsigned char *)s;
    while (n) {
        size_t len = kb_utf8_seq(p, n);
        if (len)
            kb_buf_append(&clean, (const char *)p, len);
        else
            kb_buf_append_str(&clean, "\xEF\xBF\xBD");
        len = len ? len : 1;
        p += len;
        n -= len;
    }
    kb_buf_append_json_str(b, clean.len ? clean.data : "", clean.len);
    kb_buf_fini(&clean);
}

void kb_buf_consume(kb_buf_t *b, size_t n) {
    if (n >= b->len) {
        kb_buf_reset(b);
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = '\0';
}

char *kb_buf_steal(kb_buf_t *b, size_t *len) {
    char *p = b->data;
    if (len)
        *len = b->len;
    kb_buf_init(b);
    return p;
}

static size_t kb_utf8_chars(const char *p, size_t n) {
    size_t cols = 0;
    for (size_t i = 0; i < n; i++)
        cols += ((unsigned char)p[i] & 0xC0) != 0x80;
    return cols;
}

/* Where to cut a word of n bytes that does not fit in room columns: after
 * the last '/' or '.' that fits, else at room (a path or a dotted name reads
 * best cut there). */
static size_t kb_fill_cut(const char *p, size_t n, size_t room) {
    size_t cut = 0, cols = 0;
    for (size_t i = 0; i < n && cols < room; i++) {
        cols += ((unsigned char)p[i] & 0xC0) != 0x80;
        if (p[i] == '/' || p[i] == '.')
            cut = i + 1;
    }
    if (cut)
        return cut;
    size_t i = 0;
    for (cols = 0; i < n && cols < room; i++)
        cols += ((unsigned char)p[i] & 0xC0) != 0x80;
    while (i < n && ((unsigned char)p[i] & 0xC0) == 0x80) /* never inside a character */
        i++;
    return i ? i : n;
}

void kb_buf_append_filled(kb_buf_t *b, const char *indent, const char *text, size_t width) {
    size_t col = 0, indent_cols = kb_utf8_chars(indent, strlen(indent));
    size_t room = width > indent_cols + 8 ? width - indent_cols : 8;
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, " \n"), cols = kb_utf8_chars(p, n);
        if (col && col + 1 + cols > width) {
            kb_buf_append_char(b, '\n');
            col = 0;
        }
        if (!col && cols > room) { /* longer than a line: cut it, the rest goes on as a word */
            size_t cut = kb_fill_cut(p, n, room);
            kb_buf_append_str(b, indent);
            kb_buf_append(b, p, cut);
            kb_buf_append_char(b, '\n');
            p += cut;
            continue;
        }
        if (n) {
            if (col) {
                kb_buf_append_char(b, ' ');
                col++;
            } else {
                kb_buf_append_str(b, indent);
                col = indent_cols;
            }
            kb_buf_append(b, p, n);
            col += cols;
        }
        p += n;
        if (*p == '\n' && col) {
            kb_buf_append_char(b, '\n');
            col = 0;
        }
        if (*p)
            p++;
    }
    if (col)
        kb_buf_append_char(b, '\n');
}
