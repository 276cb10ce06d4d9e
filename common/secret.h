/* common/secret.h — reading a secret (token, password) from a file.
 *
 * One place reads every *_file secret: the whole file (it must be small),
 * trailing whitespace and newlines removed. What a caller accepts beyond that
 * (one line, non-empty) is its own rule. The contents are never logged;
 * errors name the path and the reason only. Thread-safe.
 */
#ifndef KB_COMMON_SECRET_H
#define KB_COMMON_SECRET_H

#include <stdbool.h>
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
/* Whether a secret sent to host (n bytes, "[v6]" brackets allowed) stays on
 * this machine: 127.0.0.0/8, ::1, localhost. A name is never resolved:
 * anything else counts as the network. */
bool kb_host_is_loopback(const char *host, size_t n);
/* Whether url is plain http:// to a host that is not loopback: a secret
 * sent there crosses the network in clear text. */
bool kb_url_plain_beyond_loopback(const char *url);
/* Whether url ("scheme://user:password@host/…") carries userinfo before its
 * host: a password there is sent (libcurl makes it Basic auth) and printed
 * wherever the URL is, so kbridge refuses it and asks for a credential key. */
bool kb_url_has_userinfo(const char *url);
/* Whether a property named key ("sasl.password", "ssl.key.pem",
 * "sasl.oauthbearer.client.secret", …) holds a secret, so that summaries and
 * logs print "***" instead of its value. Names of files ("…_file",
 * "….location") are not secrets. */
bool kb_secret_key_like(const char *key);
/* a[0..alen) == b[0..blen), in a time that depends on the lengths only, not
 * on how many bytes match (a bearer token check must not tell). */
bool kb_secret_equal(const char *a, size_t alen, const char *b, size_t blen);

#endif
