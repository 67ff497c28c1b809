/* text_util.c - what the text readers (hlo*.c, prototext.c, pbtxt.c) share:
 * spans of the input and how they are quoted in messages, and the readers'
 * error call. Below every reader, as xml_util.c is below the XML ones.
 */
#include "frontend.h"

#include <string.h>

bool cf_span_is(cf_span s, const char *lit) {
  size_t n = strlen(lit);
  return s.n == n && memcmp(s.p, lit, n) == 0;
}

const char *cf_span_quote(char *buf, cf_span s) {
  size_t n = 0;
  while (n < s.n && s.p[n] != '\n' && s.p[n] != '\r')
    n++;
  return cf_excerpt(buf, CF_EXCERPT_BUF, s.p, n);
}

cf_status cf_reader_verror(cf_context *ctx, bool oom, const char *file, int line, const char *fmt,
                           va_list ap) {
  if (oom) return cf_error(ctx, CF_ERR_NO_MEMORY, file, line, "out of memory");
  return cf_verror(ctx, CF_ERR_INVALID, file, line, fmt, ap);
}
