/* explain.c - the passes' `--explain` lines: one formatted line to the
 * caller's sink, nothing when no sink is set. The bottom of passes/: every
 * pass that explains calls it, and it calls nothing of theirs. */
#include "passes.h"

#include <stdarg.h>
#include <stdio.h>

void cf_pass_explain(const cf_pass_options *opt, const char *fmt, ...) {
  if (!opt || !opt->explain) return;
  char line[1536];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  opt->explain(opt->explain_user, line);
}
