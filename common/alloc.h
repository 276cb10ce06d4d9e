/* common/alloc.h — allocation that never returns NULL, and invariants.
 *
 * Out of memory aborts the process (as Redis does): a daemon that cannot
 * allocate cannot keep its promises anyway, and handling every OOM path
 * would double the error handling for no gain. Input and config errors
 * never assert; KB_ASSERT is for invariants of our own code only.
 */
#ifndef KB_COMMON_ALLOC_H
#define KB_COMMON_ALLOC_H

#include <stddef.h>

void *kb_malloc(size_t size);
void *kb_calloc(size_t nmemb, size_t size);
void *kb_realloc(void *ptr, size_t size);
char *kb_strdup(const char *s);           /* kb_strdup(NULL) == NULL */
char *kb_strndup(const char *s, size_t n); /* always NUL-terminates */
void *kb_memdup(const void *p, size_t n);

_Noreturn void kb_assert_fail(const char *expr, const char *file, int line);

#define KB_ASSERT(e) ((e) ? (void)0 : kb_assert_fail(#e, __FILE__, __LINE__))
/* An unrecoverable failure of the environment (a thread that cannot start). */
#define KB_FATAL(msg) kb_assert_fail((msg), __FILE__, __LINE__)
#define KB_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define KB_UNUSED(x) ((void)(x))

#endif
