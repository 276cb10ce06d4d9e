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
/* Overwrite up to the terminating NUL, then free. NULL is a no-op. Also for
 * secrets copied from elsewhere (a kubeconfig's token). */
void kb_secret_free(char *secret);
/* No core dump of this process from now on (RLIMIT_CORE 0, not dumpable):
 * a dump would carry every secret held in memory. Main thread, at start. */
void kb_secret_no_core_dumps(void);

#endif
