/* cf_test.h - what every cmocka test of collfuse shares: the includes cmocka
 * needs, one context per test executable, and an assertion on a status plus
 * a substring of the context's message (tests check both, never just one). */
#ifndef COLLFUSE_CF_TEST_H
#define COLLFUSE_CF_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collfuse/collfuse.h"

static cf_context *ctx;

static int setup(void **state) {
  (void)state;
  return cf_context_create(&ctx) == CF_OK ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  cf_context_destroy(ctx);
  return 0;
}

/* expr must return st and leave substr in the context's message */
#define ASSERT_ERR(expr, st, substr)                                                   \
  do {                                                                                 \
    assert_int_equal((expr), (st));                                                    \
    if (!strstr(cf_context_errmsg(ctx), (substr)))                                     \
      fail_msg("message '%s' lacks '%s'", cf_context_errmsg(ctx), (substr));            \
  } while (0)

/* A log sink that appends each message, one a line, to a cf_logbuf
 * (cf_context_set_log(c, cf_logbuf_sink, &buf)); what does not fit is cut. */
typedef struct cf_logbuf {
  char text[8192];
} cf_logbuf;
static inline void cf_logbuf_sink(void *user, cf_log_level lvl, const char *msg) {
  (void)lvl;
  cf_logbuf *lb = user;
  size_t n = strlen(lb->text);
  snprintf(lb->text + n, sizeof lb->text - n, "%s\n", msg);
}

#endif
