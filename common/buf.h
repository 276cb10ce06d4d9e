/* common/buf.h — a growable byte buffer.
 *
 * data is always NUL-terminated (one spare byte past len) so a buffer can be
 * handed to functions that want a C string. Not thread-safe: one owner.
 */
#ifndef KB_COMMON_BUF_H
#define KB_COMMON_BUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct kb_buf {
    char *data;  /* NULL until the first append; NUL-terminated after */
    size_t len;  /* bytes used, excluding the terminator */
    size_t cap;  /* bytes allocated */
} kb_buf_t;

#define KB_BUF_INIT {NULL, 0, 0}

void kb_buf_init(kb_buf_t *b);
void kb_buf_fini(kb_buf_t *b);
void kb_buf_reset(kb_buf_t *b);                 /* len = 0, keeps memory */
void kb_buf_reserve(kb_buf_t *b, size_t extra); /* room for extra more bytes */
void kb_buf_append(kb_buf_t *b, const void *p, size_t n);
void kb_buf_append_str(kb_buf_t *b, const char *s);
void kb_buf_append_char(kb_buf_t *b, char c);
void kb_buf_appendf(kb_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kb_buf_vappendf(kb_buf_t *b, const char *fmt, va_list ap);
/* Append s[0..n) as a JSON string literal, quotes included. */
void kb_buf_append_json_str(kb_buf_t *b, const char *s, size_t n);
/* The same for text that may hold bytes from a request (a path, a query
 * parameter echoed into an error message): every byte that is not part of
 * valid UTF-8 becomes U+FFFD, so the literal is valid UTF-8 JSON. */
void kb_buf_append_json_text(kb_buf_t *b, const char *s, size_t n);
/* Drop the first n bytes, moving the rest to the front. */
void kb_buf_consume(kb_buf_t *b, size_t n);
/* Append text with its words filled into lines of at most width columns
 * (UTF-8 characters), each line starting with indent and ending in '\n'; a
 * '\n' in text starts a new line; a word longer than a line is cut after a
 * '/' or '.' (else where the line ends) and goes on on the next. */
void kb_buf_append_filled(kb_buf_t *b, const char *indent, const char *text, size_t width);
/* Hand the memory to the caller (free with free()); the buffer is empty after. */
char *kb_buf_steal(kb_buf_t *b, size_t *len);

#endif
