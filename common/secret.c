/* common/secret.c — read a small secret file (see secret.h). */
#include "common/secret.h"

#include "common/alloc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *kb_secret_read(const char *path, size_t max, size_t *len, char *why, size_t why_size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, why_size, "cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = kb_malloc(max + 2);
    size_t n = fread(buf, 1, max + 1, f);
    fclose(f);
    if (n > max) {
        snprintf(why, why_size, "%s is longer than %zu bytes", path, max);
        kb_secret_free(buf);
        return NULL;
    }
    while (n && strchr(" \t\r\n", buf[n - 1]))
        n--;
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

void kb_secret_free(char *secret) {
    if (!secret)
        return;
    volatile char *p = secret;
    while (*p)
        *p++ = '\0';
    free(secret);
}
