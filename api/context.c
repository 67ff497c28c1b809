/* context.c - the public header's version and context calls, over ir/'s
 * context (ir/context.c). */
#include "api.h"

const char *cf_version(void) { return CF_VERSION_STRING; }
int cf_version_number(void) { return CF_VERSION_NUMBER; }

cf_status cf_context_create(cf_context **out) { return cf_ctx_create(out); }
void cf_context_destroy(cf_context *ctx) { cf_ctx_destroy(ctx); }
const char *cf_context_errmsg(const cf_context *ctx) { return cf_errmsg(ctx); }

void cf_context_set_log(cf_context *ctx, cf_log_fn fn, void *user) {
  if (!ctx) return;
  ctx->log_fn = fn;
  ctx->log_user = user;
}
