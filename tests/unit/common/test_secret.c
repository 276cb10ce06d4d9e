/* tests/unit/common/test_secret.c — reading secret files: the whole file,
 * trailing whitespace removed, a refused over-long file freed without reading
 * past its buffer (ASan fills small mallocs with non-zero bytes, so a walk to
 * a NUL that is not there is caught), the comparison, which names hold
 * secrets, which hosts are loopback, and the no-core-dump switch. */
#include "common/secret.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>

static char dir[] = "/tmp/kb-secret-XXXXXX";

static const char *write_file(const char *name, const char *text, size_t n) {
    static char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, n, f), n);
    fclose(f);
    return path;
}

static void test_reads_and_trims(void **state) {
    (void)state;
    const char *path = write_file("tok", "s3cret \t\r\n\n", 11);
    char why[256] = "";
    size_t n = 99;
    char *s = kb_secret_read(path, 64, &n, why, sizeof(why));
    assert_non_null(s);
    assert_string_equal(s, "s3cret");
    assert_int_equal(n, 6);
    kb_secret_free(s);
    path = write_file("exact", "0123456789", 10);
    s = kb_secret_read(path, 10, &n, why, sizeof(why));
    assert_non_null(s);
    assert_int_equal(n, 10);
    kb_secret_free(s);
    path = write_file("empty", "", 0);
    s = kb_secret_read(path, 10, &n, why, sizeof(why));
    assert_non_null(s);
    assert_int_equal(n, 0);
    kb_secret_free(s);
}

static void test_over_long_is_refused_inside_its_buffer(void **state) {
    (void)state;
    char big[200];
    memset(big, 'A', sizeof(big));
    const char *path = write_file("big", big, sizeof(big));
    char why[256] = "";
    for (size_t max = 1; max < 150; max += 7) {
        char *s = kb_secret_read(path, max, NULL, why, sizeof(why));
        assert_null(s);
        assert_non_null(strstr(why, "longer than"));
        assert_null(strstr(why, "AAAA")); /* never the contents */
    }
}

static void test_missing_file_names_path(void **state) {
    (void)state;
    char why[256] = "";
    assert_null(kb_secret_read("/nonexistent/kb-token", 10, NULL, why, sizeof(why)));
    assert_non_null(strstr(why, "/nonexistent/kb-token"));
}

static void test_free_wipes_and_null(void **state) {
    (void)state;
    kb_secret_free(NULL);
    char *s = strdup("abc");
    kb_secret_free(s);
}

static void test_equal(void **state) {
    (void)state;
    assert_true(kb_secret_equal("tok", 3, "tok", 3));
    assert_true(kb_secret_equal("", 0, "", 0));
    assert_false(kb_secret_equal("tok", 3, "tok2", 4));
    assert_false(kb_secret_equal("tok2", 4, "tok", 3));
    assert_false(kb_secret_equal("tok", 3, "toK", 3));
    assert_false(kb_secret_equal("", 0, "x", 1));
    assert_false(kb_secret_equal("a\0", 2, "a", 1)); /* a NUL is a byte like another */
}

static void test_key_like_and_loopback(void **state) {
    (void)state;
    const char *secret[] = {"sasl.password", "ssl.key.password", "ssl.key.pem", "SASL.JAAS.CONFIG",
                            "ssl.keystore.password", "sasl.oauthbearer.client.secret", "token"};
    const char *plain[] = {"sasl.username", "ssl.key.location", "sasl.password_file", "compression.type",
                           "bootstrap.servers"};
    for (size_t i = 0; i < sizeof(secret) / sizeof(secret[0]); i++)
        assert_true(kb_secret_key_like(secret[i]));
    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
        assert_false(kb_secret_key_like(plain[i]));
    assert_true(kb_host_is_loopback("127.0.0.1", 9));
    assert_true(kb_host_is_loopback("127.9.9.9", 9));
    assert_true(kb_host_is_loopback("[::1]", 5));
    assert_true(kb_host_is_loopback("LocalHost", 9));
    assert_false(kb_host_is_loopback("0.0.0.0", 7));
    assert_false(kb_host_is_loopback("128.0.0.1", 9));
    assert_false(kb_host_is_loopback("localhost.example", 17));
    assert_false(kb_url_plain_beyond_loopback("https://10.0.0.1:6443"));
    assert_false(kb_url_plain_beyond_loopback("http://127.0.0.1:8080/x"));
    assert_false(kb_url_plain_beyond_loopback("http://[::1]:8080"));
    assert_false(kb_url_plain_beyond_loopback("http://user:pw@localhost:1"));
    assert_true(kb_url_plain_beyond_loopback("http://10.0.0.1:6443"));
    assert_true(kb_url_plain_beyond_loopback("HTTP://kube.example/"));
    assert_true(kb_url_plain_beyond_loopback("http://localhost@evil.example:80"));
    assert_true(kb_url_plain_beyond_loopback("http://[fd00::1]:6443"));
    assert_true(kb_url_has_userinfo("http://u:pw@127.0.0.1:1"));
    assert_true(kb_url_has_userinfo("tcp://pw@broker:1883"));
    assert_false(kb_url_has_userinfo("https://10.0.0.1:6443/p@th?x=@"));
    assert_false(kb_url_has_userinfo("ssl://broker:8883"));
    assert_false(kb_url_has_userinfo("not a url"));
}

static void test_no_core_dumps(void **state) {
    (void)state;
    kb_secret_no_core_dumps();
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_CORE, &rl), 0);
    assert_int_equal(rl.rlim_cur, 0);
    assert_int_equal(prctl(PR_GET_DUMPABLE, 0, 0, 0, 0), 0);
}

int main(void) {
    if (!mkdtemp(dir))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reads_and_trims),
        cmocka_unit_test(test_over_long_is_refused_inside_its_buffer),
        cmocka_unit_test(test_missing_file_names_path),
        cmocka_unit_test(test_free_wipes_and_null),
        cmocka_unit_test(test_equal),
        cmocka_unit_test(test_key_like_and_loopback),
        cmocka_unit_test(test_no_core_dumps),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        rc = 1;
    return rc;
}
