/* tests/kubesim/token.c — LIST continue tokens.
 *
 * Same shape as kube-apiserver's etcd3 store: base64url without padding of
 * {"v":"meta.k8s.io/v1","rv":<int64>,"start":"<last key>\u0000"}. "start" is
 * the key relative to the listed scope ("ns/name" for an all-namespaces
 * list, "name" inside one namespace) with a NUL appended, i.e. the smallest
 * key strictly after the last one returned. rv -1 marks the inconsistent
 * replacement token handed out with a 410. Decoding happens once per page,
 * so jansson is fine here.
 */
#include "tests/kubesim/kubesim_int.h"

#include "common/alloc.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static void b64url_encode(const unsigned char *in, size_t n, kb_buf_t *out) {
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < n)
            v |= in[i + 2];
        kb_buf_append_char(out, b64url[(v >> 18) & 63]);
        kb_buf_append_char(out, b64url[(v >> 12) & 63]);
        if (i + 1 < n)
            kb_buf_append_char(out, b64url[(v >> 6) & 63]);
        if (i + 2 < n)
            kb_buf_append_char(out, b64url[v & 63]);
    }
}

static int b64_val(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '-' || c == '+') return 62;
    if (c == '_' || c == '/') return 63;
    return -1;
}

/* Accepts both alphabets, with or without padding. -1 on a bad character. */
static int b64_decode(const char *in, kb_buf_t *out) {
    uint32_t acc = 0;
    int bits = 0;
    for (const char *p = in; *p && *p != '='; p++) {
        int v = b64_val(*p);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            kb_buf_append_char(out, (char)((acc >> bits) & 0xff));
        }
    }
    return 0;
}

void kb_sim__token_encode(int64_t rv, const char *last_key, kb_buf_t *out) {
    kb_buf_t js = KB_BUF_INIT;
    kb_buf_appendf(&js, "{\"v\":\"meta.k8s.io/v1\",\"rv\":%lld,\"start\":", (long long)rv);
    kb_buf_append_json_str(&js, last_key, strlen(last_key));
    js.len--; /* reopen the string to add the NUL as \u0000 */
    kb_buf_append_str(&js, "\\u0000\"}");
    b64url_encode((const unsigned char *)js.data, js.len, out);
    kb_buf_fini(&js);
}

int kb_sim__token_decode(const char *token, int64_t *rv, char **start) {
    kb_buf_t raw = KB_BUF_INIT;
    json_t *root = NULL;
    int rc = -1;
    *start = NULL;
    if (!token || !*token || b64_decode(token, &raw) < 0 || raw.len == 0)
        goto out;
    root = json_loadb(raw.data, raw.len, JSON_ALLOW_NUL, NULL);
    json_t *jv = json_object_get(root, "v"), *jrv = json_object_get(root, "rv");
    json_t *js = json_object_get(root, "start");
    if (!json_is_string(jv) || strcmp(json_string_value(jv), "meta.k8s.io/v1") != 0 ||
        !json_is_integer(jrv) || !json_is_string(js))
        goto out;
    size_t n = json_string_length(js);
    const char *s = json_string_value(js);
    if (n > 0 && s[n - 1] == '\0')
        n--;
    if (memchr(s, '\0', n))
        goto out;
    *rv = (int64_t)json_integer_value(jrv);
    *start = kb_strndup(s, n);
    rc = 0;
out:
    json_decref(root);
    kb_buf_fini(&raw);
    return rc;
}
