/* backends/cuda_error.c - the messages of CUDA driver results, which the
 * backend's slots (cuda.c) and its compute ops (cuda_blas.c) both give:
 * "CUDA: WHAT: CUDA_ERROR_X: text", from the driver's own names and strings
 * when it has them.
 */
#include "cuda_internal.h"

#include <stdarg.h>
#include <stdio.h>

const char *cf_cuda_text(const cu_api *a, CUresult r, char *buf, size_t len) {
  const char *name = NULL, *str = NULL;
  if (a->cuGetErrorName) a->cuGetErrorName(r, &name);
  if (a->cuGetErrorString) a->cuGetErrorString(r, &str);
  snprintf(buf, len, "%s: %s", name ? name : "CUDA error", str ? str : "unknown");
  return buf;
}

cf_status cf_cuda_fail(cf_context *ctx, const cu_api *a, CUresult r, const char *fmt, ...) {
  char what[256], err[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "CUDA: %s: %s", what,
                  cf_cuda_text(a, r, err, sizeof err));
}
