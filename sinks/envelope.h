/* sinks/envelope.h — the bytes a message carries (docs/envelope.md).
 *
 * Every sink formats through here so the envelope is written once:
 *   JSON envelope            {"type":…,"cluster":…,…,"object":{…}}
 *   CloudEvents structured   {"specversion":"1.0","id":…,…,"data":{…}}
 *   CloudEvents binary       data = the object; attributes as headers/properties
 * The object bytes are copied in as they are; nothing is parsed again.
 * Pure functions; thread-safe.
 */
#ifndef KB_SINKS_ENVELOPE_H
#define KB_SINKS_ENVELOPE_H

#include "common/buf.h"
#include "common/event.h"

#include <stddef.h>

/* Append the kbridge JSON envelope for ev (no trailing newline). */
void kb_envelope_json(const kb_event_t *ev, kb_buf_t *out);
/* Append a CloudEvents 1.0 structured-mode JSON event; partition_key = the route key. */
void kb_envelope_ce_structured(const kb_event_t *ev, const char *partition_key, size_t pk_len, kb_buf_t *out);

/* CloudEvents attributes for binary mode. Values point into `storage`, which
 * must outlive the attribute array. */
typedef struct kb_ce_attr {
    const char *name;  /* "id", "source", "specversion", "type", "subject", "time",
                          "datacontenttype", "resourceversion", "partitionkey" */
    const char *value;
} kb_ce_attr_t;

#define KB_CE_ATTR_COUNT 9
/* Fill attrs[KB_CE_ATTR_COUNT]; storage is reset and holds the values. */
void kb_envelope_ce_attrs(const kb_event_t *ev, const char *partition_key, size_t pk_len,
                          kb_ce_attr_t attrs[KB_CE_ATTR_COUNT], kb_buf_t *storage);

#endif
