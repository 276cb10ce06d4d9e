/* common/secret.c — read a small secret file (see secret.h).
 *
 * DESIGN. read(2) into one buffer of max + 2 bytes rather than stdio: a FILE
 * keeps its own copy of the bytes in a buffer that fclose frees without
 * wiping. The buffer is NUL-terminated on every path before anything walks
 * it, and a refused file is wiped over the whole allocation, since its bytes
 * need not contain a NUL at all. kb_secret_free wipes up to the first NUL, so
 * it also serves strings copied from a kubeconfig.
 */
#include "common/secret.h"

#include "common/alloc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

static void kb_wipe(void *p, size_t n) {
    volatile unsigned char *v = p;
    while (n--)
        *v++ = 0;
}

/* Up to cap bytes of fd; -1 with errno on a read error. */
static ssize_t kb_read_all(int fd, char *buf, size_t cap) {
    size_t n = 0;
    while (n < cap) {
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        n += (size_t)r;
    }
    return (ssize_t)n;
}

char *kb_secret_read(const char *path, size_t max, size_t *len, char *why, size_t why_size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, why_size, "cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = max + 2;
    char *buf = kb_malloc(cap);
    ssize_t got = kb_read_all(fd, buf, max + 1);
    int read_errno = errno;
    close(fd);
    if (got < 0 || (size_t)got > max) {
        if (got < 0)
            snprintf(why, why_size, "cannot read %s: %s", path, strerror(read_errno));
        else
            snprintf(why, why_size, "%s is longer than %zu bytes", path, max);
        kb_wipe(buf, cap);
        free(buf);
        return NULL;
    }
    size_t n = (size_t)got;
    while (n && strchr(" \t\r\n", buf[n - 1]))
        n--;
    kb_wipe(buf + n, cap - n); /* the terminator, and nothing left past it */
    if (len)
        *len = n;
    return buf;
}

void kb_secret_free(char *secret) {
    if (!secret)
        return;
    kb_wipe(secret, strlen(secret));
    free(secret);
}

void kb_secret_no_core_dumps(void) {
    struct rlimit none = {0, 0};
    setrlimit(RLIMIT_CORE, &none);
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

bool kb_host_is_loopback(const char *host, size_t n) {
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
        host++;
        n -= 2;
    }
    if ((n == 9 && !strncasecmp(host, "localhost", 9)) || (n == 3 && !strncmp(host, "::1", 3)))
        return true;
    char text[64];
    struct in_addr a;
    if (n >= sizeof(text))
        return false;
    memcpy(text, host, n);
    text[n] = '\0';
    return inet_pton(AF_INET, text, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

/* The authority of scheme://authority/path (*n bytes), NULL when url has no "://". */
static const char *kb_url_authority(const char *url, size_t *n) {
    const char *p = strstr(url, "://");
    if (!p)
        return NULL;
    p += 3;
    *n = strcspn(p, "/?#");
    return p;
}

bool kb_url_has_userinfo(const char *url) {
    size_t n = 0;
    const char *host = kb_url_authority(url, &n);
    return host && memchr(host, '@', n);
}

bool kb_url_plain_beyond_loopback(const char *url) {
    if (strncasecmp(url, "http://", 7) != 0)
        return false;
    size_t n = 0;
    const char *host = kb_url_authority(url, &n);
    const char *at = memrchr(host, '@', n); /* user:password@host */
    if (at) {
        n -= (size_t)(at + 1 - host);
        host = at + 1;
    }
    const char *colon = memrchr(host, ':', n);
    if (colon && !memchr(colon, ']', (size_t)(host + n - colon)))
        n = (size_t)(colon - host);
    return !kb_host_is_loopback(host, n);
}

/* Substrings of a property name that say its value is a secret. */
static const char *const kb_secret_words[] = {"password", "secret", "token", "jaas", "credential", "private",
                                              "ssl.key", "key.pem", "keystore", "oauthbearer.config"};
/* Endings that say the value is only where a secret lives. */
static const char *const kb_secret_path_endings[] = {"_file", ".location"};

bool kb_secret_key_like(const char *key) {
    size_t n = strlen(key);
    for (size_t i = 0; i < sizeof(kb_secret_path_endings) / sizeof(kb_secret_path_endings[0]); i++) {
        size_t e = strlen(kb_secret_path_endings[i]);
        if (n > e && !strcasecmp(key + n - e, kb_secret_path_endings[i]))
            return false;
    }
    for (size_t i = 0; i < sizeof(kb_secret_words) / sizeof(kb_secret_words[0]); i++)
        if (strcasestr(key, kb_secret_words[i]))
            return true;
    return false;
}

bool kb_secret_equal(const char *a, size_t alen, const char *b, size_t blen) {
    unsigned diff = alen != blen;
    size_t n = alen > blen ? alen : blen;
    for (size_t i = 0; i < n; i++) {
        unsigned char x = i < alen ? (unsigned char)a[i] : 0;
        unsigned char y = i < blen ? (unsigned char)b[i] : 0;
        diff |= (unsigned)(x ^ y);
    }
    return diff == 0;
}
