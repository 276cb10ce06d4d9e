/* informer/ingest.h — a reflector's steps without the network.
 *
 * The reflector threads (informer.c) get bytes from the API server and hand
 * them to these same steps: a list is begin → page … → end, a watch is
 * watch_begin → watch_bytes … (the bytes of the HTTP body, in any chunks), a
 * streamed list is stream_begin → watch_bytes … → stream_end.
 * The deterministic simulation (tests/sim) drives them directly, on one
 * thread, with a model API server: so the simulated core is the product's
 * ingest, gate, journal, DeltaFIFO and ledger, not a copy of them.
 *
 * Use only on an informer that was created and not started (no reflector
 * thread runs; the caller is the only one calling in). refl is the index of
 * the reflector: the informer's namespaces in config order, or 0 for a
 * cluster-wide informer.
 */
#ifndef KB_INFORMER_INGEST_H
#define KB_INFORMER_INGEST_H

#include "common/buf.h"
#include "common/err.h"
#include "informer/informer.h"

#include <stddef.h>

/* A new list: forget what an earlier, unfinished one saw. */
void kb_ingest_list_begin(kb_informer_t *inf, size_t refl);
/* One page (a List body): ingested as one batch; cont gets the continue
 * token, "" on the last page. KB_OK, KB_ERR_PARSE, KB_ERR_IO (state_dir). */
kb_err_t kb_ingest_list_page(kb_informer_t *inf, size_t refl, const char *body, size_t len, kb_buf_t *cont);
/* The list is complete: deletes for what it did not contain, the resume point. */
kb_err_t kb_ingest_list_end(kb_informer_t *inf, size_t refl);

/* A new watch; rv gets the resourceVersion it starts from ("" = list first). */
void kb_ingest_watch_begin(kb_informer_t *inf, size_t refl, char *rv, size_t rv_size);
/* Bytes of the watch body. KB_OK while the watch goes on; otherwise why it
 * ended (KB_ERR_GONE for a 410 ERROR event, KB_ERR_PARSE, KB_ERR_IO, …). */
kb_err_t kb_ingest_watch_bytes(kb_informer_t *inf, size_t refl, const char *data, size_t len);

/* A streamed list: a watch with sendInitialEvents=true, whose bytes go to
 * kb_ingest_watch_bytes — the initial ADDED events, the BOOKMARK annotated
 * k8s.io/initial-events-end, then changes on the same stream. stream_listed:
 * that BOOKMARK is committed (the list is complete; the frames now are
 * changes). stream_end: the stream ended, whatever the cause; returns
 * stream_listed (false: the list must start again). */
void kb_ingest_stream_begin(kb_informer_t *inf, size_t refl);
bool kb_ingest_stream_listed(kb_informer_t *inf, size_t refl);
bool kb_ingest_stream_end(kb_informer_t *inf, size_t refl);

/* A crash: destroy the informer without writing a final checkpoint or
 * anything else (what state_dir holds is what the last commits left). */
void kb_ingest_crash(kb_informer_t *inf);

#endif
