/* Minimal check helper for the CPU tests: count checks, print the first failures. */
#ifndef QF_TESTS_CHECK_H
#define QF_TESTS_CHECK_H

#include <stdarg.h>
#include <stdio.h>

#define CHECK_MAX_PRINTED 20

static long check_count_;
static long check_failed_;

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static inline int check_at_(int ok, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    check_count_++;
    if (ok) return 1;
    check_failed_++;
    if (check_failed_ <= CHECK_MAX_PRINTED) {
        fprintf(stderr, "%s:%d: ", file, line);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        if (check_failed_ == CHECK_MAX_PRINTED)
            fprintf(stderr, "(further failures are counted, not printed)\n");
    }
    return 0;
}

/* CHECK(cond, fmt, ...): counts one check; on failure prints file:line and the message.
 * Evaluates to cond (0 or 1). */
#define CHECK(cond, ...) check_at_((cond) ? 1 : 0, __FILE__, __LINE__, __VA_ARGS__)

/* Prints "name: N checks, M failed"; returns the exit code for main. */
static inline int check_finish(const char *name)
{
    printf("%s: %ld checks, %ld failed\n", name, check_count_, check_failed_);
    return check_failed_ ? 1 : 0;
}

#endif /* QF_TESTS_CHECK_H */
