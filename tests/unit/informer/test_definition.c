/* tests/unit/informer/test_definition.c — state_dir knows which definition it
 * was written under: the canonical text and its diff, and an informer that
 * reopens its state_dir under another definition lists first and diffs
 * (what left: DELETED finalStateUnknown) instead of resuming, stores the new
 * definition only with the completed list, and adopts a state_dir that
 * records none. */
#include "common/buf.h"
#include "config/config.h"
#include "informer/definition.h"
#include "informer/informer.h"
#include "informer/ingest.h"

#include <lmdb.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static char dir[] = "/tmp/kbtest-defn-XXXXXX";

static kb_config_t *config(const char *informer_keys) {
    char text[1024], err[512];
    snprintf(text, sizeof(text),
             "cluster = { name = \"t\"; server = \"http://127.0.0.1:9\"; };\n"
             "state_dir = \"%s\";\n"
             "informers = ( { name = \"pods\"; version = \"v1\"; resource = \"pods\"; shards = 1; %s } );\n"
             "sinks = ( { name = \"out\"; type = \"file\"; path = \"/dev/null\"; } );\n"
             "routes = ( { informer = \"pods\"; sink = \"out\"; } );\n",
             dir, informer_keys);
    kb_config_t *cfg = kb_config_load_string(text, "t.cfg", err, sizeof(err));
    if (!cfg)
        fail_msg("%s", err);
    return cfg;
}

static void test_text_and_diff(void **state) {
    (void)state;
    kb_config_t *a = config("label_selector = \"app=a\"; namespaces = [ \"n2\", \"n1\" ];");
    kb_config_t *b = config("label_selector = \"app=b\"; namespaces = [ \"n1\", \"n2\" ];");
    kb_config_t *c = config("label_selector = \"app=a\"; namespaces = [ \"n1\", \"n2\" ]; keep_fields = [ \"spec\" ];");
    const char *srv = "http://127.0.0.1:9";
    char *ta = kb_definition_text(&a->informers[0], srv), *tb = kb_definition_text(&b->informers[0], srv),
         *tc = kb_definition_text(&c->informers[0], srv);
    assert_non_null(strstr(ta, "namespaces=[\"n1\",\"n2\"]\n")); /* sorted: the order means nothing */
    assert_non_null(strstr(ta, "label_selector=\"app=a\"\n"));
    /* The fields lists are sets too: their order changes neither objects nor bytes. */
    kb_config_t *d1 = config("drop_fields = [ \"metadata.managedFields\", \"status\" ];");
    kb_config_t *d2 = config("drop_fields = [ \"status\", \"metadata.managedFields\" ];");
    char *td1 = kb_definition_text(&d1->informers[0], srv), *td2 = kb_definition_text(&d2->informers[0], srv);
    assert_string_equal(td1, td2);
    free(td1);
    free(td2);
    kb_config_free(d1);
    kb_config_free(d2);
    kb_buf_t what = KB_BUF_INIT;
    assert_int_equal(kb_definition_diff(ta, ta, &what), 0);
    assert_int_equal(what.len, 0);
    assert_int_equal(kb_definition_diff(ta, tb, &what), KB_DEF_CHANGED);
    assert_string_equal(what.data, "label_selector \"app=a\" -> \"app=b\"");
    kb_buf_reset(&what);
    assert_int_equal(kb_definition_diff(ta, tc, &what), KB_DEF_CHANGED | KB_DEF_RESHAPED);
    assert_string_equal(what.data, "keep_fields [] -> [\"spec\"]");
    kb_buf_reset(&what);
    /* A key one side lacks (another kbridge version) is a change. */
    assert_int_equal(kb_definition_diff("group=\"\"\nextra=1\n", "group=\"\"\n", &what), KB_DEF_CHANGED);
    assert_string_equal(what.data, "extra 1 -> (none)");
    kb_buf_fini(&what);
    free(ta);
    free(tb);
    free(tc);
    kb_config_free(a);
    kb_config_free(b);
    kb_config_free(c);
}

/* One list of pods named in names (each "name:rv") at list_rv, as one page. */
static kb_err_t list(kb_informer_t *inf, const char *list_rv, const char *const *names, size_t n) {
    kb_buf_t b = KB_BUF_INIT, cont = KB_BUF_INIT;
    kb_buf_appendf(&b, "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"%s\"},"
                       "\"items\":[", list_rv);
    for (size_t i = 0; i < n; i++) {
        const char *colon = strchr(names[i], ':');
        kb_buf_appendf(&b, "%s{\"metadata\":{\"name\":\"%.*s\",\"namespace\":\"d\",\"uid\":\"u-%.*s\","
                           "\"resourceVersion\":\"%s\"}}", i ? "," : "", (int)(colon - names[i]), names[i],
                       (int)(colon - names[i]), names[i], colon + 1);
    }
    kb_buf_append_str(&b, "]}");
    kb_ingest_list_begin(inf, 0);
    kb_err_t err = kb_ingest_list_page(inf, 0, b.data, b.len, &cont);
    kb_buf_fini(&b);
    kb_buf_fini(&cont);
    return err;
}

/* The queued events as "TYPE name[!]" (! = finalStateUnknown), joined by ' '. */
static void queued(kb_informer_t *inf, char *out, size_t size) {
    out[0] = '\0';
    kb_deltas_t d;
    kb_deltas_init(&d);
    while (kb_deltafifo_pop(kb_informer_fifo(inf, 0), &d, 0) == KB_OK) {
        for (size_t i = 0; i < d.n; i++)
            snprintf(out + strlen(out), size - strlen(out), "%s%s %.*s%s", out[0] ? " " : "",
                     kb_event_type_name(d.ev[i]->type), (int)d.ev[i]->name_len, d.ev[i]->name,
                     d.ev[i]->final_state_unknown ? "!" : "");
        kb_deltas_fini(&d);
        kb_deltas_init(&d);
    }
    kb_deltas_fini(&d);
}

/* The informer built from cfg, and where its first watch would start ("": list first). */
static kb_informer_t *open_inf(kb_config_t *cfg, char *rv, size_t rv_size) {
    char err[512];
    kb_informer_t *inf = kb_informer_new(cfg, &cfg->informers[0], NULL, err, sizeof(err));
    if (!inf)
        fail_msg("%s", err);
    kb_ingest_watch_begin(inf, 0, rv, rv_size);
    return inf;
}

/* Forget the stored definition, as a state_dir from before definitions were
 * kept; or with only_server, its server line (from before servers were). */
static void forget_definition(bool only_server) {
    char path[64];
    snprintf(path, sizeof(path), "%s/pods", dir);
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi meta;
    assert_int_equal(mdb_env_create(&env), 0);
    assert_int_equal(mdb_env_set_maxdbs(env, 4), 0);
    assert_int_equal(mdb_env_set_mapsize(env, (size_t)64 << 30), 0);
    assert_int_equal(mdb_env_open(env, path, 0, 0600), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "meta", 0, &meta), 0);
    MDB_val k = {10, (void *)"definition"}, v;
    if (only_server) {
        assert_int_equal(mdb_get(txn, meta, &k, &v), 0);
        char *text = strndup(v.mv_data, v.mv_size), *rest = strchr(text, '\n') + 1;
        assert_int_equal(strncmp(text, "server=", 7), 0);
        v = (MDB_val){strlen(rest), rest};
        assert_int_equal(mdb_put(txn, meta, &k, &v, 0), 0);
        free(text);
    } else {
        assert_int_equal(mdb_del(txn, meta, &k, NULL), 0);
    }
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
}

/* The API server is part of the definition (another cluster on the same
 * state_dir lists and diffs); a text stored before it was is taken to be of
 * the server configured now, not a change. A pending definition marked as
 * re-sending is a reshape against any other. */
static void test_server(void **state) {
    (void)state;
    kb_config_informer_t pods = {.group = "", .version = "v1", .resource = "pods", .label_selector = "",
                                 .field_selector = ""};
    char *ta = kb_definition_text(&pods, "https://a:6443"), *tb = kb_definition_text(&pods, "https://b:6443");
    kb_buf_t what = KB_BUF_INIT;
    assert_int_equal(kb_definition_diff(ta, tb, &what), KB_DEF_CHANGED | KB_DEF_SERVER);
    assert_string_equal(what.data, "server \"https://a:6443\" -> \"https://b:6443\"");
    char *old = strdup(strchr(ta, '\n') + 1); /* without its first line: the server */
    assert_null(strstr(old, "server="));
    char *adopted = kb_definition_adopt(old, tb);
    assert_non_null(adopted);
    assert_string_equal(adopted, tb);
    assert_null(kb_definition_adopt(ta, tb)); /* it has one: nothing to adopt */
    /* A pending definition whose start re-sent every object: whatever comes
     * next (here the very same definition) owes the re-send too. */
    char *resending = malloc(strlen(tb) + sizeof(KB_DEF_RESEND_LINE));
    strcpy(resending, tb);
    strcat(resending, KB_DEF_RESEND_LINE);
    kb_buf_reset(&what);
    assert_int_equal(kb_definition_diff(resending, tb, &what), KB_DEF_CHANGED | KB_DEF_RESHAPED);
    free(resending);
    kb_buf_fini(&what);
    free(adopted);
    free(old);
    free(ta);
    free(tb);
}

/* Where a redaction writes base64 (a Secret's data), the definition says so:
 * a state_dir written before redactions kept types lacks the key and resends. */
static void test_redact_base64_reshapes(void **state) {
    (void)state;
    char *redact[] = {"data"};
    kb_config_informer_t sec = {.group = "", .version = "v1", .resource = "secrets", .label_selector = "",
                                .field_selector = "", .redact_fields = {redact, 1}};
    kb_config_informer_t pods = sec;
    pods.resource = "pods";
    char *ts = kb_definition_text(&sec, ""), *tp = kb_definition_text(&pods, "");
    assert_non_null(strstr(ts, "redact_base64=[\"data\"]\n"));
    assert_null(strstr(tp, "redact_base64"));
    /* the same text without the key: what an older kbridge stored */
    char *old = strdup(ts);
    char *at = strstr(old, "redact_base64=");
    memmove(at, strchr(at, '\n') + 1, strlen(strchr(at, '\n') + 1) + 1);
    kb_buf_t what = KB_BUF_INIT;
    assert_int_equal(kb_definition_diff(old, ts, &what), KB_DEF_CHANGED | KB_DEF_RESHAPED);
    kb_buf_fini(&what);
    free(old);
    free(ts);
    free(tp);
}

static void test_changed_definition_relists(void **state) {
    (void)state;
    assert_non_null(mkdtemp(dir));
    kb_config_t *a = config("label_selector = \"app=a\";"), *b = config("label_selector = \"app=b\";");
    char rv[KB_RV_MAX], got[256];
    static const char *const as[] = {"a1:2", "a2:3"}, *const bs[] = {"b1:4"};

    kb_informer_t *inf = open_inf(a, rv, sizeof(rv));
    assert_string_equal(rv, "");
    assert_int_equal(list(inf, "5", as, 2), KB_OK);
    assert_int_equal(kb_ingest_list_end(inf, 0), KB_OK);
    queued(inf, got, sizeof(got));
    assert_string_equal(got, "ADDED a1 ADDED a2");
    kb_informer_destroy(inf);

    /* The same definition resumes where the journal ends. */
    inf = open_inf(a, rv, sizeof(rv));
    assert_string_equal(rv, "5");
    kb_informer_destroy(inf);

    /* Another one lists first; a crash before the list completes keeps it so. */
    inf = open_inf(b, rv, sizeof(rv));
    assert_string_equal(rv, "");
    assert_int_equal(list(inf, "6", bs, 1), KB_OK);
    kb_ingest_crash(inf);
    inf = open_inf(b, rv, sizeof(rv));
    assert_string_equal(rv, "");
    assert_int_equal(list(inf, "6", bs, 1), KB_OK);
    assert_int_equal(kb_ingest_list_end(inf, 0), KB_OK);
    queued(inf, got, sizeof(got));
    /* b1 came with the crashed list's page; the cache's order is its own. */
    assert_true(!strcmp(got, "DELETED a1! DELETED a2!") || !strcmp(got, "DELETED a2! DELETED a1!"));
    kb_informer_destroy(inf);
    inf = open_inf(b, rv, sizeof(rv));
    assert_string_equal(rv, "6"); /* stored with the list: resumes */
    kb_informer_destroy(inf);

    /* No definition stored (an older kbridge): the current one is adopted and resumes … */
    forget_definition(false);
    inf = open_inf(a, rv, sizeof(rv));
    assert_string_equal(rv, "6");
    kb_informer_destroy(inf);
    /* … and is what the next start compares with. */
    inf = open_inf(b, rv, sizeof(rv));
    assert_string_equal(rv, "");
    assert_int_equal(list(inf, "7", bs, 1), KB_OK);
    assert_int_equal(kb_ingest_list_end(inf, 0), KB_OK);
    kb_informer_destroy(inf);

    /* One stored without the API server: taken to be of the server configured now, it resumes. */
    forget_definition(true);
    inf = open_inf(b, rv, sizeof(rv));
    assert_string_equal(rv, "7");
    kb_informer_destroy(inf);

    kb_config_free(a);
    kb_config_free(b);
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* A reload's decision per informer (kb_definition_reload, what
 * kb_bridge_reload carries out): the same definition keeps the running one,
 * a new name is added, a changed one of the same name is refused with
 * state_dir (naming the key) and rebuilt without. */
static void test_reload_decision(void **state) {
    (void)state;
    kb_config_t *a = config("namespaces = [ \"n1\" ];");
    kb_config_t *same = config("namespaces = [ \"n1\" ];");
    kb_config_t *changed = config("namespaces = [ \"n1\", \"n2\" ];");
    const kb_config_informer_t *running[] = {&a->informers[0]};
    size_t keep = 9;
    char what[128] = "";
    assert_int_equal(kb_definition_reload(running, 1, &same->informers[0], true, &keep, what, sizeof(what)),
                     KB_DEF_RELOAD_KEEP);
    assert_int_equal(keep, 0);
    assert_int_equal(kb_definition_reload(running, 1, &changed->informers[0], true, &keep, what, sizeof(what)),
                     KB_DEF_RELOAD_REFUSE);
    assert_string_equal(what, "namespaces");
    assert_int_equal(kb_definition_reload(running, 1, &changed->informers[0], false, &keep, NULL, 0),
                     KB_DEF_RELOAD_REBUILD);
    /* None running of its name (removed by an earlier reload, or new): added. */
    assert_int_equal(kb_definition_reload(running, 0, &changed->informers[0], true, &keep, NULL, 0),
                     KB_DEF_RELOAD_ADD);
    kb_config_free(a);
    kb_config_free(same);
    kb_config_free(changed);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_text_and_diff),
                                       cmocka_unit_test(test_redact_base64_reshapes),
                                       cmocka_unit_test(test_server),
                                       cmocka_unit_test(test_changed_definition_relists),
                                       cmocka_unit_test(test_reload_decision)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
