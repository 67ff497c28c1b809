/* algo.c - the table of collective algorithms and the measured policies
 * that choose among them (algo.h says how a row reads).
 *
 * Selection is a pure function of the call's descriptor, the group size
 * and the mode, so every rank picks the same row without a message. A
 * request resolves in two steps: a policy's rules (or the forced row)
 * name a row, then a row that may not run the call gives way to its
 * fallback: one whose reduction order is not rank order under
 * --deterministic, one whose partial sums would round an integer mean, one
 * whose supports() says no (rd on a rank count that is not a power of two,
 * every AllReduce algorithm on another kind or on one rank). The chains end
 * at direct, which runs every kind on any rank count.
 *
 * Determinism: the rank-order rows (direct, rsag, and every non-AllReduce
 * collective) pass the group's ranks in order to cf_coll_reduce, so each
 * element is reduced as ((r0 op r1) op r2) ... whatever the chunking, the
 * bucket it sits in, or the message size: fused and unfused runs are
 * bitwise equal. --deterministic therefore only has to keep the other rows
 * (ring, rd, the transport's own) out.
 */
#include "algo.h"
#include "backends/backends.h"

#include <stdio.h>
#include <string.h>

static bool pow2(int n) { return n > 0 && (n & (n - 1)) == 0; }

/* ---------------- supports ---------------- */

/* The kinds MPI's own collectives run (mpi_native.c). */
static bool native_kind(cf_op kind) {
  return kind == CF_OP_ALLREDUCE || kind == CF_OP_REDUCESCATTER || kind == CF_OP_ALLGATHER ||
         kind == CF_OP_REDUCE || kind == CF_OP_BROADCAST;
}

static bool any_kind(cf_op kind, int ranks, int64_t bytes) {
  (void)ranks, (void)bytes;
  return native_kind(kind) || kind == CF_OP_ALLTOALL || kind == CF_OP_COLLECTIVEPERMUTE;
}

static bool allreduce_pairs(cf_op kind, int ranks, int64_t bytes) {
  (void)bytes;
  return kind == CF_OP_ALLREDUCE && ranks > 1;
}

static bool allreduce_pow2(cf_op kind, int ranks, int64_t bytes) {
  return allreduce_pairs(kind, ranks, bytes) && pow2(ranks);
}

static bool native_pairs(cf_op kind, int ranks, int64_t bytes) {
  (void)bytes;
  return native_kind(kind) && ranks > 1;
}

/* ---------------- scratch ---------------- */

static size_t elem_bytes(const cf_coll_desc *d) { return (size_t)cf_dtype_size(d->dtype); }
static size_t call_bytes(const cf_coll_desc *d) { return (size_t)d->count * elem_bytes(d); }
static size_t peers(int n) { return n > 1 ? (size_t)n - 1 : 0; }
/* One rank's chunk of a chunked algorithm, with room for line alignment. */
static size_t chunk_bytes(const cf_coll_desc *d, int n) {
  return ((size_t)d->count + (size_t)n - 1) / (size_t)n * elem_bytes(d) + 128;
}

/* Staging for what peers send: one buffer for AllGather and Broadcast (one
 * peer at a time), one per peer otherwise. */
static size_t direct_scratch(const cf_coll_desc *d, int n, bool zero_copy) {
  if (d->op == CF_OP_ALLTOALL || d->op == CF_OP_COLLECTIVEPERMUTE)
    return cf_alltoall_scratch_bytes(d, n, zero_copy);
  if (zero_copy) return 0;
  if (d->op == CF_OP_ALLGATHER || d->op == CF_OP_BROADCAST) return call_bytes(d);
  return peers(n) * call_bytes(d);
}

static size_t rsag_scratch(const cf_coll_desc *d, int n, bool zero_copy) {
  return zero_copy ? 0 : peers(n) * chunk_bytes(d, n);
}

/* rsag's (where it runs rsag) and a line for the counter, aligned. */
static size_t pool_scratch(const cf_coll_desc *d, int n, bool zero_copy) {
  return rsag_scratch(d, n, zero_copy) + 128;
}

static size_t ring_scratch(const cf_coll_desc *d, int n, bool zero_copy) {
  return zero_copy ? 0 : 2 * chunk_bytes(d, n);
}

static size_t rd_scratch(const cf_coll_desc *d, int n, bool zero_copy) {
  (void)n;
  return 2 * call_bytes(d) + (zero_copy ? 0 : call_bytes(d));
}

/* What the transport's native collectives (MPI's, transports/mpi.c) may
 * use: integer mean sums in int64 (like the kernels), a fused AllGather
 * gathers whole input buckets before placing members, a fused
 * ReduceScatter packs every member's block p together. */
static size_t native_scratch(const cf_coll_desc *d, int n, bool zero_copy) {
  size_t es = elem_bytes(d), count = (size_t)(d->count > 0 ? d->count : 0);
  bool int_mean = d->red == CF_RED_MEAN && !cf_dtype_is_float(d->dtype);
  size_t ws = int_mean ? 8 : es;
  (void)zero_copy;
  switch (d->op) {
  case CF_OP_ALLREDUCE:
  case CF_OP_REDUCE: return int_mean ? 8 * count : 0;
  case CF_OP_ALLGATHER: return (size_t)n * count * es;
  case CF_OP_REDUCESCATTER: return ws * (count + count / (size_t)(n > 0 ? n : 1) + 1);
  default: return 0;
  }
}

/* ---------------- run ---------------- */

/* One direct exchange, in rank order, for every kind. */
static cf_status direct_run(cf_comm *c, cf_device *dev, const cf_coll_call *call) {
  switch (call->desc.op) {
  case CF_OP_ALLREDUCE: return cf_algo_direct(c, dev, call);
  case CF_OP_REDUCESCATTER: return cf_algo_reduce_scatter(c, dev, call);
  case CF_OP_ALLGATHER: return cf_algo_all_gather(c, dev, call);
  case CF_OP_REDUCE: return cf_algo_reduce(c, dev, call);
  case CF_OP_BROADCAST: return cf_algo_broadcast(c, dev, call);
  case CF_OP_ALLTOALL: return cf_algo_alltoall(c, dev, call);
  case CF_OP_COLLECTIVEPERMUTE: return cf_algo_permute(c, dev, call);
  default:
    return cf_error(c->ctx, CF_ERR_UNSUPPORTED, NULL, 0, "no algorithm for %s",
                    cf_op_table[call->desc.op].name);
  }
}

/* The transport's own collective (an optional slot: absent on threads). */
static cf_status native_run(cf_comm *c, cf_device *dev, const cf_coll_call *call) {
  if (!c->ops->native)
    return cf_error(
        c->ctx, CF_ERR_UNSUPPORTED, NULL, 0,
        "--algo mpi-native: the %s transport has no native collectives (use --backend mpi)",
        c->ops->name);
  return c->ops->native(c, dev, call);
}

/* ---------------- the table ---------------- */

const cf_algo_info cf_algo_table[] = {
    [CF_ALGO_DIRECT] = {.name = "direct",
                        .description =
                            "every rank reads every peer's whole input and reduces all of it",
                        .steps = "1 exchange",
                        .order = "rank order",
                        .rank_order = true,
                        .exact_mean = true,
                        .fallback = CF_ALGO_DIRECT,
                        .run = direct_run,
                        .scratch_bytes = direct_scratch,
                        .supports = any_kind},
    [CF_ALGO_RSAG] = {.name = "rsag",
                      .description =
                          "direct reduce-scatter (rank i reduces chunk i from all ranks), "
                          "then direct all-gather (threads: rank i writes chunk i into "
                          "every output)",
                      .steps = "2 exchanges (threads: 1)",
                      .order = "rank order",
                      .rank_order = true,
                      .exact_mean = true,
                      .segmented = true,
                      .fallback = CF_ALGO_DIRECT,
                      .run = cf_algo_rsag,
                      .scratch_bytes = rsag_scratch,
                      .supports = allreduce_pairs},
    [CF_ALGO_RING] = {.name = "ring",
                      .description = "ring reduce-scatter + ring all-gather",
                      .steps = "2(n-1) neighbour steps",
                      .order = "neighbour order",
                      .segmented = true,
                      .fallback = CF_ALGO_RSAG,
                      .run = cf_algo_ring,
                      .scratch_bytes = ring_scratch,
                      .supports = allreduce_pairs},
    [CF_ALGO_RD] = {.name = "rd",
                    .alias = "recursive-doubling",
                    .description = "recursive doubling (powers of two; otherwise `direct`)",
                    .steps = "log2 n pairwise",
                    .order = "tree order",
                    .segmented = true,
                    .fallback = CF_ALGO_DIRECT,
                    .run = cf_algo_rd,
                    .scratch_bytes = rd_scratch,
                    .supports = allreduce_pow2},
    [CF_ALGO_MPI_NATIVE] = {.name = "mpi-native",
                            .description = "the transport's own collectives (MPI's), every kind",
                            .steps = "MPI's",
                            .order = "MPI's order",
                            .exact_mean = true,
                            .native = true,
                            .fallback = -1,
                            .run = native_run,
                            .scratch_bytes = native_scratch,
                            .supports = native_pairs},
    [CF_ALGO_POOL] = {.name = "pool",
                      .description = "rsag in pieces: every rank takes the next piece from a shared "
                                     "counter and writes it into every output, so ranks that run "
                                     "do the work of ranks that wait for a CPU (single copy, host "
                                     "memory; elsewhere `rsag`); from 4 MiB on shm ranks that "
                                     "outnumber the cores, only as many ranks as cores take pieces",
                      .steps = "1 exchange",
                      .order = "rank order",
                      .rank_order = true,
                      .exact_mean = true,
                      .fallback = CF_ALGO_RSAG,
                      .run = cf_algo_pool,
                      .scratch_bytes = pool_scratch,
                      .supports = allreduce_pairs},
};

const int cf_algo_count = (int)(sizeof cf_algo_table / sizeof cf_algo_table[0]);

/* ---------------- the policies: measured thresholds ---------------- */

#define KIB(x) ((int64_t)(x) << 10)
#define MIB(x) ((int64_t)(x) << 20)

/* On a single-copy transport rsag is one exchange too (every rank writes
 * its reduced chunk into every output): on four ranks it led direct from 64
 * KiB up (level at 16-32 KiB), and the ring and recursive doubling at every
 * size from 16 MiB; on two ranks it led direct from 512 KiB to 4 MiB, and
 * direct (each rank reading both whole vectors) led from 16 MiB up and below
 * 512 KiB (bench allreduce --ranks 2|4 --no-mpi, 3 runs each, a loaded
 * 2-core machine; docs/executor.md). In place (a gradient bucket) rsag led
 * at every size from 4 KiB to 64 MiB on two and four ranks, 3-7x ahead of
 * direct on two ranks from 16 KiB (whose in-place path reduces into scratch
 * and copies back) and 1.3-5x ahead of the ring (run of one in-place
 * AllReduce, --algo each, medians of 3 runs, a quiet 2-core machine).
 * Since rsag writes its outputs with streaming stores where they do not
 * stay in cache, and with huge pages, it leads out of place at every size
 * from 32 KiB on two ranks (direct 1.04-1.15x its time at 32-256 KiB) and
 * from 16 KiB on four (direct 1.09x at 16 KiB, 1.16x at 32 KiB), up to 256
 * MiB; below, on two ranks, rd (one pairwise exchange) took 0.5-0.8 us
 * from 512 B to 16 KiB where direct took 0.6-0.9, and direct led under 512
 * B (bench allreduce --no-mpi --profile none, 6 runs, quiet machine).
 * Out of place pool (rsag in pieces that whichever rank runs takes, one
 * exchange per call) took 0.55-0.74x rsag's time at 64-256 MiB on 2 and 4
 * ranks of both worlds, 4 ranks sharing 2 cores and the cores running other
 * work; at 16 MiB 0.78-0.97x on 4 ranks, and on 2 ranks 0.75-1.10x from
 * run to run (level: rsag stays); at 8 MiB 1.1-1.2x (bench allreduce
 * --algo pool|rsag, pool and rsag loop by loop in one run, medians of 4-10
 * runs at load 5-9; docs/executor.md, "pool"). Where the ranks outnumber
 * the cores (4 processes of the shm world on 2 cores) pool leaves the
 * ranks beyond the cores idle from 4 MiB, and took 0.45-0.62x rsag's time
 * at 4-8 MiB (load 11-16, bench/results/shm.md, "Idle ranks"); in place
 * 0.56x at 8 MiB, 0.33x at 16 MiB and 0.60x at 64 MiB (medians of 4 pairs,
 * load 13), level or behind at 6 MiB. */
static const cf_algo_rule auto_threads[] = {
    {.min_ranks = 3, .min_bytes = MIB(8), .in_place = 1, .oversubscribed = true, .algo = CF_ALGO_POOL},
    {.in_place = 1, .algo = CF_ALGO_RSAG},
    {.min_ranks = 3, .min_bytes = MIB(4), .oversubscribed = true, .algo = CF_ALGO_POOL},
    {.min_ranks = 3, .min_bytes = MIB(16), .algo = CF_ALGO_POOL},
    {.min_bytes = MIB(64), .algo = CF_ALGO_POOL},
    {.min_ranks = 2, .max_ranks = 2, .min_bytes = KIB(32), .algo = CF_ALGO_RSAG},
    {.min_ranks = 2, .max_ranks = 2, .min_bytes = 512, .algo = CF_ALGO_RD},
    {.min_ranks = 2, .max_ranks = 2, .algo = CF_ALGO_DIRECT},
    {.max_bytes = KIB(8), .algo = CF_ALGO_DIRECT},
};

/* Over shared memory direct (one exchange of whole vectors) led rsag up to
 * 4 MiB on two ranks and up to 128 KiB on four (at 256 KiB, medians of
 * five runs: rsag 0.96, direct 0.92 of MPI's speed). */
static const cf_algo_rule auto_mpi_shm[] = {
    {.min_ranks = 2, .max_ranks = 2, .max_bytes = MIB(4), .algo = CF_ALGO_DIRECT},
    {.min_ranks = 3, .max_bytes = KIB(128), .algo = CF_ALGO_DIRECT},
};

/* Over a network (TCP) two ranks' direct led up to 256 KiB and rsag above;
 * on four ranks collfuse's direct led below 64 KiB, MPI's own AllReduce
 * was level with collfuse's best (rsag, rd or ring by size) from 64 KiB to
 * 4 MiB per rank, and behind above. Two ranks keep collfuse's algorithms:
 * there they were level with MPI or ahead, and only collfuse's messages
 * carry descriptors (a count that differs between ranks is named instead
 * of truncating inside MPI). */
static const cf_algo_rule auto_mpi_net[] = {
    {.min_ranks = 3, .min_bytes = KIB(64), .max_bytes = MIB(4), .algo = CF_ALGO_MPI_NATIVE},
    {.min_ranks = 2, .max_ranks = 2, .max_bytes = KIB(256), .algo = CF_ALGO_DIRECT},
    {.min_ranks = 3, .max_bytes = KIB(64), .algo = CF_ALGO_DIRECT},
};

#define RULES(r) .rules = r, .n_rules = (int)(sizeof r / sizeof r[0])

const cf_algo_policy_info cf_algo_policies[CF_POLICY_FORCED] = {
    [CF_POLICY_AUTO] = {.name = "auto",
                        .measured = "collfuse bench allreduce (docs/executor.md)",
                        RULES(auto_threads),
                        .otherwise = CF_ALGO_RSAG},
    [CF_POLICY_AUTO_MPI_SHM] = {.name = "auto",
                                .measured = "collfuse bench allreduce --backend mpi "
                                            "(docs/executor.md, bench/results/mpi.md)",
                                RULES(auto_mpi_shm),
                                .otherwise = CF_ALGO_RSAG},
    [CF_POLICY_AUTO_MPI_NET] = {.name = "auto",
                                .measured = "collfuse bench allreduce --backend mpi "
                                            "(docs/executor.md, bench/results/mpi.md)",
                                RULES(auto_mpi_net),
                                .otherwise = CF_ALGO_RSAG},
};

/* ---------------- names ---------------- */

const char *cf_algo_name(int a) {
  return a >= 0 && a < cf_algo_count ? cf_algo_table[a].name : "?";
}

const char *cf_algo_req_name(cf_algo_req r) {
  return r.policy == CF_POLICY_FORCED ? cf_algo_name(r.algo) : cf_algo_policies[r.policy].name;
}

bool cf_algo_parse(const char *s, bool with_native, cf_algo_req *out) {
  if (!s) return false;
  if (strcmp(s, cf_algo_policies[CF_POLICY_AUTO].name) == 0) {
    *out = (cf_algo_req){.policy = CF_POLICY_AUTO};
    return true;
  }
  for (int a = 0; a < cf_algo_count; a++) {
    const cf_algo_info *r = &cf_algo_table[a];
    if ((with_native || !r->native) &&
        (strcmp(s, r->name) == 0 || (r->alias && strcmp(s, r->alias) == 0))) {
      *out = cf_algo_forced(a);
      return true;
    }
  }
  return false;
}

/* The next row to list after name prev (NULL: the first): the
 * alphabetically next among collfuse's rows or the transport's. */
static int next_name(bool native, const char *prev) {
  int best = -1;
  for (int a = 0; a < cf_algo_count; a++) {
    const char *n = cf_algo_table[a].name;
    if (cf_algo_table[a].native != native || (prev && strcmp(n, prev) <= 0)) continue;
    if (best < 0 || strcmp(n, cf_algo_table[best].name) < 0) best = a;
  }
  return best;
}

const char *cf_algo_choices(bool with_native, const char *sep, const char *last_sep, char *buf,
                            size_t len) {
  const char *words[64];
  int n = 0;
  words[n++] = cf_algo_policies[CF_POLICY_AUTO].name;
  for (int pass = 0; pass < (with_native ? 2 : 1); pass++)
    for (int a = next_name(pass, NULL); a >= 0 && n < 64;
         a = next_name(pass, cf_algo_table[a].name))
      words[n++] = cf_algo_table[a].name;
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%s",
                             i == 0       ? ""
                             : i == n - 1 ? last_sep
                                          : sep,
                             words[i]);
  return buf;
}

/* ---------------- selection ---------------- */

/* Whether row a may run the call. */
static bool usable(int a, const cf_coll_desc *d, int n, bool deterministic) {
  const cf_algo_info *r = &cf_algo_table[a];
  bool int_mean = d->red == CF_RED_MEAN && !cf_dtype_is_float(d->dtype);
  if (deterministic && !r->rank_order) return false;
  if (int_mean && !r->exact_mean) return false;
  return r->supports(d->op, n, d->count * cf_dtype_size(d->dtype));
}

static bool in(int64_t v, int64_t lo, int64_t hi) { return v >= lo && (hi == 0 || v <= hi); }

/* The first of rules[0..n) that matches a call of bytes on n ranks and
 * whose row may run it; -1 when none. */
static int first_rule(const cf_algo_rule *rules, int n_rules, const cf_coll_desc *d, int n,
                      bool deterministic, int64_t bytes, int cores) {
  bool over = cores > 0 && cores < n;
  for (int i = 0; i < n_rules; i++) {
    const cf_algo_rule *r = &rules[i];
    if (in(n, r->min_ranks, r->max_ranks) && in(bytes, r->min_bytes, r->max_bytes) &&
        (!r->oversubscribed || over) &&
        (r->in_place == 0 || (r->in_place > 0) == d->in_place) && r->algo >= 0 && r->algo < cf_algo_count && usable(r->algo, d, n, deterministic))
      return r->algo;
  }
  return -1;
}

static int by_policy(const cf_coll_desc *d, int n, bool deterministic, cf_algo_req req) {
  if (d->op != CF_OP_ALLREDUCE || n <= 1) {
    for (int a = 0; a < cf_algo_count; a++)
      if (!cf_algo_table[a].native && usable(a, d, n, deterministic)) return a;
    return CF_ALGO_DIRECT;
  }
  const cf_algo_policy_info *pol = &cf_algo_policies[req.policy];
  int64_t bytes = d->count * cf_dtype_size(d->dtype);
  int a = first_rule(req.measured, req.n_measured, d, n, deterministic, bytes, req.cores);
  if (a < 0) a = first_rule(pol->rules, pol->n_rules, d, n, deterministic, bytes, req.cores);
  if (a >= 0) return a;
  /* fewer elements than ranks: the chunked algorithms would leave ranks idle */
  return d->count < n ? CF_ALGO_DIRECT : pol->otherwise;
}

int cf_coll_select(const cf_coll_desc *d, int n, bool deterministic, cf_algo_req req) {
  int a = req.policy == CF_POLICY_FORCED ? req.algo : by_policy(d, n, deterministic, req);
  for (int hops = 0; hops < cf_algo_count && !usable(a, d, n, deterministic); hops++) {
    int f = cf_algo_table[a].fallback;
    a = f >= 0 ? f : by_policy(d, n, deterministic, (cf_algo_req){.policy = CF_POLICY_AUTO, .cores = req.cores});
  }
  return a;
}

size_t cf_coll_scratch_bytes(const cf_coll_desc *d, int n, int a, bool zero_copy) {
  return cf_algo_table[a].scratch_bytes(d, n, zero_copy) + cf_allreduce_in_place_scratch(d, n, a) +
         cf_rsag_in_place_scratch(d, n, a);
}
