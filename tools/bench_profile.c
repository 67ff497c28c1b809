/* bench_profile.c - `bench allreduce --save-profile`: what one run of the
 * benchmark measured, turned into a profile (api/profile.c) for its
 * transport and rank count and merged into the file the run reads.
 *
 * Per size the fastest forced algorithm wins; alpha is the fastest time at
 * the smallest size (a call that moves almost nothing), beta the bytes of
 * the largest size over the fastest time there less alpha: the alpha + b/beta
 * line through the two ends of the table, which is what --split auto's
 * model asks of one collective.
 */
#include "tools.h"

#include <stdio.h>
#include <string.h>

cf_status cf_bench_ar_save_profile(cf_context *ctx, const char *given, const char *transport,
                                   int ranks, const cf_bench_ar_cell *cells, int n_sizes,
                                   int n_cols, char *path, size_t len) {
  int64_t bytes[64];
  int best[64], n = 0;
  double best_us[64];
  for (int s = 0; s < n_sizes && n < 64; s++) {
    int win = -1;
    for (int k = 1; k < n_cols; k++) /* column 0 is auto */
      if (cells[s].us[k] > 0 && (win < 0 || cells[s].us[k] < cells[s].us[win])) win = k;
    if (win < 0) continue;
    bytes[n] = cells[s].bytes;
    best[n] = cells[s].run[win];
    best_us[n++] = cells[s].us[win];
  }
  if (n == 0)
    return cf_error(ctx, CF_ERR_USAGE, NULL, 0, "--save-profile: no size measured every algorithm");
  /* a loaded machine can time the large size no slower than the small one:
   * then the whole time of the large size is bandwidth */
  double alpha = best_us[0], span = best_us[n - 1] - alpha;
  double beta = n > 1 && span > 0 ? (double)(bytes[n - 1] - bytes[0]) / span / 1e3
                                  : (double)bytes[n - 1] / best_us[n - 1] / 1e3;
  bool explicit_path;
  char buf[4096];
  const char *at = cf_profile_path(given, buf, sizeof buf, &explicit_path);
  if (!at)
    return cf_error(
        ctx, CF_ERR_USAGE, NULL, 0,
        "--save-profile: neither XDG_CONFIG_HOME nor HOME is set (give --profile FILE)");
  snprintf(path, len, "%s", at);
  cf_profile *p = NULL;
  cf_status st = cf_profile_load(ctx, at, false, &p);
  if (!st) st = cf_profile_set(ctx, p, transport, ranks, bytes, best, n, alpha, beta);
  if (!st) st = cf_profile_save(ctx, p, at);
  cf_profile_destroy(p);
  return st;
}
