/* tests/fuzz/fuzz_template.c — libFuzzer target for topic/key templates.
 *
 * Input: lines. The first is the template text (up to a NUL, as a C string
 * from the config would be); the next ones are the namespace, name, uid and
 * cluster of the event it is rendered for (values may hold '/', '+', '#',
 * '%' and NUL), and the rest is its object bytes (any bytes: labels and
 * annotations are looked up in them; the labels span is metadata.labels when
 * it reads as a member). Checks, beyond "no crash, no leak, no sanitizer report":
 *  - a refused template always names itself ("template \"…\"");
 *  - rendering is deterministic and NUL-terminated at len;
 *  - with KB_TEMPLATE_ESCAPE_MQTT the output holds no NUL, and no more '/',
 *    '+' or '#' than the template's own text: a value can never add an MQTT
 *    topic level or a wildcard (collapsing only removes separators).
 * Seeds: tests/fuzz/corpus/template/.
 */
#include "common/buf.h"
#include "common/event.h"
#include "common/fields.h"
#include "common/template.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t kb_fz_count(const char *s, size_t n, char c) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += s[i] == c;
    return k;
}

/* Next '\n'-separated field of [*p, end); empty once the input is used up. */
static const char *kb_fz_field(const uint8_t **p, const uint8_t *end, size_t *len) {
    const uint8_t *s = *p;
    const uint8_t *nl = s < end ? memchr(s, '\n', (size_t)(end - s)) : NULL;
    const uint8_t *e = nl ? nl : end;
    *len = (size_t)(e - s);
    *p = nl ? nl + 1 : end;
    return (const char *)s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 14)
        return 0;
    const uint8_t *p = data, *end = data + size;
    size_t tlen, nslen, nlen, ulen, clen;
    const char *t = kb_fz_field(&p, end, &tlen);
    const char *ns = kb_fz_field(&p, end, &nslen);
    const char *name = kb_fz_field(&p, end, &nlen);
    const char *uid = kb_fz_field(&p, end, &ulen);
    const char *cl = kb_fz_field(&p, end, &clen);
    const char *obj = p < end ? (const char *)p : "{}";
    size_t olen = p < end ? (size_t)(end - p) : 2;
    const char *meta, *labels;
    size_t mlen, llen = 0;
    if (!(kb_fields_member(obj, olen, "metadata", 8, &meta, &mlen) &&
          kb_fields_member(meta, mlen, "labels", 6, &labels, &llen)))
        labels = obj, llen = 0;
    char *text = strndup(t, tlen); /* stops at a NUL, as a C string from the config would */
    char *cluster = strndup(cl, clen);
    if (!text || !cluster)
        abort();

    char err[512] = "";
    kb_template_t *tpl = kb_template_compile(text, err, sizeof(err));
    if (!tpl) {
        if (strncmp(err, "template \"", 10) != 0)
            abort();
        goto out;
    }
    if (strcmp(kb_template_text(tpl), text) != 0)
        abort();
    kb_resource_t *res = kb_resource_new(cluster, "fz", "apps", "v1", "deployments");
    kb_event_init_t init = {.type = KB_EV_MODIFIED, .res = res, .ns = ns, .ns_len = nslen, .name = name,
                            .name_len = nlen, .uid = uid, .uid_len = ulen, .rv = "7", .rv_len = 1,
                            .obj = obj, .obj_len = olen, .labels_off = (size_t)(labels - obj),
                            .labels_len = llen};
    kb_event_t *ev = kb_event_new(&init);
    kb_buf_t a = KB_BUF_INIT, b = KB_BUF_INIT, m = KB_BUF_INIT;
    kb_template_render(tpl, ev, 0, &a);
    kb_template_render(tpl, ev, 0, &b);
    kb_template_render(tpl, ev, KB_TEMPLATE_ESCAPE_MQTT, &m);
    kb_buf_t f = KB_BUF_INIT; /* the field reader on the same bytes: no crash, NUL-free of garbage */
    kb_fields_get(ev->obj, ev->obj_len, "metadata.annotations", &f);
    kb_buf_fini(&f);
    if (a.len != b.len || (a.len && memcmp(a.data, b.data, a.len) != 0))
        abort();
    if (m.data && m.data[m.len] != '\0')
        abort();
    size_t tl = strlen(text);
    if (m.len && (memchr(m.data, '\0', m.len) || kb_fz_count(m.data, m.len, '/') > kb_fz_count(text, tl, '/') ||
                  kb_fz_count(m.data, m.len, '+') > kb_fz_count(text, tl, '+') ||
                  kb_fz_count(m.data, m.len, '#') > kb_fz_count(text, tl, '#')))
        abort();
    kb_buf_fini(&a);
    kb_buf_fini(&b);
    kb_buf_fini(&m);
    kb_event_unref(ev);
    kb_resource_unref(res);
    kb_template_free(tpl);
out:
    free(text);
    free(cluster);
    return 0;
}
