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

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
