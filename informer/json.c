/* informer/json.c — validating scanner over raw JSON bytes (see json.h).
 *
 * Design: one loop, no recursion. The only state besides the position is
 * the stack of open containers, one bit per level (object or array), so the
 * depth limit costs 64 bytes of stack and a hostile document cannot overflow
 * the C stack. Tokens are read by the helpers of json_int.h, which decode.c
 * shares so that both agree on what JSON is.
 *
 * Decisions worth knowing:
 *  - A lone top-level number that reaches the end of the input is OK, since
 *    nothing tells whether more digits would follow; watch frames and list
 *    bodies are objects, which always end with '}'.
 *  - Invalid UTF-8 inside strings is not checked: the bytes are opaque to
 *    us and are passed on unchanged.
 */
#include "informer/json.h"

#include "informer/json_int.h"

#include <stdint.h>
#include <string.h>

typedef struct kb_json_stack {
    uint64_t bits[KB_JSON_MAX_DEPTH / 64]; /* bit set: the level is an array */
    size_t depth;                          /* open containers */
} kb_json_stack_t;

static bool kb_json_push(kb_json_stack_t *st, bool is_array) {
    if (st->depth >= KB_JSON_MAX_DEPTH)
        return false;
    uint64_t bit = 1ull << (st->depth % 64);
    if (is_array)
        st->bits[st->depth / 64] |= bit;
    else
        st->bits[st->depth / 64] &= ~bit;
    st->depth++;
    return true;
}

static bool kb_json_top_is_array(const kb_json_stack_t *st) {
    size_t d = st->depth - 1;
    return (st->bits[d / 64] >> (d % 64)) & 1u;
}

kb_json_status_t kb_json_scan_value(const char *buf, size_t len, size_t *start, size_t *end) {
    kb_json_stack_t st;
    st.depth = 0;
    size_t i = kb_json__skip_ws(buf, len, 0);
    kb_json_status_t s = KB_JSON_OK;
    bool esc = false;
    *start = i;

value:
    if (i >= len)
        return KB_JSON_INCOMPLETE;
    switch (buf[i]) {
    case '{':
    case '[': {
        bool arr = buf[i] == '[';
        if (!kb_json_push(&st, arr))
            goto invalid;
        i = kb_json__skip_ws(buf, len, i + 1);
        if (i >= len)
            return KB_JSON_INCOMPLETE;
        if (buf[i] == (arr ? ']' : '}')) {
            i++;
            st.depth--;
            goto after_value;
        }
        if (arr)
            goto value;
        goto member;
    }
    case '"':
        s = kb_json__string(buf, len, &i, NULL, &esc);
        break;
    case 't':
    case 'f':
    case 'n':
        s = kb_json__literal(buf, len, &i, NULL);
        break;
    default:
        if (buf[i] == '-' || (buf[i] >= '0' && buf[i] <= '9'))
            s = kb_json__number(buf, len, &i, NULL);
        else
            s = KB_JSON_INVALID;
        break;
    }
    if (s != KB_JSON_OK)
        goto fail;

after_value:
    if (st.depth == 0) {
        *end = i;
        return KB_JSON_OK;
    }
    i = kb_json__skip_ws(buf, len, i);
    if (i >= len)
        return KB_JSON_INCOMPLETE;
    bool arr = kb_json_top_is_array(&st);
    if (buf[i] == (arr ? ']' : '}')) {
        i++;
        st.depth--;
        goto after_value;
    }
    if (buf[i] != ',')
        goto invalid;
    i = kb_json__skip_ws(buf, len, i + 1);
    if (arr)
        goto value;

member:
    if (i >= len)
        return KB_JSON_INCOMPLETE;
    if (buf[i] != '"')
        goto invalid;
    s = kb_json__string(buf, len, &i, NULL, &esc);
    if (s != KB_JSON_OK)
        goto fail;
    i = kb_json__skip_ws(buf, len, i);
    if (i >= len)
        return KB_JSON_INCOMPLETE;
    if (buf[i] != ':')
        goto invalid;
    i = kb_json__skip_ws(buf, len, i + 1);
    goto value;

fail:
    if (s == KB_JSON_INCOMPLETE)
        return KB_JSON_INCOMPLETE;
invalid:
    *end = i;
    return KB_JSON_INVALID;
}

bool kb_json_object_get(const char *buf, size_t len, const char *name, kb_span_t *value) {
    size_t nlen = strlen(name);
    size_t i = kb_json__skip_ws(buf, len, 0);
    bool esc = false;
    if (i >= len || buf[i] != '{')
        return false;
    i = kb_json__skip_ws(buf, len, i + 1);
    while (i < len && buf[i] == '"') {
        size_t k = i;
        if (kb_json__string(buf, len, &i, NULL, &esc) != KB_JSON_OK)
            return false;
        bool match = i - k - 2 == nlen && memcmp(buf + k + 1, name, nlen) == 0;
        i = kb_json__skip_ws(buf, len, i);
        if (i >= len || buf[i] != ':')
            return false;
        size_t vs, ve;
        if (kb_json_scan_value(buf + i + 1, len - i - 1, &vs, &ve) != KB_JSON_OK)
            return false;
        if (match) {
            value->off = i + 1 + vs;
            value->len = ve - vs;
            return true;
        }
        i = kb_json__skip_ws(buf, len, i + 1 + ve);
        if (i >= len || buf[i] != ',')
            return false;
        i = kb_json__skip_ws(buf, len, i + 1);
    }
    return false;
}

kb_span_t kb_json_string_inner(const char *buf, kb_span_t str) {
    kb_span_t in = {0, 0};
    if (str.len >= 2 && buf[str.off] == '"' && buf[str.off + str.len - 1] == '"') {
        in.off = str.off + 1;
        in.len = str.len - 2;
    }
    return in;
}

static int kb_json_hex4(const char *p) {
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p[k];
        int d = c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
        v = v * 16 + d;
    }
    return v;
}

/* UTF-8 encode cp at out[*o]; false if it does not fit below limit. */
static bool kb_json_put_utf8(char *out, size_t *o, size_t limit, uint32_t cp) {
    unsigned char tmp[4];
    size_t n;
    if (cp < 0x80) {
        tmp[0] = (unsigned char)cp;
        n = 1;
    } else if (cp < 0x800) {
        tmp[0] = (unsigned char)(0xC0 | (cp >> 6));
        tmp[1] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        tmp[0] = (unsigned char)(0xE0 | (cp >> 12));
        tmp[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        tmp[2] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        tmp[0] = (unsigned char)(0xF0 | (cp >> 18));
        tmp[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        tmp[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        tmp[3] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    if (*o + n > limit)
        return false;
    memcpy(out + *o, tmp, n);
    *o += n;
    return true;
}

long kb_json_string_decode(const char *buf, kb_span_t str, char *out, size_t out_size) {
    size_t i = str.off;
    size_t end = str.off + str.len;
    bool esc = false;
    if (out_size == 0 || str.len < 2 || buf[i] != '"' ||
        kb_json__string(buf, end, &i, NULL, &esc) != KB_JSON_OK || i != end)
        return -1;
    size_t limit = out_size - 1, o = 0;
    for (i = str.off + 1; i < end - 1; i++) {
        char c = buf[i];
        if (c != '\\') {
            if (o >= limit)
                return -1;
            out[o++] = c;
            continue;
        }
        c = buf[++i];
        uint32_t cp;
        switch (c) {
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u':
            cp = (uint32_t)kb_json_hex4(buf + i + 1);
            i += 4;
            /* A high surrogate followed by a low one is one code point; a
             * lone surrogate becomes U+FFFD. */
            if (cp >= 0xD800 && cp <= 0xDBFF && i + 6 < end && buf[i + 1] == '\\' &&
                buf[i + 2] == 'u') {
                uint32_t lo = (uint32_t)kb_json_hex4(buf + i + 3);
                if (lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    i += 6;
                }
            }
            if (cp >= 0xD800 && cp <= 0xDFFF)
                cp = 0xFFFD;
            break;
        default: cp = (unsigned char)c; break; /* " \ / */
        }
        if (!kb_json_put_utf8(out, &o, limit, cp))
            return -1;
    }
    out[o] = '\0';
    return (long)o;
}
