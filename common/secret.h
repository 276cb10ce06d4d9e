/* common/secret.h — reading a secret (token, password) from a file.
 *
 * One place reads every *_file secret: the whole file (it must be small),
 * trailing whitespace and newlines removed. What a caller accepts beyond that
 * (one line, non-empty) is its own rule. The contents are never logged;
 * errors name the path and the reason only. Thread-safe.
 */
#ifndef KB_COMMON_SECRET_H
#define KB_COMMON_SECRET_H

#include <stddef.h>

/* The file's contents (NUL-terminated, malloc'd; free with kb_secret_free),
 * *len their length. NULL with "cannot read PATH: reason" or "PATH is longer
 * than MAX bytes" in why. */
char *kb_secret_read(const char *path, size_t max, size_t *len, char *why, size_t why_size);
/* Overwrite, then free. NULL is a no-op. */
void kb_secret_free(char *secret);

#endif
