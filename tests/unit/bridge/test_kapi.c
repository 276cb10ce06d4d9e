/* Unit tests for bridge/kapi: a watch without timeoutSeconds lasts 30 to 60
 * minutes, as on the API server, for every resource and start time (a
 * resource whose name hashed to a negative number made it 1 s to 30 min:
 * node agents' pod watches ended within seconds, cleanly, that the API server
 * kept). */
#include "bridge/kapi.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

static void test_default_timeout(void **state) {
    (void)state;
    const char *const resources[] = {"pods", "nodes", "events", "secrets", "configmaps", "widgets", "leases"};
    for (size_t r = 0; r < sizeof(resources) / sizeof(resources[0]); r++) {
        for (int64_t now = 0; now < 5000000; now += 997) {
            long t = kb_kapi_default_timeout_s(resources[r], now);
            if (t < 1800 || t >= 3600)
                fail_msg("resource %s at %lld ms: timeout %ld s, not in [1800, 3600)", resources[r], (long long)now,
                         t);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_default_timeout)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
