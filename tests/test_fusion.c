/* test_fusion.c - unit tests of the collective fusion passes (fuse-allreduce,
 * fuse-allgather, fuse-reducescatter: passes/combine.c) and of the split
 * strategies and cost model (passes/split.c).
 *
 *  - split.c directly: every --split form and its error messages, HCCL's
 *    size and index segment semantics, --cost, the auto cost model.
 *  - exact tests: fusion=0/1/2, fusion_id, key mismatches (group, dtype,
 *    reduction, layout) with their --explain lines, bytes/first/count
 *    buckets, size and index buckets, auto against bytes:25M, global
 *    dependency-safe grouping of chains, fusion_id groups split by a real
 *    dependency, the Fused* nodes' attributes (members, reason, offsets),
 *    and the fingerprint of a compiled graph (round trip, tampering).
 *  - property tests over 300 random DAGs (fixed-seed xorshift) and several
 *    split specs: the fused graph is acyclic, every operand of every node is
 *    the original operand (so every dependency is kept) and reachability is
 *    preserved, each collective sits in exactly one place, bucket members
 *    share the key and fusion mode, fusion=0 is never fused, bytes caps and
 *    counts hold, size/index segments hold, and the sealed graph round-trips
 *    through the XML writer and reader.
 */
#include "cf_attr_test.h"
#include "cf_pass_test.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================= helpers ================= */

/* a growing text buffer */
typedef struct sb {
  char *s;
  size_t n, cap;
} sb;

static void sb_add(sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(sb *b, const char *fmt, ...) {
  for (;;) {
    size_t room = b->cap - b->n;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? room : 0, fmt, ap);
    va_end(ap);
    if (k < 0) fail_msg("vsnprintf failed");
    if (b->s && (size_t)k < room) {
      b->n += (size_t)k;
      return;
    }
    b->cap = (b->cap + (size_t)k + 1) * 2;
    b->s = realloc(b->s, b->cap);
    if (!b->s) fail_msg("out of memory");
  }
}

static void sb_free(sb *b) {
  free(b->s);
  *b = (sb){0};
}

/* "AllReduce 'name' ...": the explain line of collective name */
static bool explains(const char *line, const char *name) {
  const char *sp = strchr(line, ' ');
  size_t k = strlen(name);
  return sp && sp[1] == '\'' && strncmp(sp + 2, name, k) == 0 && sp[2 + k] == '\'' &&
         sp[3 + k] == ' ';
}

/* the explain line of collective name (exactly one) holds want */
static void expect_explain(const lines *l, const char *name, const char *want) {
  expect_one_line(l, explains, name, want);
}

static cf_status fuse(cf_graph *g, const char *passes, const char *split, lines *ex) {
  return run_passes(g, passes ? passes : cf_pipeline_default, split, NULL, ex);
}

static void fuse_ok(cf_graph *g, const char *passes, const char *split, lines *ex) {
  if (fuse(g, passes, split, ex) != CF_OK) fail_msg("passes: %s", cf_context_errmsg(ctx));
}

static bool is_fused(cf_op op) {
  return op == CF_OP_FUSEDALLREDUCE || op == CF_OP_FUSEDALLGATHER ||
         op == CF_OP_FUSEDREDUCESCATTER || op == CF_OP_FUSEDALLTOALL;
}

static cf_op base_of(cf_op fused) { return cf_op_unfused(fused); }

/* name is one of the comma-separated names of csv */
static int list_index(const char *csv, const char *name) {
  size_t k = strlen(name);
  int i = 0;
  for (const char *p = csv; *p; i++) {
    size_t len = strcspn(p, ",");
    if (len == k && strncmp(p, name, k) == 0) return i;
    p += len + (p[len] == ',');
  }
  return -1;
}

static int list_count(const char *csv) {
  int n = 0;
  for (const char *p = csv; *p; n++) {
    size_t len = strcspn(p, ",");
    p += len + (p[len] == ',');
  }
  return n;
}

/* the fused node whose members are exactly csv (in this order) */
static const cf_node *bucket_with(const cf_graph *g, const char *csv) {
  for (int i = 0; i < g->n_nodes; i++) {
    const char *m = attr_text(&g->nodes[i], CF_A_MEMBERS, NULL);
    if (is_fused(g->nodes[i].op) && m && strcmp(m, csv) == 0) return &g->nodes[i];
  }
  return NULL;
}

/* the fused nodes of op are exactly the lists given (in any order) */
static void expect_buckets(const cf_graph *g, cf_op op, const char *const *want, int n) {
  int have = 0;
  for (int i = 0; i < g->n_nodes; i++)
    have += g->nodes[i].op == op;
  for (int k = 0; k < n; k++) {
    const cf_node *b = bucket_with(g, want[k]);
    if (!b || b->op != op) {
      for (int i = 0; i < g->n_nodes; i++)
        if (is_fused(g->nodes[i].op))
          print_message("  %s: %s\n", g->nodes[i].name, attr_text(&g->nodes[i], CF_A_MEMBERS, ""));
      fail_msg("no %s with members '%s'", cf_op_table[op].name, want[k]);
    }
  }
  if (have != n) fail_msg("%d %s nodes, want %d", have, cf_op_table[op].name, n);
}

#define BUCKETS(g, op, ...)                                                                        \
  do {                                                                                             \
    const char *const want_[] = {__VA_ARGS__};                                                     \
    expect_buckets((g), (op), want_, (int)(sizeof want_ / sizeof want_[0]));                       \
  } while (0)

/* collective name is still there, unfused */
static void expect_alone(const cf_graph *g, const char *name, cf_op op) {
  const cf_node *n = node(g, name);
  assert_int_equal(n->op, op);
  for (int i = 0; i < g->n_nodes; i++)
    if (is_fused(g->nodes[i].op) &&
        list_index(attr_text(&g->nodes[i], CF_A_MEMBERS, ""), name) >= 0)
      fail_msg("'%s' is both alone and in '%s'", name, g->nodes[i].name);
}

static int64_t operand_bytes(const cf_graph *g, const cf_node *n, int j) {
  int64_t b = 0;
  assert_true(cf_value_bytes(&g->nodes[n->in[j].node].out[n->in[j].port], &b));
  return b;
}

/* ================= split.c ================= */

static void expect_split_error(const char *spec, const char *want) {
  cf_split s;
  char why[256] = "";
  if (cf_split_parse(spec, &s, why, sizeof why)) fail_msg("'%s' parsed", spec);
  if (!strstr(why, want)) fail_msg("'%s': message '%s' lacks '%s'", spec, why, want);
}

static void test_split_parse(void **state) {
  (void)state;
  cf_split s;
  char why[256];
  assert_true(cf_split_parse(NULL, &s, why, sizeof why));
  assert_int_equal(s.kind, CF_SPLIT_AUTO);
  assert_true(cf_split_parse("auto", &s, why, sizeof why));
  assert_int_equal(s.kind, CF_SPLIT_AUTO);

  assert_true(cf_split_parse("bytes:25M", &s, why, sizeof why));
  assert_int_equal(s.kind, CF_SPLIT_BYTES);
  assert_int_equal(s.cap, 25 << 20);
  assert_int_equal(s.first, 0);
  assert_int_equal(s.count, 0);
  assert_true(cf_split_parse("bytes:1.5M,first=1M,count=256", &s, why, sizeof why));
  assert_int_equal(s.cap, 3 << 19);
  assert_int_equal(s.first, 1 << 20);
  assert_int_equal(s.count, 256);
  assert_true(cf_split_parse("bytes:64KiB,count=3", &s, why, sizeof why));
  assert_int_equal(s.cap, 64 << 10);
  assert_int_equal(s.count, 3);
  assert_true(cf_split_parse("bytes:4096", &s, why, sizeof why));
  assert_int_equal(s.cap, 4096);
  assert_true(cf_split_parse("bytes:1G", &s, why, sizeof why));
  assert_int_equal(s.cap, (int64_t)1 << 30);
  assert_true(cf_split_parse("bytes:2k,first=512B", &s, why, sizeof why));
  assert_int_equal(s.cap, 2048);
  assert_int_equal(s.first, 512);

  /* ddp: DDP's limit list, first= in front, the initial assignment */
  assert_true(cf_split_parse("ddp:25M,first=1M", &s, why, sizeof why));
  assert_int_equal(s.kind, CF_SPLIT_DDP);
  assert_int_equal(s.n, 2);
  assert_int_equal(s.limit[0], 1 << 20);
  assert_int_equal(s.limit[1], 25 << 20);
  assert_false(s.initial);
  assert_true(cf_split_parse("ddp:40,80,initial", &s, why, sizeof why));
  assert_int_equal(s.n, 2);
  assert_int_equal(s.limit[1], 80);
  assert_true(s.initial);
  assert_false(cf_split_parse("ddp:first=1M", &s, why, sizeof why));
  assert_non_null(strstr(why, "missing the bucket limit"));
  assert_false(cf_split_parse("ddp:25M,fast", &s, why, sizeof why));
  assert_non_null(strstr(why, "bad limit 'fast'"));
  assert_false(cf_split_parse("ddp:0", &s, why, sizeof why));
  {
    /* torch's test_multi_limit_single_dtype: [10]*4 float32, limits
     * [40, 80] -> [[0], [1, 2], [3]]; initial: the reverse */
    int64_t b[4] = {40, 40, 40, 40};
    int part[4];
    assert_true(cf_split_parse("ddp:80,first=40", &s, why, sizeof why));
    assert_int_equal(cf_split_ddp_partition(&s, b, 4, part), 3);
    assert_int_equal(part[0], 0), assert_int_equal(part[1], 1);
    assert_int_equal(part[2], 1), assert_int_equal(part[3], 2);
    s.initial = true;
    assert_int_equal(cf_split_ddp_partition(&s, b, 4, part), 3);
    assert_int_equal(part[0], 0), assert_int_equal(part[1], 1);
    assert_int_equal(part[2], 1), assert_int_equal(part[3], 2);
    int64_t c[3] = {8, 100, 8}; /* 8 < 40; 108 >= 40 closes; 8 alone */
    s.initial = false;
    assert_int_equal(cf_split_ddp_partition(&s, c, 3, part), 2);
    assert_int_equal(part[1], 0), assert_int_equal(part[2], 1);
    s.initial = true; /* from the end: 8, 108 closes at 40 -> {1,2}, {0} */
    assert_int_equal(cf_split_ddp_partition(&s, c, 3, part), 2);
    assert_int_equal(part[0], 0), assert_int_equal(part[1], 1);
    assert_int_equal(part[2], 1);
  }

  assert_true(cf_split_parse("size:96.54,3.46", &s, why, sizeof why));
  assert_int_equal(s.kind, CF_SPLIT_SIZE);
  assert_int_equal(s.n, 2);
  assert_true(fabs(s.pct[0] - 96.54) < 1e-9 && fabs(s.pct[1] - 3.46) < 1e-9);
  assert_true(cf_split_parse("size:100", &s, why, sizeof why));
  assert_int_equal(s.n, 1);
  assert_true(cf_split_parse("size:12.5,12.5,12.5,12.5,12.5,12.5,12.5,12.5", &s, why, sizeof why));
  assert_int_equal(s.n, 8);

  assert_true(cf_split_parse("index:20,100,159", &s, why, sizeof why));
  assert_int_equal(s.kind, CF_SPLIT_INDEX);
  assert_int_equal(s.n, 3);
  assert_int_equal(s.idx[0], 20);
  assert_int_equal(s.idx[1], 100);
  assert_int_equal(s.idx[2], 159);
  assert_true(cf_split_parse("index:0,1,2,3,4,5,6,7", &s, why, sizeof why));
  assert_int_equal(s.n, 8);

  /* bytes errors */
  expect_split_error("bytes:", "bytes:: missing the byte cap");
  expect_split_error("bytes:25M,", "bytes:25M,: an empty item (separate items with one comma)");
  expect_split_error("size:50,,50", "size:50,,50: an empty item");
  expect_split_error("index:,20", "index:,20: an empty item");
  expect_split_error("bytes:0", "bad cap '0' (e.g. 25M, 64K, 1G)");
  expect_split_error("bytes:-4K", "bad cap '-4K'");
  expect_split_error("bytes:25X", "bad cap '25X'");
  expect_split_error("bytes:25M,first=", "bad first bucket size 'first='");
  expect_split_error("bytes:25M,first=1Q", "bad first bucket size 'first=1Q'");
  expect_split_error("bytes:25M,count=0", "count must be in 1..65536");
  expect_split_error("bytes:25M,count=3x", "count must be in 1..65536");
  expect_split_error("bytes:25M,count=100000", "count must be in 1..65536");
  expect_split_error("bytes:25M,last=1M", "unknown option 'last=1M' (first=, count=)");
  expect_split_error("bytes:1T", "bad cap '1T'");
  /* size errors: not summing to 100, more than 8 segments, bad numbers */
  expect_split_error("size:50,40", "size:50,40: percentages sum to 90, not 100");
  expect_split_error("size:60,60", "percentages sum to 120, not 100");
  expect_split_error("size:10,10,10,10,10,10,10,10,20", "more than 8 segments");
  expect_split_error("size:0,100", "percentages must be positive");
  expect_split_error("size:-10,110", "percentages must be positive");
  expect_split_error("size:", "empty list");
  expect_split_error("size:abc", "bad number at 'abc'");
  expect_split_error("size:nan,100", "bad number");
  /* index errors: unsorted, more than 8, not integers */
  expect_split_error("index:100,20,159", "indices must be strictly ascending (20 after 100)");
  expect_split_error("index:3,3", "strictly ascending (3 after 3)");
  expect_split_error("index:0,1,2,3,4,5,6,7,8", "more than 8 segments");
  expect_split_error("index:-1,5", "indices must be non-negative integers");
  expect_split_error("index:1.5,3", "indices must be non-negative integers");
  expect_split_error("index:", "empty list");
  /* unknown forms */
  expect_split_error("greedy", "greedy: expected auto, bytes:CAP[,first=F][,count=C], "
                               "ddp:CAP[,first=F][,initial], size:P1,P2,... or index:I1,I2,...");
  expect_split_error("bytes", "expected auto, bytes:CAP");
  expect_split_error("", "expected auto");
}

static void test_split_segments(void **state) {
  (void)state;
  cf_split s;
  char why[256];
  int seg[200];
  int64_t bytes[200];
  for (int i = 0; i < 200; i++)
    bytes[i] = 100;

  /* index:20,100,159 gives 0..20, 21..100, 101..159 */
  assert_true(cf_split_parse("index:20,100,159", &s, why, sizeof why));
  assert_true(cf_split_segments(&s, bytes, 160, seg, why, sizeof why));
  for (int i = 0; i < 160; i++)
    assert_int_equal(seg[i], i <= 20 ? 0 : i <= 100 ? 1 : 2);
  /* index past the end */
  assert_false(cf_split_segments(&s, bytes, 150, seg, why, sizeof why));
  assert_non_null(
      strstr(why, "index 159 is past the last gradient (150 gradients, last index 149)"));
  assert_false(cf_split_segments(&s, bytes, 50, seg, why, sizeof why));
  assert_non_null(strstr(why, "index 100 is past the last gradient (50 gradients, last index 49)"));
  /* the last index must be the last gradient */
  assert_false(cf_split_segments(&s, bytes, 170, seg, why, sizeof why));
  assert_non_null(strstr(why, "the last index must be the last gradient, 169 (got 159)"));
  /* one segment of everything; no gradients at all is fine */
  assert_true(cf_split_parse("index:3", &s, why, sizeof why));
  assert_true(cf_split_segments(&s, bytes, 4, seg, why, sizeof why));
  for (int i = 0; i < 4; i++)
    assert_int_equal(seg[i], 0);
  assert_true(cf_split_segments(&s, bytes, 0, seg, why, sizeof why));
  assert_true(cf_split_parse("index:0,1,2,3", &s, why, sizeof why));
  assert_true(cf_split_segments(&s, bytes, 4, seg, why, sizeof why));
  for (int i = 0; i < 4; i++)
    assert_int_equal(seg[i], i);

  /* size: a gradient belongs to the segment where its last byte falls */
  assert_true(cf_split_parse("size:50,50", &s, why, sizeof why));
  assert_true(cf_split_segments(&s, bytes, 4, seg, why, sizeof why));
  assert_int_equal(seg[0], 0);
  assert_int_equal(seg[1], 0);
  assert_int_equal(seg[2], 1);
  assert_int_equal(seg[3], 1);
  assert_true(cf_split_parse("size:25,75", &s, why, sizeof why));
  assert_true(cf_split_segments(&s, bytes, 4, seg, why, sizeof why));
  assert_int_equal(seg[0], 0);
  for (int i = 1; i < 4; i++)
    assert_int_equal(seg[i], 1);
  /* HCCL's ResNet-50 default: 96.54% then 3.46% */
  int64_t rn[10] = {4000, 4000, 4000, 4000, 4000, 4000, 4000, 4000, 4000, 1000};
  /* ,same_dtype after any spec */
  assert_true(cf_split_parse("auto,same_dtype", &s, why, sizeof why));
  assert_true(s.kind == CF_SPLIT_AUTO && s.same_dtype);
  assert_true(cf_split_parse("ddp:25M,first=1M,same_dtype", &s, why, sizeof why));
  assert_true(s.kind == CF_SPLIT_DDP && s.same_dtype && s.n == 2);
  assert_true(cf_split_parse("bytes:4K", &s, why, sizeof why));
  assert_false(s.same_dtype);
  assert_false(s.any_dim);
  /* ,any_dim too, with same_dtype in either order, each once */
  assert_true(cf_split_parse("bytes:4K,any_dim", &s, why, sizeof why));
  assert_true(s.kind == CF_SPLIT_BYTES && s.any_dim && !s.same_dtype && s.cap == 4096);
  assert_true(cf_split_parse("auto,any_dim,same_dtype", &s, why, sizeof why));
  assert_true(s.kind == CF_SPLIT_AUTO && s.any_dim && s.same_dtype);
  assert_true(cf_split_parse("ddp:1M,same_dtype,any_dim", &s, why, sizeof why));
  assert_true(s.kind == CF_SPLIT_DDP && s.any_dim && s.same_dtype);
  assert_false(cf_split_parse("auto,any_dim,any_dim", &s, why, sizeof why));
  assert_false(cf_split_parse(",any_dim", &s, why, sizeof why));
  /* ,no_loops (XLA's combine_while_loops=false) with the others, any order, once */
  assert_true(cf_split_parse("bytes:1M,count=256,any_dim,no_loops", &s, why, sizeof why));
  assert_true(s.kind == CF_SPLIT_BYTES && s.any_dim && s.no_loops && !s.same_dtype && s.count == 256);
  assert_true(cf_split_parse("auto,no_loops,same_dtype", &s, why, sizeof why));
  assert_true(s.kind == CF_SPLIT_AUTO && s.no_loops && s.same_dtype && !s.any_dim);
  assert_false(cf_split_parse("auto", &s, why, sizeof why) && s.no_loops);
  assert_false(cf_split_parse("auto,no_loops,no_loops", &s, why, sizeof why));
  assert_true(cf_split_parse("size:96.54,3.46", &s, why, sizeof why));
  assert_true(cf_split_segments(&s, rn, 10, seg, why, sizeof why));
  for (int i = 0; i < 10; i++)
    assert_int_equal(seg[i], i < 8 ? 0 : 1);
  /* a large gradient skips a segment it overfills */
  int64_t big[3] = {100, 800, 100};
  assert_true(cf_split_parse("size:10,10,80", &s, why, sizeof why));
  assert_true(cf_split_segments(&s, big, 3, seg, why, sizeof why));
  assert_int_equal(seg[0], 0);
  assert_int_equal(seg[1], 2);
  assert_int_equal(seg[2], 2);
  /* percentages that sum to 100 only up to rounding: the last gradient
   * still lands in the last segment, never past it */
  assert_true(cf_split_parse("size:50,49.9999999", &s, why, sizeof why));
  assert_true(cf_split_segments(&s, bytes, 4, seg, why, sizeof why));
  assert_int_equal(seg[0], 0);
  assert_int_equal(seg[1], 0);
  assert_int_equal(seg[2], 1);
  assert_int_equal(seg[3], 1);
  /* the last byte decides: 33.3333% of 300 bytes ends before the 100th
   * byte, so the first gradient already falls in segment 1, the second in 2 */
  assert_true(cf_split_parse("size:33.3333,33.3333,33.3334", &s, why, sizeof why));
  assert_true(cf_split_segments(&s, bytes, 3, seg, why, sizeof why));
  assert_int_equal(seg[0], 1);
  assert_int_equal(seg[1], 2);
  assert_int_equal(seg[2], 2);
  /* bytes/auto: one segment */
  assert_true(cf_split_parse("bytes:1K", &s, why, sizeof why));
  seg[0] = seg[1] = 7;
  assert_true(cf_split_segments(&s, bytes, 2, seg, why, sizeof why));
  assert_int_equal(seg[0], 0);
  assert_int_equal(seg[1], 0);
}

static void test_split_format_and_cost(void **state) {
  (void)state;
  char b[32], why[256];
  assert_string_equal(cf_split_format_bytes(25 << 20, b, sizeof b), "25M");
  assert_string_equal(cf_split_format_bytes(1536, b, sizeof b), "1536"); /* whole units only */
  assert_string_equal(cf_split_format_bytes(4096, b, sizeof b), "4K");
  assert_string_equal(cf_split_format_bytes(1000, b, sizeof b), "1000");
  assert_string_equal(cf_split_format_bytes((int64_t)3 << 30, b, sizeof b), "3G");
  assert_string_equal(cf_split_format_bytes(3 << 19, b, sizeof b), "1536K");
  assert_string_equal(cf_split_format_bytes(256512, b, sizeof b), "256512");

  cf_cost c;
  assert_true(cf_cost_parse(NULL, &c, why, sizeof why));
  assert_true(c.alpha_us == CF_COST_DEFAULT_ALPHA_US && c.beta_gbps == CF_COST_DEFAULT_BETA_GBPS &&
              c.gamma_gbps == CF_COST_DEFAULT_BETA_GBPS / 2);
  assert_true(cf_cost_parse("100,25", &c, why, sizeof why));
  assert_true(c.alpha_us == 100 && c.beta_gbps == 25 && c.gamma_gbps == 12.5);
  assert_true(cf_cost_parse("0,1.5,3", &c, why, sizeof why));
  assert_true(c.alpha_us == 0 && c.beta_gbps == 1.5 && c.gamma_gbps == 3);
  static const char *const bad[] = {"",     "100",   "100,",  ",8",      "100,0",
                                    "-1,8", "1,8,0", "x,8",   "1,inf",   "1,8,3,4"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    why[0] = 0;
    if (cf_cost_parse(bad[i], &c, why, sizeof why)) fail_msg("--cost '%s' parsed", bad[i]);
    char want[112];
    snprintf(want, sizeof want, "%s: expected alpha_us,beta_GBps[,gamma_GBps] (e.g. 250,8)",
             bad[i]);
    assert_string_equal(why, want);
  }

  /* the model, by hand: alpha 10 us, beta 1 GB/s, gradients ready at 0.5 GB/s */
  cf_cost u = {.alpha_us = 10, .beta_gbps = 1, .gamma_gbps = 0.5};
  int64_t three[3] = {100, 100, 100};
  int one[3] = {0, 0, 0}, two[3] = {0, 0, 1};
  /* one bucket: ready at 600 ns, ends 10 us + 300 ns later */
  assert_true(fabs(cf_split_exposed(&u, three, 3, one) - 10.3) < 1e-9);
  /* two: the first ends at 400 ns + 10.2 us; the second queues behind it
   * and ends 10.1 us later, 20.1 us after the last gradient is ready */
  assert_true(fabs(cf_split_exposed(&u, three, 3, two) - 20.1) < 1e-9);

  /* auto never does worse than one bucket or any greedy cap */
  enum { NG = 95 };
  int64_t g[NG];
  int part[NG], tmp[NG];
  for (int i = 0; i < NG; i++) g[i] = (int64_t)(1 + i % 7) << 18;
  cf_cost d;
  assert_true(cf_cost_parse(NULL, &d, why, sizeof why));
  double best;
  int nb = cf_split_auto_partition(&d, g, NG, part, &best);
  assert_true(nb >= 1 && nb <= NG);
  assert_true(fabs(best - cf_split_exposed(&d, g, NG, part)) < 1e-9);
  assert_int_equal(part[0], 0);
  for (int i = 1; i < NG; i++) assert_true(part[i] == part[i - 1] || part[i] == part[i - 1] + 1);
  assert_int_equal(part[NG - 1], nb - 1);
  assert_true(best <= cf_split_exposed(&d, g, NG, (int[NG]){0}) * 1.001);
  for (int64_t cap = 64 << 10; cap < (int64_t)200 << 20; cap *= 2) {
    int64_t cur = 0;
    int nbk = 0;
    for (int i = 0; i < NG; i++) {
      if (cur && cur + g[i] > cap) nbk++, cur = 0;
      tmp[i] = nbk;
      cur += g[i];
    }
    assert_true(best <= cf_split_exposed(&d, g, NG, tmp) * 1.001);
  }
  /* a huge alpha makes one bucket; with alpha 0 the last gradient goes alone */
  cf_cost slow = {.alpha_us = 1e9, .beta_gbps = 8, .gamma_gbps = 4};
  assert_int_equal(cf_split_auto_partition(&slow, g, NG, part, NULL), 1);
  cf_cost free_alpha = {.alpha_us = 0, .beta_gbps = 8, .gamma_gbps = 4};
  cf_split_auto_partition(&free_alpha, g, NG, part, &best);
  assert_true(part[NG - 2] != part[NG - 1]);
  assert_true(fabs(best - (double)g[NG - 1] / 8e9 * 1e6) < 1e-6);

  /* many small tensors: 100k gradients of 4 KiB need fewer collectives than
   * bytes:25M (16), and expose far less */
  enum { NS = 100000 };
  int64_t *small = malloc(NS * sizeof(int64_t));
  int *sp = malloc(NS * sizeof(int)), *sg = malloc(NS * sizeof(int));
  assert_non_null(small);
  assert_non_null(sp);
  assert_non_null(sg);
  for (int i = 0; i < NS; i++) small[i] = 4096;
  double e_auto;
  int n_auto = cf_split_auto_partition(&d, small, NS, sp, &e_auto);
  int64_t cur = 0;
  int n25 = 0;
  for (int i = 0; i < NS; i++) {
    if (cur && cur + small[i] > (25 << 20)) n25++, cur = 0;
    sg[i] = n25;
    cur += small[i];
  }
  n25++;
  assert_int_equal(n25, 16);
  assert_true(n_auto < n25);
  assert_true(e_auto < cf_split_exposed(&d, small, NS, sg));
  free(small), free(sp), free(sg);
}

/* ================= exact tests of the passes ================= */

static void test_fusion0_never(void **state) {
  (void)state;
  static const char xml[] =
      "<graph name='f0' world_size='4'>\n"
      "  <node name='x0' op='Input' dtype='float32' shape='16'/>\n"
      "  <node name='x1' op='Input' dtype='float32' shape='16'/>\n"
      "  <node name='x2' op='Input' dtype='float32' shape='16'/>\n"
      "  <node name='a0' op='AllReduce' fusion='0'><input ref='x0'/></node>\n"
      "  <node name='a1' op='AllReduce' fusion='0' fusion_id='3'><input ref='x1'/></node>\n"
      "  <node name='a2' op='AllReduce' fusion='0'><input ref='x2'/></node>\n"
      "  <node name='g0' op='AllGather'><input ref='x0'/></node>\n"
      "  <node name='g1' op='AllGather' fusion_id='2'><input ref='x1'/></node>\n"
      "  <node name='r0' op='ReduceScatter'><input ref='x0'/></node>\n"
      "  <node name='r1' op='ReduceScatter' fusion='0'><input ref='x1'/></node>\n"
      "  <node name='o' op='Output'><input ref='a0'/></node>\n"
      "</graph>\n";
  static const char *const specs[] = {NULL, "auto", "bytes:1G", "size:100", "index:0"};
  for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
    cf_graph *g = parse(xml);
    cf_graph_stats before, after;
    cf_graph_stats_compute(g, &before);
    lines ex = {0};
    fuse_ok(g, NULL, specs[s], &ex);
    cf_graph_stats_compute(g, &after);
    assert_int_equal(before.collectives, 7);
    assert_int_equal(after.collectives, 7);
    assert_int_equal(after.comm_bytes, before.comm_bytes);
    assert_int_equal(count_op(g, CF_OP_FUSEDALLREDUCE) + count_op(g, CF_OP_FUSEDALLGATHER) +
                         count_op(g, CF_OP_FUSEDREDUCESCATTER),
                     0);
    assert_int_equal(ex.n, 7); /* one line per collective */
    expect_explain(&ex, "a0", "AllReduce 'a0' stays alone: fusion=0");
    expect_explain(&ex, "a1", "AllReduce 'a1' stays alone: fusion=0");
    expect_explain(&ex, "a2", "stays alone: fusion=0");
    /* AllGather and ReduceScatter default to fusion=0 */
    expect_explain(&ex, "g0", "AllGather 'g0' stays alone: fusion=0");
    expect_explain(&ex, "g1", "AllGather 'g1' stays alone: fusion=0");
    expect_explain(&ex, "r0", "ReduceScatter 'r0' stays alone: fusion=0");
    expect_explain(&ex, "r1", "ReduceScatter 'r1' stays alone: fusion=0");
    lines_free(&ex);
    cf_graph_destroy(g);
  }
}

static const char fid_graph[] =
    "<graph name='fid' world_size='4'>\n"
    "  <group name='even' ranks='0,2'/>\n"
    "  <node name='q' op='Input' dtype='float32' shape='64,64'/>\n"
    "  <node name='k' op='Input' dtype='float32' shape='64,64'/>\n"
    "  <node name='v' op='Input' dtype='float32' shape='64,64'/>\n"
    "  <node name='h' op='Input' dtype='bfloat16' shape='64'/>\n"
    "  <node name='e' op='Input' dtype='float32' shape='8'/>\n"
    "  <node name='m' op='Input' dtype='float32' shape='8'/>\n"
    "  <node name='p' op='Input' dtype='float32' shape='8'/>\n"
    "  <node name='s' op='Input' dtype='float32' shape='25'/>\n"
    "  <node name='t' op='Input' dtype='float32' shape='9'/>\n"
    "  <node name='u' op='Input' dtype='float32' shape='1'/>\n"
    "  <node name='ar_q' op='AllReduce' reduction='mean' fusion='2' fusion_id='7'><input "
    "ref='q'/></node>\n"
    "  <node name='ar_k' op='AllReduce' reduction='mean' fusion='2' fusion_id='7'><input "
    "ref='k'/></node>\n"
    "  <node name='ar_h' op='AllReduce' reduction='mean' fusion='2' fusion_id='7'><input "
    "ref='h'/></node>\n"
    "  <node name='ar_e' op='AllReduce' reduction='max' fusion='2' fusion_id='7'><input "
    "ref='e'/></node>\n"
    "  <node name='ar_m' op='AllReduce' reduction='mean' fusion='2' fusion_id='7' "
    "group='even'><input ref='m'/></node>\n"
    "  <node name='ar_v' op='AllReduce' reduction='mean' fusion='2' fusion_id='7'><input "
    "ref='v'/></node>\n"
    "  <node name='ar_p' op='AllReduce' fusion='2' fusion_id='8'><input ref='p'/></node>\n"
    "  <node name='ar_s' op='AllReduce' fusion='2' fusion_id='9'><input ref='s'/></node>\n"
    "  <node name='ar_t' op='AllReduce' fusion='2' fusion_id='9'><input ref='t'/></node>\n"
    "  <node name='ar_u' op='AllReduce' fusion='2' fusion_id='9'><input ref='u'/></node>\n"
    "  <node name='ar_one' op='AllReduce' reduction='mean'><input ref='e'/></node>\n"
    "  <node name='ar_zero' op='AllReduce' reduction='mean' fusion='0' fusion_id='7'><input "
    "ref='q'/></node>\n"
    "  <node name='use' op='Add'><input ref='ar_k'/><input ref='ar_q'/></node>\n"
    "  <node name='o1' op='Output'><input ref='use'/></node>\n"
    "  <node name='o2' op='Output'><input ref='ar_v'/></node>\n"
    "  <node name='o3' op='Output'><input ref='ar_t'/></node>\n"
    "</graph>\n";

static void test_fusion2_fusion_id(void **state) {
  (void)state;
  cf_graph *g = parse(fid_graph);
  lines ex = {0};
  fuse_ok(g, NULL, NULL, &ex);
  BUCKETS(g, CF_OP_FUSEDALLREDUCE, "ar_q,ar_k,ar_v", "ar_s,ar_t,ar_u");
  const cf_node *b = bucket_with(g, "ar_q,ar_k,ar_v");
  assert_int_equal(b->n_in, 3);
  assert_int_equal(b->n_out, 3);
  assert_int_equal(cf_node_fusion(b), 2);
  assert_int_equal(cf_node_int(b, CF_A_FUSION_ID, -1), 7);
  assert_int_equal(cf_node_reduction(b), CF_RED_MEAN);
  assert_string_equal(cf_node_group(b), CF_WORLD_GROUP);
  assert_string_equal(cf_node_str(b, CF_A_REASON, ""), "fusion_id=7");
  assert_string_equal(attr_text(b, CF_A_OFFSETS, ""), "0,16384,32768");
  for (int j = 0; j < 3; j++) {
    static const char *const in[] = {"q", "k", "v"};
    assert_string_equal(g->nodes[b->in[j].node].name, in[j]);
    assert_int_equal(b->out[j].dtype, CF_DT_FLOAT32);
    assert_int_equal(b->out[j].shape.rank, 2);
  }
  /* users read their member's port */
  const cf_node *use = node(g, "use");
  assert_string_equal(g->nodes[use->in[0].node].name, b->name);
  assert_int_equal(use->in[0].port, 1);
  assert_int_equal(use->in[1].port, 0);
  assert_int_equal(node(g, "o2")->in[0].port, 2);
  /* offsets are 64-byte aligned and never overlap: 36 bytes after 100 */
  const cf_node *b9 = bucket_with(g, "ar_s,ar_t,ar_u");
  assert_string_equal(attr_text(b9, CF_A_OFFSETS, ""), "0,128,192");
  assert_string_equal(cf_node_str(b9, CF_A_REASON, ""), "fusion_id=9");
  assert_int_equal(node(g, "o3")->in[0].port, 1);

  expect_alone(g, "ar_h", CF_OP_ALLREDUCE);
  expect_alone(g, "ar_e", CF_OP_ALLREDUCE);
  expect_alone(g, "ar_m", CF_OP_ALLREDUCE);
  expect_alone(g, "ar_p", CF_OP_ALLREDUCE);
  expect_alone(g, "ar_one", CF_OP_ALLREDUCE);
  expect_alone(g, "ar_zero", CF_OP_ALLREDUCE);
  expect_explain(&ex, "ar_q", "-> 'allreduce_bucket_");
  expect_explain(&ex, "ar_q", "(fusion_id=7, 3 members, 49152 bytes)");
  expect_explain(
      &ex, "ar_h",
      "stays alone: fusion_id=7 is shared with 'ar_q', but dtype differs (bfloat16 vs float32)");
  expect_explain(
      &ex, "ar_e",
      "stays alone: fusion_id=7 is shared with 'ar_q', but reduction differs (max vs mean)");
  expect_explain(&ex, "ar_m",
                 "stays alone: fusion_id=7 is shared with 'ar_q', but group differs (even vs "
                 "hccl_world_group)");
  expect_explain(&ex, "ar_p", "stays alone: no other AllReduce has fusion_id=8");
  expect_explain(&ex, "ar_zero", "stays alone: fusion=0");
  expect_explain(&ex, "ar_one", "stays alone:");
  assert_int_equal(ex.n, 12);
  lines_free(&ex);

  /* -O0 fuses nothing */
  cf_graph *g0 = parse(fid_graph);
  fuse_ok(g0, cf_pipeline_O0, NULL, NULL);
  assert_int_equal(count_op(g0, CF_OP_FUSEDALLREDUCE), 0);
  assert_int_equal(count_op(g0, CF_OP_ALLREDUCE), 12);
  cf_graph_destroy(g0);
  cf_graph_destroy(g);
}

/* n AllReduce gradients ar0..ar{n-1} of the given float32 element counts,
 * in this graph order, read by Outputs */
static char *grad_graph(const int64_t *elems, int n, const char *extra_attrs) {
  sb b = {0};
  sb_add(&b, "<graph name='grads' world_size='8'>\n");
  for (int i = 0; i < n; i++)
    sb_add(&b, "  <node name='g%d' op='Input' dtype='float32' shape='%lld'/>\n", i,
           (long long)elems[i]);
  for (int i = 0; i < n; i++)
    sb_add(&b, "  <node name='ar%d' op='AllReduce' %s><input ref='g%d'/></node>\n", i,
           extra_attrs ? extra_attrs : "", i);
  for (int i = 0; i < n; i++)
    sb_add(&b, "  <node name='o%d' op='Output'><input ref='ar%d'/></node>\n", i, i);
  sb_add(&b, "</graph>\n");
  return b.s;
}

static void test_split_bytes(void **state) {
  (void)state;
  /* bytes: 256 256 256 512 2048 256 128 128 */
  static const int64_t el[8] = {64, 64, 64, 128, 512, 64, 32, 32};
  char *xml = grad_graph(el, 8, NULL);

  cf_graph *g = parse(xml);
  lines ex = {0};
  fuse_ok(g, NULL, "bytes:1K", &ex);
  BUCKETS(g, CF_OP_FUSEDALLREDUCE, "ar0,ar1,ar2", "ar5,ar6,ar7");
  expect_alone(g, "ar3", CF_OP_ALLREDUCE);
  expect_alone(g, "ar4", CF_OP_ALLREDUCE);
  const cf_node *b = bucket_with(g, "ar0,ar1,ar2");
  assert_string_equal(cf_node_str(b, CF_A_REASON, ""), "split");
  assert_int_equal(cf_node_fusion(b), 1);
  assert_null(cf_node_attr(b, CF_A_FUSION_ID));
  assert_string_equal(attr_text(b, CF_A_OFFSETS, ""), "0,256,512");
  assert_string_equal(attr_text(bucket_with(g, "ar5,ar6,ar7"), CF_A_OFFSETS, ""), "0,256,384");
  expect_explain(&ex, "ar0", "(split bytes cap=1K, 3 members, 768 bytes)");
  expect_explain(
      &ex, "ar3",
      "stays alone: bucket cap 1K reached: the next gradient 'ar4' (2048 bytes) did not fit");
  expect_explain(&ex, "ar4", "stays alone: cap reached: 2048 bytes is more than the cap 1K");
  expect_explain(&ex, "ar7", "(split bytes cap=1K, 3 members, 512 bytes)");
  lines_free(&ex);
  cf_graph_destroy(g);

  /* a smaller first bucket */
  g = parse(xml);
  fuse_ok(g, NULL, "bytes:1K,first=256", &ex);
  BUCKETS(g, CF_OP_FUSEDALLREDUCE, "ar1,ar2,ar3", "ar5,ar6,ar7");
  expect_alone(g, "ar0", CF_OP_ALLREDUCE);
  expect_alone(g, "ar4", CF_OP_ALLREDUCE);
  expect_explain(
      &ex, "ar0",
      "stays alone: bucket cap 256 reached: the next gradient 'ar1' (256 bytes) did not fit");
  expect_explain(&ex, "ar1", "(split bytes cap=1K, 3 members, 1024 bytes)");
  lines_free(&ex);
  cf_graph_destroy(g);

  /* at most count members */
  g = parse(xml);
  fuse_ok(g, NULL, "bytes:1K,count=2", &ex);
  BUCKETS(g, CF_OP_FUSEDALLREDUCE, "ar0,ar1", "ar2,ar3", "ar5,ar6");
  expect_alone(g, "ar4", CF_OP_ALLREDUCE);
  expect_alone(g, "ar7", CF_OP_ALLREDUCE);
  expect_explain(&ex, "ar7",
                 "stays alone: last gradient of its class after a full bucket (cap 1K)");
  lines_free(&ex);
  cf_graph_destroy(g);

  g = parse(xml);
  fuse_ok(g, NULL, "bytes:1K,count=1", &ex);
  assert_int_equal(count_op(g, CF_OP_FUSEDALLREDUCE), 0);
  expect_explain(&ex, "ar0", "stays alone: count=1 reached");
  lines_free(&ex);
  cf_graph_destroy(g);

  /* a cap above the total: one bucket of everything */
  g = parse(xml);
  fuse_ok(g, NULL, "bytes:25M", NULL);
  BUCKETS(g, CF_OP_FUSEDALLREDUCE, "ar0,ar1,ar2,ar3,ar4,ar5,ar6,ar7");
  assert_string_equal(
      attr_text(bucket_with(g, "ar0,ar1,ar2,ar3,ar4,ar5,ar6,ar7"), CF_A_OFFSETS, ""),
      "0,256,512,768,1280,3328,3584,3712");
  cf_graph_destroy(g);
  free(xml);
}

/* buckets follow gradient-ready order, the graph order of the producers,
 * not the order the AllReduce nodes are written in */
static void test_split_ready_order(void **state) {
  (void)state;
  static const char xml[] = "<graph name='ready' world_size='2'>\n"
                            "  <node name='x' op='Input' dtype='float32' shape='64'/>\n"
                            "  <node name='c1' op='Opaque' type='Conv' dtype='float32' "
                            "shape='64'><input ref='x'/></node>\n"
                            "  <node name='c2' op='Opaque' type='Conv' dtype='float32' "
                            "shape='64'><input ref='c1'/></node>\n"
                            "  <node name='gA' op='Opaque' type='Grad' dtype='float32' "
                            "shape='64'><input ref='c2'/></node>\n"
                            "  <node name='gB' op='Opaque' type='Grad' dtype='float32' "
                            "shape='64'><input ref='x'/></node>\n"
                            "  <node name='gC' op='Opaque' type='Grad' dtype='float32' "
                            "shape='64'><input ref='gB'/></node>\n"
                            "  <node name='gD' op='Opaque' type='Grad' dtype='float32' "
                            "shape='64'><input ref='x'/></node>\n"
                            "  <node name='arD' op='AllReduce'><input ref='gD'/></node>\n"
                            "  <node name='arC' op='AllReduce'><input ref='gC'/></node>\n"
                            "  <node name='arB' op='AllReduce'><input ref='gB'/></node>\n"
                            "  <node name='arA' op='AllReduce'><input ref='gA'/></node>\n"
                            "</graph>\n";
  /* ready order is gA, gB, gC, gD (256 bytes each) */
  cf_graph *g = parse(xml);
  fuse_ok(g, NULL, "bytes:512", NULL);
  BUCKETS(g, CF_OP_FUSEDALLREDUCE, "arA,arB", "arC,arD");
  cf_graph_destroy(g);
  g = parse(xml);
  fuse_ok(g, NULL, "index:0,3", NULL);
  BUCKETS(g, CF_OP_FUSEDALLREDUCE, "arB,arC,arD");
  expect_alone(g, "arA", CF_OP_ALLREDUCE);
  cf_graph_destroy(g);
  g = parse(xml);
  fuse_ok(g, NULL, "size:75,25", NULL);
  BUCKETS(g, CF_OP_FUSEDALLREDUCE, "arA,arB,arC");
  expect_alone(g, "arD", CF_OP_ALLREDUCE);
  cf_graph_destroy(g);
}

static void test_split_size(void **state) {
  (void)state;
  static const int64_t el[4] = {25, 25, 25, 25}; /* 100 bytes each */
  char *xml = grad_graph(el, 4, NULL);
  cf_graph *g = parse(xml);
  lines ex = {0};
  fuse_ok(g, NULL, "size:50,50", &ex);
  BUCKETS(g, CF_OP_FUSEDALLREDUCE, "ar0,ar1", "ar2,ar3");
  expect_explain(&ex, "ar0", "(split size segment 0, 2 members, 200 bytes)");
  expect_explain(&ex, "ar3", "(split size segment 1, 2 members, 200 bytes)");
  lines_free(&ex);
  cf_graph_destroy(g);

  g = parse(xml);
  fuse_ok(g, NULL, "size:25,75", &ex);
  BUCKETS(g, CF_OP_FUSEDALLREDUCE, "ar1,ar2,ar3");
  expect_alone(g, "ar0", CF_OP_ALLREDUCE);
  expect_explain(&ex, "ar0",
                 "stays alone: the only fusion=1 AllReduce of its kind in size segment 0");
  lines_free(&ex);
  cf_graph_destroy(g);

  g = parse(xml);
  fuse_ok(g, NULL, "size:100", NULL);
  BUCKETS(g, CF_OP_FUSEDALLREDUCE, "ar0,ar1,ar2,ar3");
  cf_graph_destroy(g);

  /* a spec error names the spec and leaves the graph as it was */
  g = parse(xml);
  int n = g->n_nodes;
  ASSERT_ERR(fuse(g, NULL, "size:50,40", NULL), CF_ERR_USAGE,
             "--split size:50,40: percentages sum to 90, not 100");
  ASSERT_ERR(fuse(g, NULL, "size:10,10,10,10,10,10,10,10,20", NULL), CF_ERR_USAGE,
             "more than 8 segments");
  assert_int_equal(g->n_nodes, n);
  assert_int_equal(count_op(g, CF_OP_FUSEDALLREDUCE), 0);
  cf_graph_destroy(g);
  free(xml);

  /* HCCL's ResNet-50 default */
  static const int64_t rn[10] = {1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 250};
  xml = grad_graph(rn, 10, "reduction='mean'");
  g = parse(xml);
  fuse_ok(g, NULL, "size:96.54,3.46", NULL);
  BUCKETS(g, CF_OP_FUSEDALLREDUCE, "ar0,ar1,ar2,ar3,ar4,ar5,ar6,ar7", "ar8,ar9");
  cf_graph_destroy(g);
  free(xml);
}

static void test_split_index(void **state) {
  (void)state;
  int64_t el[160];
  for (int i = 0; i < 160; i++)
    el[i] = 16; /* 64 bytes */
  char *xml = grad_graph(el, 160, NULL);
  cf_graph *g = parse(xml);
  lines ex = {0};
  fuse_ok(g, NULL, "index:20,100,159", &ex);
  sb want[3] = {{0}, {0}, {0}};
  for (int i = 0; i < 160; i++) {
    int s = i <= 20 ? 0 : i <= 100 ? 1 : 2;
    sb_add(&want[s], want[s].n ? ",ar%d" : "ar%d", i);
  }
  BUCKETS(g, CF_OP_FUSEDALLREDUCE, want[0].s, want[1].s, want[2].s);
  const cf_node *b = bucket_with(g, want[1].s);
  assert_int_equal(b->n_in, 80);
  assert_int_equal(list_count(attr_text(b, CF_A_MEMBERS, "")), 80);
  assert_int_equal(list_count(attr_text(b, CF_A_OFFSETS, "")), 80);
  assert_int_equal(list_count(attr_text(bucket_with(g, want[0].s), CF_A_MEMBERS, "")), 21);
  assert_int_equal(list_count(attr_text(bucket_with(g, want[2].s), CF_A_MEMBERS, "")), 59);
  expect_explain(&ex, "ar21", "(split index segment 1, 80 members, 5120 bytes)");
  expect_explain(&ex, "ar159", "(split index segment 2, 59 members, 3776 bytes)");
  assert_int_equal(ex.n, 160);
  for (int s = 0; s < 3; s++)
    sb_free(&want[s]);
  lines_free(&ex);
  cf_graph_destroy(g);

  /* index past the end; last index not the last gradient; unsorted */
  g = parse(xml);
  int n = g->n_nodes;
  ASSERT_ERR(fuse(g, NULL, "index:20,100,200", NULL), CF_ERR_USAGE,
             "--split index: index 200 is past the last gradient (160 gradients, last index 159) "
             "(AllReduce)");
  ASSERT_ERR(fuse(g, NULL, "index:20,100,158", NULL), CF_ERR_USAGE,
             "the last index must be the last gradient, 159 (got 158)");
  ASSERT_ERR(fuse(g, NULL, "index:100,20,159", NULL), CF_ERR_USAGE,
             "indices must be strictly ascending (20 after 100)");
  ASSERT_ERR(fuse(g, NULL, "index:1,2,3,4,5,6,7,8,159", NULL), CF_ERR_USAGE,
             "more than 8 segments");
  assert_int_equal(g->n_nodes, n);
  assert_int_equal(count_op(g, CF_OP_FUSEDALLREDUCE), 0);
  ASSERT_ERR(fuse(g, "fuse-allreduce", "bytes:0", NULL), CF_ERR_USAGE,
             "--split bytes:0: bad cap '0'");
  cf_pass_options bad_cost = {.cost = "fast"};
  ASSERT_ERR(cf_passes_run(g, "fuse-allreduce", &bad_cost, NULL, NULL), CF_ERR_USAGE,
             "--cost fast: expected alpha_us,beta_GBps");
  cf_graph_destroy(g);
  free(xml);

  /* single-member segments stay alone */
  static const int64_t four[4] = {16, 16, 16, 16};
  xml = grad_graph(four, 4, NULL);
  g = parse(xml);
  fuse_ok(g, NULL, "index:0,2,3", &ex);
  BUCKETS(g, CF_OP_FUSEDALLREDUCE, "ar1,ar2");
  expect_alone(g, "ar0", CF_OP_ALLREDUCE);
  expect_alone(g, "ar3", CF_OP_ALLREDUCE);
  expect_explain(&ex, "ar0",
                 "stays alone: the only fusion=1 AllReduce of its kind in index segment 0");
  expect_explain(&ex, "ar3",
                 "stays alone: the only fusion=1 AllReduce of its kind in index segment 2");
  lines_free(&ex);
  cf_graph_destroy(g);
  free(xml);
}

static void test_split_auto(void **state) {
  (void)state;
  enum { N = 95 };
  int64_t el[N], bytes[N];
  for (int i = 0; i < N; i++) el[i] = 65536 * (1 + i % 7), bytes[i] = el[i] * 4;
  char *xml = grad_graph(el, N, NULL);

  /* the pass buckets exactly as the model's partition says */
  cf_cost c;
  char why[128];
  assert_true(cf_cost_parse(NULL, &c, why, sizeof why));
  int part[N];
  double exposed;
  int nb = cf_split_auto_partition(&c, bytes, N, part, &exposed);
  assert_true(nb > 1);
  cf_graph *g = parse(xml);
  lines ex = {0};
  fuse_ok(g, NULL, NULL, &ex);
  int64_t total = 0;
  static char lists[N][1024];
  const char *want[N];
  int nwant = 0;
  for (int b = 0; b < nb; b++) {
    char *members = lists[nwant], name[16];
    members[0] = 0;
    size_t o = 0;
    int count = 0, first = -1;
    for (int i = 0; i < N; i++)
      if (part[i] == b) {
        o += (size_t)snprintf(members + o, sizeof lists[0] - o, "%sar%d", o ? "," : "", i);
        count++;
        if (first < 0) first = i;
      }
    snprintf(name, sizeof name, "ar%d", first);
    if (count == 1) {
      expect_alone(g, name, CF_OP_ALLREDUCE);
      expect_explain(&ex, name, "stays alone: split auto: the cost model sends it alone");
    } else {
      want[nwant++] = members;
      char text[96];
      snprintf(text, sizeof text, "split auto: %d buckets, model exposes %.0f us", nb, exposed);
      expect_explain(&ex, name, text);
    }
  }
  expect_buckets(g, CF_OP_FUSEDALLREDUCE, want, nwant);
  cf_graph_stats sa;
  cf_graph_stats_compute(g, &sa);
  assert_int_equal(sa.collectives, nb);
  for (int i = 0; i < N; i++) total += bytes[i];
  assert_int_equal(sa.comm_bytes, total);
  lines_free(&ex);
  cf_graph_destroy(g);

  /* --cost reaches the model: a huge alpha makes one bucket */
  cf_pass_options dear = {.cost = "100000000,8"};
  g = parse(xml);
  assert_int_equal(cf_passes_run(g, NULL, &dear, NULL, NULL), CF_OK);
  cf_graph_stats_compute(g, &sa);
  assert_int_equal(sa.collectives, 1);
  cf_graph_destroy(g);
  free(xml);

  /* many tiny tensors: one bucket */
  int64_t small[50];
  for (int i = 0; i < 50; i++) small[i] = 16;
  xml = grad_graph(small, 50, NULL);
  g = parse(xml);
  fuse_ok(g, NULL, "auto", NULL);
  assert_int_equal(count_op(g, CF_OP_FUSEDALLREDUCE), 1);
  assert_int_equal(count_op(g, CF_OP_ALLREDUCE), 0);
  cf_graph_destroy(g);
  free(xml);
}

static void test_allgather_reducescatter(void **state) {
  (void)state;
  static const char xml[] =
      "<graph name='agrs' world_size='4'>\n"
      "  <group name='pair' ranks='0,1'/>\n"
      "  <node name='x0' op='Input' dtype='float32' shape='8,4'/>\n"
      "  <node name='x1' op='Input' dtype='float32' shape='8,4'/>\n"
      "  <node name='x2' op='Input' dtype='float32' shape='16'/>\n"
      "  <node name='x3' op='Input' dtype='float32' shape='4'/>\n"
      "  <node name='x4' op='Input' dtype='bfloat16' shape='4,3'/>\n"
      "  <node name='x5' op='Input' dtype='bfloat16' shape='2'/>\n"
      "  <node name='ag0' op='AllGather' fusion='2' fusion_id='1' layout='concat'><input "
      "ref='x0'/></node>\n"
      "  <node name='ag1' op='HcomAllGather' fusion='2' fusion_id='1'><input ref='x1'/></node>\n"
      "  <node name='ag2' op='AllGather' fusion='2' fusion_id='1' layout='stack'><input "
      "ref='x2'/></node>\n"
      "  <node name='ag3' op='AllGather'><input ref='x3'/></node>\n"
      "  <node name='ag4' op='AllGather' fusion='1'><input ref='x4'/></node>\n"
      "  <node name='ag5' op='AllGather' fusion='1' layout='stack'><input ref='x5'/></node>\n"
      "  <node name='ag6' op='AllGather' fusion='1' group='pair'><input ref='x5'/></node>\n"
      "  <node name='rs0' op='ReduceScatter' fusion='2' fusion_id='1'><input ref='x0'/></node>\n"
      "  <node name='rs1' op='ReduceScatter' fusion='2' fusion_id='1'><input ref='x1'/></node>\n"
      "  <node name='rs2' op='ReduceScatter'><input ref='x2'/></node>\n"
      "  <node name='rs3' op='ReduceScatter' fusion='1' reduction='max'><input ref='x2'/></node>\n"
      "  <node name='rs4' op='ReduceScatter' fusion='1' reduction='max'><input ref='x3'/></node>\n"
      "  <node name='ar0' op='AllReduce' fusion='2' fusion_id='1'><input ref='x0'/></node>\n"
      "  <node name='ar1' op='AllReduce' fusion='2' fusion_id='1'><input ref='x1'/></node>\n"
      "  <node name='o0' op='Output' dtype='float32' shape='32,4'><input ref='ag1'/></node>\n"
      "  <node name='o1' op='Output' dtype='bfloat16' shape='4,2'><input ref='ag5'/></node>\n"
      "  <node name='o2' op='Output' dtype='float32' shape='2,4'><input ref='rs1'/></node>\n"
      "</graph>\n";
  cf_graph *g = parse(xml);
  lines ex = {0};
  fuse_ok(g, NULL, NULL, &ex);
  BUCKETS(g, CF_OP_FUSEDALLGATHER, "ag0,ag1", "ag4,ag5");
  BUCKETS(g, CF_OP_FUSEDREDUCESCATTER, "rs0,rs1", "rs3,rs4");
  BUCKETS(g, CF_OP_FUSEDALLREDUCE, "ar0,ar1");
  expect_alone(g, "ag2", CF_OP_ALLGATHER);
  expect_alone(g, "ag3", CF_OP_ALLGATHER);
  expect_alone(g, "ag6", CF_OP_ALLGATHER);
  expect_alone(g, "rs2", CF_OP_REDUCESCATTER);

  const cf_node *ag = bucket_with(g, "ag0,ag1");
  assert_int_equal(cf_node_layout(ag), CF_LAYOUT_CONCAT);
  assert_int_equal(cf_node_int(ag, CF_A_FUSION_ID, -1), 1);
  assert_string_equal(cf_node_str(ag, CF_A_REASON, ""), "fusion_id=1");
  for (int j = 0; j < 2; j++) {
    assert_int_equal(ag->out[j].shape.rank, 2);
    assert_int_equal(ag->out[j].shape.dims[0], 32);
    assert_int_equal(ag->out[j].shape.dims[1], 4);
  }
  /* the bucket buffer holds the inputs: 128 bytes each */
  assert_string_equal(attr_text(ag, CF_A_OFFSETS, ""), "0,128");
  const cf_node *ag45 = bucket_with(g, "ag4,ag5");
  assert_int_equal(cf_node_layout(ag45), CF_LAYOUT_STACK);
  assert_string_equal(cf_node_str(ag45, CF_A_REASON, ""), "split");
  assert_int_equal(ag45->out[0].shape.rank, 3);
  assert_int_equal(ag45->out[1].shape.dims[0], 4);
  assert_int_equal(ag45->out[1].shape.dims[1], 2);
  const cf_node *rs = bucket_with(g, "rs0,rs1");
  assert_int_equal(rs->out[1].shape.dims[0], 2);
  assert_int_equal(rs->out[1].shape.dims[1], 4);
  assert_int_equal(cf_node_reduction(bucket_with(g, "rs3,rs4")), CF_RED_MAX);
  /* the bytes a fused AllGather moves are the gathered ones */
  assert_int_equal(cf_node_comm_bytes(g, ag), 2 * 32 * 4 * 4);

  expect_explain(&ex, "ag2",
                 "AllGather 'ag2' stays alone: fusion_id=1 is shared with 'ag0', but layout "
                 "differs (stack vs concat)");
  expect_explain(&ex, "ag3", "stays alone: fusion=0");
  expect_explain(&ex, "ag6", "stays alone: group differs (pair vs hccl_world_group) from 'ag4'");
  expect_explain(&ex, "rs2", "ReduceScatter 'rs2' stays alone: fusion=0");
  expect_explain(&ex, "rs0", "(fusion_id=1, 2 members, 256 bytes)");
  assert_int_equal(ex.n, 14);
  lines_free(&ex);

  /* each fuse pass touches its own kind only */
  cf_graph *g2 = parse(xml);
  fuse_ok(g2, "fuse-allgather", NULL, NULL);
  assert_int_equal(count_op(g2, CF_OP_FUSEDALLGATHER), 2);
  assert_int_equal(count_op(g2, CF_OP_FUSEDALLREDUCE) + count_op(g2, CF_OP_FUSEDREDUCESCATTER), 0);
  fuse_ok(g2, "fuse-reducescatter", NULL, NULL);
  assert_int_equal(count_op(g2, CF_OP_FUSEDREDUCESCATTER), 2);
  assert_int_equal(count_op(g2, CF_OP_FUSEDALLREDUCE), 0);
  /* a second run finds nothing more to fuse */
  int n = g2->n_nodes;
  fuse_ok(g2, NULL, NULL, NULL);
  assert_int_equal(g2->n_nodes, n - 1);
  fuse_ok(g2, NULL, NULL, NULL);
  assert_int_equal(g2->n_nodes, n - 1);
  cf_graph_destroy(g2);
  cf_graph_destroy(g);
}

/* chains a1->a2 and b1->b2 give {a1,b1} and {a2,b2}, through compute or not */
/* fuse-alltoall: buckets share group, split and concat dims (and mix
 * dtypes as bytes unless same_dtype), a fusion_id as the other kinds; the
 * tuple form, fusion=0 and a dependent one stay alone, each saying why. */
static void test_alltoall_buckets(void **state) {
  (void)state;
  static const char xml[] =
      "<graph name='a2a' world_size='4'>\n"
      "  <node name='x0' op='Input' dtype='float32' shape='8,4'/>\n"
      "  <node name='x1' op='Input' dtype='bfloat16' shape='4,2'/>\n"
      "  <node name='x2' op='Input' dtype='float32' shape='2,8'/>\n"
      "  <node name='x3' op='Input' dtype='int32' shape='3,4,4'/>\n"
      "  <node name='a0' op='AllToAll' fusion='2' fusion_id='1'><input ref='x0'/></node>\n"
      "  <node name='a1' op='AllToAll' fusion='2' fusion_id='1'><input ref='x1'/></node>\n"
      "  <node name='a2' op='AllToAll' fusion='1' split_dimension='1' concat_dimension='1'>"
      "<input ref='x2'/></node>\n"
      "  <node name='a3' op='AllToAll' fusion='1' split_dimension='1' concat_dimension='1'>"
      "<input ref='x3'/></node>\n"
      "  <node name='a4' op='AllToAll' fusion='1' split_dimension='0' concat_dimension='1'>"
      "<input ref='x0'/></node>\n"
      "  <node name='a5' op='AllToAll' fusion='1'><input ref='x2'/><input ref='x2'/>"
      "<input ref='x2'/><input ref='x2'/></node>\n"
      "  <node name='a6' op='AllToAll'><input ref='x0'/></node>\n"
      "  <node name='a7' op='AllToAll' fusion='1' split_dimension='1' concat_dimension='1'>"
      "<input ref='a2'/></node>\n"
      "  <node name='o2' op='Output'><input ref='a2'/></node>\n"
      "  <node name='o3' op='Output'><input ref='a3'/></node>\n"
      "  <node name='o7' op='Output'><input ref='a7'/></node>\n"
      "  <node name='o5' op='Output'><input ref='a5' port='3'/></node>\n"
      "  <node name='o0' op='Output'><input ref='a0'/></node>\n"
      "  <node name='o1' op='Output'><input ref='a1'/></node>\n"
      "  <node name='o4' op='Output'><input ref='a4'/></node>\n"
      "  <node name='o6' op='Output'><input ref='a6'/></node>\n"
      "</graph>\n";
  cf_graph *g = parse(xml);
  lines ex = {0};
  fuse_ok(g, NULL, NULL, &ex);
  BUCKETS(g, CF_OP_FUSEDALLTOALL, "a0,a1", "a2,a3");
  expect_alone(g, "a4", CF_OP_ALLTOALL);
  expect_alone(g, "a5", CF_OP_ALLTOALL);
  expect_alone(g, "a6", CF_OP_ALLTOALL);
  expect_alone(g, "a7", CF_OP_ALLTOALL);
  const cf_node *b = bucket_with(g, "a2,a3");
  assert_int_equal(cf_node_int(b, CF_A_SPLIT_DIMENSION, 0), 1);
  assert_int_equal(cf_node_int(b, CF_A_CONCAT_DIMENSION, 0), 1);
  /* each port has the shape its plain AllToAll gives (split and concat
   * along dim 1 keep it) and its own dtype; the bucket moves bytes */
  assert_int_equal(b->out[1].dtype, CF_DT_INT32);
  assert_int_equal(b->out[1].shape.rank, 3);
  assert_int_equal(b->out[1].shape.dims[2], 4);
  assert_string_equal(attr_text(b, CF_A_OFFSETS, ""), "0,64");
  assert_int_equal(cf_node_comm_bytes(g, b), 64 + 192);
  const cf_node *f = bucket_with(g, "a0,a1");
  assert_string_equal(cf_node_str(f, CF_A_REASON, ""), "fusion_id=1");
  assert_int_equal(f->out[0].dtype, CF_DT_FLOAT32);
  assert_int_equal(f->out[1].dtype, CF_DT_BFLOAT16);
  expect_explain(&ex, "a4", "stays alone: split_dimension differs (0 vs 1) from 'a2'");
  expect_explain(&ex, "a5", "stays alone: the tuple form (operand j to rank j) is one exchange");
  expect_explain(&ex, "a6", "stays alone: fusion=0");
  expect_explain(&ex, "a7", "stays alone: fusing it with 'a2' would make a cycle ('a7' depends on "
                            "collective 'a2')");
  lines_free(&ex);
  /* compiled again: the buckets join nothing more, whole, as they are */
  int nodes = g->n_nodes;
  ex = (lines){0};
  fuse_ok(g, NULL, NULL, &ex);
  assert_int_equal(g->n_nodes, nodes);
  BUCKETS(g, CF_OP_FUSEDALLTOALL, "a0,a1", "a2,a3");
  expect_explain(&ex, "a4", "stays alone: split_dimension differs (0 vs 1) from 'alltoall_bucket_");
  lines_free(&ex);
  cf_graph_destroy(g);

  /* same_dtype: one dtype a bucket, as XLA's combine_different_dtypes=false */
  g = parse(xml);
  ex = (lines){0};
  fuse_ok(g, NULL, "auto,same_dtype", &ex);
  assert_int_equal(count_op(g, CF_OP_FUSEDALLTOALL), 0);
  expect_explain(&ex, "a1", "fusion_id=1 is shared with 'a0', but dtype differs (bfloat16 vs float32)");
  expect_explain(&ex, "a3", "stays alone: dtype differs (int32 vs float32) from 'a2'");
  lines_free(&ex);
  cf_graph_destroy(g);
}

/* --split SPEC,any_dim (XLA's combine_by_dim=false): gathers and scatters
 * of different dims share a bucket that lists each member's dim; without
 * it a bucket has one dim. Each port keeps its member's shape. */
static void test_any_dim(void **state) {
  (void)state;
  static const char xml[] =
      "<graph name='dims' world_size='2'>\n"
      "  <node name='x0' op='Input' dtype='float32' shape='4,6'/>\n"
      "  <node name='x1' op='Input' dtype='float32' shape='6'/>\n"
      "  <node name='x2' op='Input' dtype='float32' shape='2,3,4'/>\n"
      "  <node name='g0' op='AllGather' layout='concat' dim='1' fusion='1'><input ref='x0'/></node>\n"
      "  <node name='g1' op='AllGather' layout='concat' fusion='1'><input ref='x1'/></node>\n"
      "  <node name='g2' op='AllGather' layout='concat' dim='2' fusion='1'><input ref='x2'/></node>\n"
      "  <node name='r0' op='ReduceScatter' dim='1' fusion='1'><input ref='x0'/></node>\n"
      "  <node name='r1' op='ReduceScatter' fusion='1'><input ref='x0'/></node>\n"
      "  <node name='o0' op='Output'><input ref='g0'/></node>\n"
      "  <node name='o1' op='Output'><input ref='g1'/></node>\n"
      "  <node name='o2' op='Output'><input ref='g2'/></node>\n"
      "  <node name='o3' op='Output'><input ref='r0'/></node>\n"
      "  <node name='o4' op='Output'><input ref='r1'/></node>\n"
      "</graph>\n";
  cf_graph *g = parse(xml);
  lines ex = {0};
  fuse_ok(g, NULL, "bytes:1M", &ex);
  assert_int_equal(count_op(g, CF_OP_FUSEDALLGATHER) + count_op(g, CF_OP_FUSEDREDUCESCATTER), 0);
  expect_explain(&ex, "r1", "stays alone: dim differs (0 vs 1) from 'r0'");
  lines_free(&ex);
  cf_graph_destroy(g);

  g = parse(xml);
  fuse_ok(g, NULL, "bytes:1M,any_dim", NULL);
  BUCKETS(g, CF_OP_FUSEDALLGATHER, "g0,g1,g2");
  BUCKETS(g, CF_OP_FUSEDREDUCESCATTER, "r0,r1");
  const cf_node *b = bucket_with(g, "g0,g1,g2");
  assert_string_equal(attr_text(b, CF_A_DIMS, ""), "1,0,2");
  assert_null(cf_node_attr(b, CF_A_DIM));
  assert_int_equal(b->out[0].shape.dims[1], 12);
  assert_int_equal(b->out[1].shape.dims[0], 12);
  assert_int_equal(b->out[2].shape.dims[2], 8);
  const cf_node *r = bucket_with(g, "r0,r1");
  assert_string_equal(attr_text(r, CF_A_DIMS, ""), "1,0");
  assert_int_equal(r->out[0].shape.dims[0], 4);
  assert_int_equal(r->out[0].shape.dims[1], 3);
  assert_int_equal(r->out[1].shape.dims[0], 2);
  assert_int_equal(r->out[1].shape.dims[1], 6);
  assert_int_equal(cf_node_member_dim(r, 0), 1);
  assert_int_equal(cf_node_member_dim(r, 1), 0);
  cf_graph_destroy(g);
}

static void test_chains_global(void **state) {
  (void)state;
  static const char *const attrs[] = {"", "fusion='2' fusion_id='3'"};
  for (int k = 0; k < 2; k++) {
    sb b = {0};
    sb_add(&b,
           "<graph name='chains' world_size='2'>\n"
           "  <node name='xa' op='Input' dtype='float32' shape='16'/>\n"
           "  <node name='xb' op='Input' dtype='float32' shape='16'/>\n"
           "  <node name='a1' op='AllReduce' %s><input ref='xa'/></node>\n"
           "  <node name='ha' op='Opaque' type='Gelu' dtype='float32' shape='16'><input "
           "ref='a1'/></node>\n"
           "  <node name='a2' op='AllReduce' %s><input ref='ha'/></node>\n"
           "  <node name='b1' op='AllReduce' %s><input ref='xb'/></node>\n"
           "  <node name='b2' op='AllReduce' %s><input ref='b1'/></node>\n"
           "  <node name='y' op='Add'><input ref='a2'/><input ref='b2'/></node>\n"
           "  <node name='o' op='Output'><input ref='y'/></node>\n"
           "</graph>\n",
           attrs[k], attrs[k], attrs[k], attrs[k]);
    cf_graph *g = parse(b.s);
    lines ex = {0};
    fuse_ok(g, NULL, "bytes:1G", &ex);
    BUCKETS(g, CF_OP_FUSEDALLREDUCE, "a1,b1", "a2,b2");
    const cf_node *f1 = bucket_with(g, "a1,b1"), *f2 = bucket_with(g, "a2,b2");
    /* ha reads port 0 of the first bucket, the second bucket reads ha and port 1 */
    const cf_node *ha = node(g, "ha");
    assert_string_equal(g->nodes[ha->in[0].node].name, f1->name);
    assert_int_equal(ha->in[0].port, 0);
    assert_string_equal(g->nodes[f2->in[0].node].name, "ha");
    assert_string_equal(g->nodes[f2->in[1].node].name, f1->name);
    assert_int_equal(f2->in[1].port, 1);
    if (k == 1) {
      /* one fusion_id over two depths: split, and --explain says so */
      expect_explain(&ex, "a2",
                     "(fusion_id=3, 2 members, 128 bytes, fusion_id split by dependency)");
      expect_explain(&ex, "b2", "fusion_id split by dependency");
    }
    lines_free(&ex);
    cf_graph_destroy(g);
    sb_free(&b);
  }
}

/* two ops of one fusion_id that depend on each other cannot be fused */
static void test_fusion_id_cycle_split(void **state) {
  (void)state;
  static const char xml[] =
      "<graph name='cyc' world_size='2'>\n"
      "  <node name='x' op='Input' dtype='float32' shape='16'/>\n"
      "  <node name='a1' op='AllReduce' fusion='2' fusion_id='0'><input ref='x'/></node>\n"
      "  <node name='h' op='Opaque' type='Gelu' dtype='float32' shape='16'><input "
      "ref='a1'/></node>\n"
      "  <node name='a2' op='AllReduce' fusion='2' fusion_id='0'><input ref='h'/></node>\n"
      "  <node name='o' op='Output'><input ref='a2'/></node>\n"
      "</graph>\n";
  cf_graph *g = parse(xml);
  lines ex = {0};
  fuse_ok(g, NULL, NULL, &ex);
  assert_int_equal(count_op(g, CF_OP_FUSEDALLREDUCE), 0);
  expect_alone(g, "a1", CF_OP_ALLREDUCE);
  expect_alone(g, "a2", CF_OP_ALLREDUCE);
  expect_explain(&ex, "a1",
                 "stays alone: fusion_id=0 is shared with 'a2', but 'a2' depends on collective "
                 "'a1' (fusing them would make a cycle)");
  expect_explain(&ex, "a2",
                 "stays alone: fusion_id=0 is shared with 'a1', but 'a2' depends on collective "
                 "'a1' (fusing them would make a cycle)");
  lines_free(&ex);
  cf_graph_destroy(g);

  /* the same with fusion=1 */
  static const char xml1[] = "<graph name='cyc1' world_size='2'>\n"
                             "  <node name='x' op='Input' dtype='float32' shape='16'/>\n"
                             "  <node name='a1' op='AllReduce'><input ref='x'/></node>\n"
                             "  <node name='a2' op='AllReduce'><input ref='a1'/></node>\n"
                             "</graph>\n";
  g = parse(xml1);
  fuse_ok(g, NULL, "bytes:1G", &ex);
  assert_int_equal(count_op(g, CF_OP_FUSEDALLREDUCE), 0);
  expect_explain(&ex, "a1",
                 "stays alone: fusing it with 'a2' would make a cycle ('a2' depends on "
                 "collective 'a1')");
  lines_free(&ex);
  cf_graph_destroy(g);
}

/* Grouping beyond equal depth: collectives that no path joins share a
 * bucket at any depths (XLA's CrossCombineGroupCycle: crs00 at depth 0 with
 * crs11 at depth 1), but never when a bucket already made would close a
 * cycle: here sums x (depth 0) and y (depth 1) fuse, and then the maxes q
 * (depth 0) and p (depth 1) may not, as q -> y ~ x -> p through the sum
 * bucket. A fusion_id is no longer split by a depth that no path makes. */
static void test_group_beyond_depth(void **state) {
  (void)state;
  static const char xml[] =
      "<graph name='beyond' world_size='2'>\n"
      "  <node name='i' op='Input' dtype='float32' shape='16'/>\n"
      "  <node name='x' op='AllReduce'><input ref='i'/></node>\n"
      "  <node name='p' op='AllReduce' reduction='max'><input ref='x'/></node>\n"
      "  <node name='q' op='AllReduce' reduction='max'><input ref='i'/></node>\n"
      "  <node name='y' op='AllReduce'><input ref='q'/></node>\n"
      "  <node name='op' op='Output'><input ref='p'/></node>\n"
      "  <node name='oy' op='Output'><input ref='y'/></node>\n"
      "</graph>\n";
  cf_graph *g = parse(xml);
  lines ex = {0};
  fuse_ok(g, NULL, "bytes:1G", &ex);
  BUCKETS(g, CF_OP_FUSEDALLREDUCE, "x,y");
  expect_alone(g, "p", CF_OP_ALLREDUCE);
  expect_alone(g, "q", CF_OP_ALLREDUCE);
  expect_explain(&ex, "q", "stays alone: fusing it with 'p' would make a cycle");
  lines_free(&ex);
  cf_graph_destroy(g);

  static const char xml2[] =
      "<graph name='fid' world_size='2'>\n"
      "  <node name='i' op='Input' dtype='float32' shape='16'/>\n"
      "  <node name='a' op='AllReduce' fusion='2' fusion_id='1'><input ref='i'/></node>\n"
      "  <node name='b' op='AllReduce' fusion='2' fusion_id='0'><input ref='a'/></node>\n"
      "  <node name='c' op='AllReduce' fusion='2' fusion_id='0'><input ref='i'/></node>\n"
      "  <node name='d' op='AllReduce' fusion='2' fusion_id='0'><input ref='b'/></node>\n"
      "</graph>\n";
  g = parse(xml2);
  fuse_ok(g, NULL, NULL, &ex);
  BUCKETS(g, CF_OP_FUSEDALLREDUCE, "c,b"); /* d depends on b: the fusion_id is split there */
  expect_alone(g, "d", CF_OP_ALLREDUCE);
  expect_explain(&ex, "c", "(fusion_id=0, 2 members, 128 bytes, fusion_id split by dependency)");
  lines_free(&ex);
  cf_graph_destroy(g);
}

/* a fusion_id group whose members are independent is fused even when one
 * of them depends on an unrelated collective (a tensor-parallel AllReduce
 * before a data-parallel gradient); --explain does not claim a split */
static void test_fusion_id_unrelated_dependency(void **state) {
  (void)state;
  static const char xml[] =
      "<graph name='tpdp' world_size='4'>\n"
      "  <group name='tp' ranks='0,1'/>\n"
      "  <node name='x' op='Input' dtype='float32' shape='16'/>\n"
      "  <node name='w1' op='Input' dtype='float32' shape='16'/>\n"
      "  <node name='w2' op='Input' dtype='float32' shape='16'/>\n"
      "  <node name='tp1' op='AllReduce' group='tp'><input ref='x'/></node>\n"
      "  <node name='h1' op='Opaque' type='Grad' dtype='float32' shape='16'><input "
      "ref='tp1'/><input ref='w1'/></node>\n"
      "  <node name='tp2' op='AllReduce' group='tp'><input ref='h1'/></node>\n"
      "  <node name='h2' op='Opaque' type='Grad' dtype='float32' shape='16'><input "
      "ref='tp2'/><input ref='w2'/></node>\n"
      "  <node name='d0' op='AllReduce' fusion='2' fusion_id='0'><input ref='w1'/></node>\n"
      "  <node name='d1' op='AllReduce' fusion='2' fusion_id='0'><input ref='h1'/></node>\n"
      "  <node name='d2' op='AllReduce' fusion='2' fusion_id='0'><input ref='h2'/></node>\n"
      "  <node name='o' op='Output'><input ref='h2'/></node>\n"
      "</graph>\n";
  cf_graph *g = parse(xml);
  lines ex = {0};
  fuse_ok(g, NULL, "bytes:1G", &ex);
  BUCKETS(g, CF_OP_FUSEDALLREDUCE, "d0,d1,d2");
  expect_alone(g, "tp1", CF_OP_ALLREDUCE);
  expect_alone(g, "tp2", CF_OP_ALLREDUCE);
  expect_explain(&ex, "d2", "(fusion_id=0, 3 members, 192 bytes)");
  expect_explain(&ex, "tp1",
                 "stays alone: fusing it with 'tp2' would make a cycle ('tp2' depends on "
                 "collective 'tp1')");
  lines_free(&ex);
  cf_graph_destroy(g);

  /* a fusion_id group entirely behind another collective is whole: no "split" */
  static const char xml2[] =
      "<graph name='behind' world_size='2'>\n"
      "  <node name='x' op='Input' dtype='float32' shape='16'/>\n"
      "  <node name='t' op='AllReduce' fusion='0'><input ref='x'/></node>\n"
      "  <node name='u' op='AllReduce' fusion='2' fusion_id='4'><input ref='x'/></node>\n"
      "  <node name='h' op='Add'><input ref='t'/><input ref='u'/></node>\n"
      "  <node name='a' op='AllReduce' fusion='2' fusion_id='5'><input ref='h'/></node>\n"
      "  <node name='b' op='AllReduce' fusion='2' fusion_id='5'><input ref='h'/></node>\n"
      "</graph>\n";
  g = parse(xml2);
  fuse_ok(g, NULL, NULL, &ex);
  BUCKETS(g, CF_OP_FUSEDALLREDUCE, "a,b");
  expect_explain(&ex, "a", "(fusion_id=5, 2 members, 128 bytes)");
  expect_explain(&ex, "u", "stays alone: no other AllReduce has fusion_id=4");
  lines_free(&ex);
  cf_graph_destroy(g);

  /* fusion=2 and fusion=1 buckets built together stay acyclic:
   * fid {a1,a2}, fusion=1 x,y with a1 -> x and y -> a2 */
  static const char xml3[] =
      "<graph name='mix' world_size='2'>\n"
      "  <node name='i0' op='Input' dtype='float32' shape='16'/>\n"
      "  <node name='i1' op='Input' dtype='float32' shape='16'/>\n"
      "  <node name='i2' op='Input' dtype='float32' shape='16'/>\n"
      "  <node name='z' op='AllReduce'><input ref='i2'/></node>\n"
      "  <node name='a1' op='AllReduce' fusion='2' fusion_id='0'><input ref='i0'/></node>\n"
      "  <node name='x' op='AllReduce'><input ref='a1'/></node>\n"
      "  <node name='y' op='AllReduce'><input ref='z'/></node>\n"
      "  <node name='a2' op='AllReduce' fusion='2' fusion_id='0'><input ref='y'/></node>\n"
      "  <node name='o1' op='Output'><input ref='x'/></node>\n"
      "  <node name='o2' op='Output'><input ref='a2'/></node>\n"
      "</graph>\n";
  g = parse(xml3);
  fuse_ok(g, NULL, "bytes:1G", &ex);
  assert_int_equal(cf_verify_structure(g), CF_OK);
  BUCKETS(g, CF_OP_FUSEDALLREDUCE, "a1,a2");
  expect_alone(g, "x", CF_OP_ALLREDUCE);
  expect_alone(g, "y", CF_OP_ALLREDUCE);
  expect_alone(g, "z", CF_OP_ALLREDUCE);
  lines_free(&ex);
  cf_graph_destroy(g);
}

/* rank_size stated or left to the group is one key; a ',' in a name is an
 * ordinary character (members is a list: its text writes it `\,`) */
static void test_key_details(void **state) {
  (void)state;
  static const char xml[] =
      "<graph name='keys' world_size='4'>\n"
      "  <group name='pair' ranks='0,1'/>\n"
      "  <node name='x' op='Input' dtype='float32' shape='4'/>\n"
      "  <node name='y' op='Input' dtype='float32' shape='4'/>\n"
      "  <node name='a,b' op='AllReduce'><input ref='x'/></node>\n"
      "  <node name='c' op='AllReduce' rank_size='4'><input ref='x'/></node>\n"
      "  <node name='d' op='AllReduce'><input ref='y'/></node>\n"
      "  <node name='e' op='AllReduce' group='hccl_world_group'><input ref='y'/></node>\n"
      "  <node name='p1' op='AllReduce' group='pair' rank_size='2' fusion='2' fusion_id='0'><input "
      "ref='x'/></node>\n"
      "  <node name='p2' op='AllReduce' group='pair' fusion='2' fusion_id='0'><input "
      "ref='y'/></node>\n"
      "</graph>\n";
  cf_graph *g = parse(xml);
  lines ex = {0};
  fuse_ok(g, NULL, NULL, &ex);
  BUCKETS(g, CF_OP_FUSEDALLREDUCE, "a\\,b,c,d,e", "p1,p2");
  cf_strs m = cf_node_strs(bucket_with(g, "a\\,b,c,d,e"), CF_A_MEMBERS);
  assert_int_equal(m.n, 4);
  assert_string_equal(m.v[0], "a,b");
  expect_explain(&ex, "a,b", "-> 'allreduce_bucket_1'");
  assert_string_equal(cf_node_group(bucket_with(g, "p1,p2")), "pair");
  lines_free(&ex);
  cf_graph_destroy(g);
}

static void test_fingerprint(void **state) {
  (void)state;
  cf_graph *g = parse(fid_graph);
  fuse_ok(g, NULL, NULL, NULL);
  assert_null(g->fingerprint);
  assert_int_equal(cf_graph_seal(g), CF_OK);
  char fp[17];
  cf_graph_fingerprint(g, fp);
  assert_string_equal(g->fingerprint, fp);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_non_null(f);
  assert_int_equal(cf_xml_write(g, f), CF_OK);
  fclose(f);
  char attr[64];
  snprintf(attr, sizeof attr, "fingerprint=\"%s\"", fp);
  assert_non_null(strstr(text, attr));

  /* read back: same graph, same fingerprint; compiling again changes nothing */
  cf_graph *r = parse(text);
  assert_string_equal(r->fingerprint, fp);
  assert_int_equal(r->n_nodes, g->n_nodes);
  assert_int_equal(cf_graph_verify(r, NULL), CF_OK);
  fuse_ok(r, NULL, NULL, NULL);
  assert_int_equal(r->n_nodes, g->n_nodes);
  cf_graph_fingerprint(r, fp);
  assert_string_equal(fp, g->fingerprint);
  cf_graph_destroy(r);

  /* the fingerprint differs from the unfused graph's */
  cf_graph *u = parse(fid_graph);
  char ufp[17];
  cf_graph_fingerprint(u, ufp);
  assert_string_not_equal(ufp, g->fingerprint);
  cf_graph_destroy(u);

  /* tampering: a forged fingerprint, a changed reduction, a changed size */
  char *t1 = strdup(text);
  memcpy(strstr(t1, fp), "0123456789abcdef", 16);
  r = (cf_graph *)1;
  ASSERT_ERR(cf_graph_parse(ctx, "t1.xml", t1, strlen(t1), &r), CF_ERR_INVALID,
             "t1.xml: error: fingerprint 0123456789abcdef does not match the graph's collectives");
  assert_null(r);
  free(t1);

  char *t2 = strdup(text);
  char *fused = strstr(t2, "op=\"FusedAllReduce\" reduction=\"mean\"");
  assert_non_null(fused);
  memcpy(strstr(fused, "\"mean\""), "\"max\" ", 6);
  ASSERT_ERR(cf_graph_parse(ctx, "t2.xml", t2, strlen(t2), &r), CF_ERR_INVALID,
             "the graph was changed after it was compiled");
  free(t2);

  char *t3 = strdup(text);
  /* s feeds only a bucket: its new size changes the bucket's bytes */
  char *qs = strstr(t3, "name=\"s\" op=\"Input\" dtype=\"float32\" shape=\"25\"");
  assert_non_null(qs);
  memcpy(strstr(qs, "25"), "24", 2);
  ASSERT_ERR(cf_graph_parse(ctx, "t3.xml", t3, strlen(t3), &r), CF_ERR_INVALID,
             "does not match the graph's collectives");
  free(t3);

  /* without a fingerprint the edited graph is just a graph */
  char *t4 = strdup(text);
  char *fa = strstr(t4, attr);
  memmove(fa, fa + strlen(attr), strlen(fa + strlen(attr)) + 1);
  r = parse(t4);
  assert_null(r->fingerprint);
  cf_graph_destroy(r);
  free(t4);

  free(text);
  cf_graph_destroy(g);
}

/* ================= property tests over random DAGs ================= */

typedef struct xrng {
  uint64_t s;
} xrng;

static uint64_t xnext(xrng *r) {
  uint64_t x = r->s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return r->s = x;
}

static int xint(xrng *r, int n) { return (int)(xnext(r) % (uint64_t)n); }

typedef struct gval {
  int dt; /* 0 float32, 1 bfloat16 */
  int rank;
  int64_t d[CF_MAX_RANK];
  int users;
  int node, port; /* the node and output port holding it */
} gval;

static const char *const dt_name[] = {"float32", "bfloat16"};

static int64_t gval_elems(const gval *v) {
  int64_t e = 1;
  for (int i = 0; i < v->rank; i++)
    e *= v->d[i];
  return e;
}

static void shape_text(const gval *v, char *buf, size_t len) {
  size_t o = 0;
  buf[0] = 0;
  for (int i = 0; i < v->rank; i++)
    o += (size_t)snprintf(buf + o, len - o, i ? ",%lld" : "%lld", (long long)v->d[i]);
}

static void random_shape(xrng *r, gval *v) {
  static const int64_t d0[] = {4, 8, 16, 32, 64, 128, 256};
  static const int64_t d1[] = {1, 2, 3, 5, 8};
  v->dt = xint(r, 2);
  v->rank = 1 + xint(r, 2);
  v->d[0] = d0[xint(r, 7)];
  v->d[1] = d1[xint(r, 5)];
  v->users = 0;
}

/* fusion attribute text: default (absent), 0, 1 or 2 with a fusion_id */
static void fusion_attr(xrng *r, char *buf, size_t len, int omit_pct) {
  int k = xint(r, 100);
  if (k < omit_pct)
    buf[0] = 0;
  else if ((k = xint(r, 10)) < 2)
    snprintf(buf, len, " fusion='0'%s", xint(r, 2) ? " fusion_id='1'" : "");
  else if (k < 6)
    snprintf(buf, len, " fusion='1'");
  else
    snprintf(buf, len, " fusion='2' fusion_id='%d'", xint(r, 3));
}

/* operand text for value k */
static void add_ref(sb *b, const gval *v) {
  if (v->port)
    sb_add(b, "<input ref='n%d' port='%d'/>", v->node, v->port);
  else
    sb_add(b, "<input ref='n%d'/>", v->node);
}

/* A random DAG that verifies: Inputs, Add and Opaque compute (some Opaque
 * with two outputs, read through ports), AllReduce, AllGather and
 * ReduceScatter with random fusion modes, fusion_ids, groups, reductions
 * and layouts, operands drawn from every value before (so collectives
 * depend on collectives, directly or through compute), Outputs on sinks. */
static char *random_graph(xrng *r) {
  enum { MAXV = 96 };
  gval v[MAXV];
  int nv = 0, nn = 0;
  int target = 20 + xint(r, 41);
  int inputs = 2 + xint(r, 4);
  char sh[96], sh2[96], fa[64];
  sb b = {0};
  sb_add(&b, "<graph name='rnd' world_size='4'>\n  <group name='pair' ranks='0,1'/>\n");
  while (nn < target && nv < MAXV - 1) {
    int kind = nn < inputs ? 0 : xint(r, 100);
    gval out;
    int i = nn++;
    if (kind < 8 || i < inputs) { /* Input */
      random_shape(r, &out);
      shape_text(&out, sh, sizeof sh);
      sb_add(&b, "  <node name='n%d' op='Input' dtype='%s' shape='%s'/>\n", i, dt_name[out.dt], sh);
    } else if (kind < 18) { /* Add of two values of one type */
      int a = xint(r, nv), c[MAXV], nc = 0;
      for (int k = 0; k < nv; k++)
        if (v[k].dt == v[a].dt && v[k].rank == v[a].rank &&
            memcmp(v[k].d, v[a].d, sizeof(int64_t) * (size_t)v[a].rank) == 0)
          c[nc++] = k;
      int w = c[xint(r, nc)];
      out = v[a];
      v[a].users++, v[w].users++;
      sb_add(&b, "  <node name='n%d' op='Add'>", i);
      add_ref(&b, &v[a]);
      add_ref(&b, &v[w]);
      sb_add(&b, "</node>\n");
    } else if (kind < 36) { /* Opaque with 1-3 operands, 1 or 2 outputs */
      int k = 1 + xint(r, 3), ops[3];
      for (int j = 0; j < k; j++)
        ops[j] = xint(r, nv), v[ops[j]].users++;
      if (xint(r, 2)) {
        out = v[ops[0]];
        if (out.rank > 2) out.rank = 2;
      } else {
        random_shape(r, &out);
      }
      shape_text(&out, sh, sizeof sh);
      if (xint(r, 4) == 0) {
        gval two;
        random_shape(r, &two);
        shape_text(&two, sh2, sizeof sh2);
        sb_add(&b, "  <node name='n%d' op='Opaque' type='Split'>", i);
        for (int j = 0; j < k; j++)
          add_ref(&b, &v[ops[j]]);
        sb_add(&b, "<output dtype='%s' shape='%s'/><output dtype='%s' shape='%s'/></node>\n",
               dt_name[out.dt], sh, dt_name[two.dt], sh2);
        out.node = i, out.port = 0, out.users = 0;
        v[nv++] = out;
        two.node = i, two.port = 1, two.users = 0;
        v[nv++] = two;
        continue;
      }
      sb_add(&b, "  <node name='n%d' op='Opaque' type='Op%d' dtype='%s' shape='%s'>", i, xint(r, 5),
             dt_name[out.dt], sh);
      for (int j = 0; j < k; j++)
        add_ref(&b, &v[ops[j]]);
      sb_add(&b, "</node>\n");
    } else {
      int coll = kind < 70 ? 0 : kind < 85 ? 1 : 2; /* AllReduce, AllGather, ReduceScatter */
      bool pair = xint(r, 10) < 3;
      int gs = pair ? 2 : 4;
      char grp[64];
      snprintf(grp, sizeof grp, "%s%s", pair ? " group='pair'" : "",
               xint(r, 8) == 0 ? (pair ? " rank_size='2'" : " rank_size='4'") : "");
      int a = -1;
      for (int tries = 0; tries < 12 && a < 0 && coll; tries++) {
        int k = xint(r, nv);
        if (coll == 1 && v[k].rank <= 3 && gval_elems(&v[k]) <= 4096) a = k;
        if (coll == 2 && v[k].rank >= 1 && v[k].d[0] % gs == 0) a = k;
      }
      if (a < 0) coll = 0, a = xint(r, nv);
      out = v[a];
      v[a].users++;
      const char *red = xint(r, 2) ? " reduction='max'" : "";
      if (coll == 0) {
        fusion_attr(r, fa, sizeof fa, 20);
        sb_add(&b, "  <node name='n%d' op='AllReduce'%s%s%s>", i, red, grp, fa);
      } else if (coll == 1) {
        fusion_attr(r, fa, sizeof fa, 30);
        int lay = xint(r, 3); /* default (stack), stack, concat */
        if (lay == 2) {
          out.d[0] *= gs;
        } else {
          memmove(out.d + 1, out.d, sizeof(int64_t) * (size_t)out.rank);
          out.d[0] = gs;
          out.rank++;
        }
        sb_add(&b, "  <node name='n%d' op='AllGather'%s%s%s>", i,
               lay == 0   ? ""
               : lay == 1 ? " layout='stack'"
                          : " layout='concat'",
               grp, fa);
      } else {
        fusion_attr(r, fa, sizeof fa, 30);
        out.d[0] /= gs;
        sb_add(&b, "  <node name='n%d' op='ReduceScatter'%s%s%s>", i, red, grp, fa);
      }
      add_ref(&b, &v[a]);
      sb_add(&b, "</node>\n");
    }
    out.node = i, out.port = 0, out.users = 0;
    v[nv++] = out;
  }
  for (int k = 0; k < nv; k++)
    if (!v[k].users) {
      sb_add(&b, "  <node name='out%d' op='Output'>", k);
      add_ref(&b, &v[k]);
      sb_add(&b, "</node>\n");
    }
  sb_add(&b, "</graph>\n");
  return b.s;
}

/* anc[v] = every node with a path to v, as bitsets of w words */
static uint64_t *ancestors(const cf_graph *g, int *w) {
  *w = (g->n_nodes + 63) / 64;
  uint64_t *a = calloc((size_t)g->n_nodes * (size_t)*w + 1, sizeof(uint64_t));
  assert_non_null(g->topo);
  for (int k = 0; k < g->n_nodes; k++) {
    int v = g->topo[k];
    uint64_t *av = a + (size_t)v * (size_t)*w;
    const cf_node *n = &g->nodes[v];
    for (int j = 0; j < n->n_in; j++) {
      int u = n->in[j].node;
      const uint64_t *au = a + (size_t)u * (size_t)*w;
      for (int x = 0; x < *w; x++)
        av[x] |= au[x];
      av[u / 64] |= (uint64_t)1 << (u % 64);
    }
  }
  return a;
}

static bool reaches(const uint64_t *anc, int w, int from, int to) {
  return (anc[(size_t)to * (size_t)w + (size_t)(from / 64)] >> (from % 64)) & 1;
}

typedef struct prop_spec {
  const char *split;
  cf_split sp;
  bool index; /* fuse-allreduce with this, the other kinds with auto */
} prop_spec;

/* gradient-ready position of a collective: its producer's place in the graph */
static int ready_pos(const cf_graph *g, int v) { return g->nodes[v].in[0].node; }

static bool same_value(const cf_value *a, const cf_value *b) {
  return a->dtype == b->dtype && cf_shape_equal(&a->shape, &b->shape);
}

/* check one fused graph g against the original g0 */
static void check_fused(const cf_graph *g0, const uint64_t *anc0, int w0, cf_graph *g,
                        const prop_spec *ps, bool round_trip, const char *xml) {
  int n0 = g0->n_nodes;
  int *map = malloc((size_t)n0 * sizeof(int)), *port = malloc((size_t)n0 * sizeof(int));
  int *owner = malloc((size_t)n0 * sizeof(int));
  bool *claimed = calloc((size_t)g->n_nodes + 1, sizeof(bool));
  for (int i = 0; i < n0; i++)
    map[i] = port[i] = owner[i] = -1;

  assert_int_equal(cf_verify_structure(g), CF_OK); /* acyclic, well formed */
  assert_int_equal(cf_infer(g), CF_OK);

  /* members of each fused node: original collectives of the base kind */
  int n_fused = 0, n_members = 0;
  for (int f = 0; f < g->n_nodes; f++) {
    const cf_node *F = &g->nodes[f];
    if (!is_fused(F->op)) continue;
    n_fused++;
    const char *mem = attr_text(F, CF_A_MEMBERS, NULL);
    assert_non_null(mem);
    int cnt = list_count(mem);
    if (cnt < 2 || cnt != F->n_in) fail_msg("%s: %d members, %d operands", F->name, cnt, F->n_in);
    n_members += cnt;
    /* the members share kind, key and fusion mode */
    int first = -1;
    int64_t sum = 0;
    const char *p = mem;
    for (int k = 0; k < cnt; k++) {
      char nm[64];
      size_t len = strcspn(p, ",");
      assert_true(len < sizeof nm);
      memcpy(nm, p, len);
      nm[len] = 0;
      p += len + (p[len] == ',');
      int o = cf_graph_find(g0, nm);
      if (o < 0) fail_msg("%s: member '%s' is not an original node", F->name, nm);
      const cf_node *M = &g0->nodes[o];
      if (M->op != base_of(F->op))
        fail_msg("%s: member '%s' is a %s", F->name, nm, cf_op_table[M->op].name);
      if (owner[o] >= 0) fail_msg("'%s' is in two buckets", nm);
      owner[o] = f;
      map[o] = f;
      port[o] = k;
      sum += cf_node_comm_bytes(g0, M);
      int64_t fu = cf_node_fusion(M);
      if (fu == 0) fail_msg("fusion=0 collective '%s' was fused into %s", nm, F->name);
      if (first < 0) {
        first = o;
        assert_int_equal(cf_node_fusion(F), fu);
        if (fu == 2) {
          assert_int_equal(cf_node_int(F, CF_A_FUSION_ID, -1), cf_node_int(M, CF_A_FUSION_ID, -1));
          char reason[64];
          snprintf(reason, sizeof reason, "fusion_id=%lld",
                   (long long)cf_node_int(M, CF_A_FUSION_ID, -1));
          assert_string_equal(cf_node_str(F, CF_A_REASON, ""), reason);
        } else {
          assert_string_equal(cf_node_str(F, CF_A_REASON, ""), "split");
        }
        assert_string_equal(cf_node_group(F), cf_node_group(M));
        if (F->op != CF_OP_FUSEDALLGATHER)
          assert_int_equal(cf_node_reduction(F), cf_node_reduction(M));
        else
          assert_int_equal(cf_node_layout(F), cf_node_layout(M));
      }
      const cf_node *M0 = &g0->nodes[first];
      if (cf_node_fusion(M) != cf_node_fusion(M0)) fail_msg("%s mixes fusion modes", F->name);
      if (fu == 2 && cf_node_int(M, CF_A_FUSION_ID, -1) != cf_node_int(M0, CF_A_FUSION_ID, -1))
        fail_msg("%s mixes fusion_ids", F->name);
      if (strcmp(cf_node_group(M), cf_node_group(M0)) ||
          cf_node_reduction(M) != cf_node_reduction(M0) ||
          cf_node_layout(M) != cf_node_layout(M0) ||
          cf_node_int(M, CF_A_DIM, 0) != cf_node_int(M0, CF_A_DIM, 0) ||
          /* AllGather buckets mix dtypes (bytes) unless the split says same_dtype */
          ((F->op != CF_OP_FUSEDALLGATHER || ps->sp.same_dtype) &&
           g0->nodes[M->in[0].node].out[M->in[0].port].dtype !=
               g0->nodes[M0->in[0].node].out[M0->in[0].port].dtype))
        fail_msg("%s: '%s' and '%s' differ in group, reduction, layout, dim or dtype", F->name,
                 nm, M0->name);
      /* each result keeps the member's type */
      if (!same_value(&F->out[k], &M->out[0])) fail_msg("%s port %d changed type", F->name, k);
    }
    /* offsets: one per member, 64-byte aligned, in order, not overlapping */
    const char *offs = attr_text(F, CF_A_OFFSETS, NULL);
    assert_non_null(offs);
    assert_int_equal(list_count(offs), cnt);
    int64_t end = 0;
    p = offs;
    for (int k = 0; k < cnt; k++) {
      char *e;
      long long o = strtoll(p, &e, 10);
      assert_true(o % 64 == 0);
      assert_true(o >= end);
      if (k == 0) assert_int_equal(o, 0);
      end = o + operand_bytes(g, F, k);
      p = *e ? e + 1 : e;
    }
    /* caps */
    if (cf_node_fusion(F) == 1 && ps->sp.kind == CF_SPLIT_BYTES) {
      if (sum > ps->sp.cap)
        fail_msg("%s: %lld bytes above the cap %lld", F->name, (long long)sum,
                 (long long)ps->sp.cap);
      if (ps->sp.count && cnt > ps->sp.count) fail_msg("%s: %d members above count", F->name, cnt);
    }
  }

  /* every original node is in g, under its name, unless it was fused */
  for (int i = 0; i < n0; i++) {
    int j = cf_graph_find(g, g0->nodes[i].name);
    if (owner[i] >= 0) {
      if (j >= 0 && !is_fused(g->nodes[j].op))
        fail_msg("'%s' is both fused and alone", g0->nodes[i].name);
      continue;
    }
    if (j < 0 || g->nodes[j].op != g0->nodes[i].op) fail_msg("'%s' was lost", g0->nodes[i].name);
    map[i] = j;
    port[i] = -1;
    if (claimed[j]) fail_msg("'%s' claimed twice", g0->nodes[i].name);
    claimed[j] = true;
  }
  assert_int_equal(g->n_nodes, n0 - n_members + n_fused);

  /* every operand is the original one (through the bucket's port) */
  for (int i = 0; i < n0; i++) {
    const cf_node *o = &g0->nodes[i];
    const cf_node *n = &g->nodes[map[i]];
    for (int j = 0; j < o->n_in; j++) {
      int u = o->in[j].node;
      cf_ref want = port[u] >= 0 ? (cf_ref){map[u], port[u]} : (cf_ref){map[u], o->in[j].port};
      cf_ref have = owner[i] >= 0 ? n->in[port[i]] : n->in[j];
      if (port[u] >= 0) assert_int_equal(o->in[j].port, 0);
      if (have.node != want.node || have.port != want.port)
        fail_msg("operand %d of '%s' is %s:%d, want %s:%d\n%s", j, o->name,
                 g->nodes[have.node].name, have.port, g->nodes[want.node].name, want.port, xml);
    }
    if (owner[i] < 0) {
      assert_int_equal(n->n_in, o->n_in);
      assert_int_equal(n->n_out, o->n_out);
      for (int k = 0; k < o->n_out; k++)
        assert_true(same_value(&n->out[k], &o->out[k]));
    }
  }

  /* reachability: every path of the original graph is still there */
  int w1;
  uint64_t *anc1 = ancestors(g, &w1);
  for (int y = 0; y < n0; y++)
    for (int x = 0; x < n0; x++) {
      if (!reaches(anc0, w0, x, y)) continue;
      if (map[x] == map[y])
        fail_msg("'%s' reaches '%s' but they share a bucket", g0->nodes[x].name, g0->nodes[y].name);
      if (!reaches(anc1, w1, map[x], map[y]))
        fail_msg("path '%s' -> '%s' lost\n%s", g0->nodes[x].name, g0->nodes[y].name, xml);
    }
  free(anc1);

  /* same collective bytes; fewer or as many collectives */
  cf_graph_stats s0, s1;
  cf_graph_stats_compute(g0, &s0);
  cf_graph_stats_compute(g, &s1);
  assert_int_equal(s1.comm_bytes, s0.comm_bytes);
  assert_int_equal(s1.collectives, s0.collectives - n_members + n_fused);

  /* AllReduce with fusion=1: the first bucket, size and index segments
   * (computed here in ready order, the graph order of the producers) */
  int na = 0, *ar = malloc((size_t)n0 * sizeof(int) + 1);
  for (int i = 0; i < n0; i++)
    if (g0->nodes[i].op == CF_OP_ALLREDUCE && cf_node_fusion(&g0->nodes[i]) == 1) ar[na++] = i;
  for (int a = 1; a < na; a++) /* insertion sort by ready position, then node */
    for (int b = a; b > 0; b--) {
      int x = ar[b - 1], y = ar[b];
      if (ready_pos(g0, x) < ready_pos(g0, y) || (ready_pos(g0, x) == ready_pos(g0, y) && x < y))
        break;
      ar[b - 1] = y, ar[b] = x;
    }
  if (na && ps->sp.kind == CF_SPLIT_BYTES && ps->sp.first && owner[ar[0]] >= 0) {
    int64_t sum = 0;
    for (int i = 0; i < n0; i++)
      if (owner[i] == owner[ar[0]]) sum += cf_node_comm_bytes(g0, &g0->nodes[i]);
    if (sum > ps->sp.first)
      fail_msg("first bucket %lld bytes above first=%lld", (long long)sum, (long long)ps->sp.first);
  }
  if (na && (ps->sp.kind == CF_SPLIT_SIZE || ps->sp.kind == CF_SPLIT_INDEX)) {
    int *seg = calloc((size_t)n0, sizeof(int));
    double total = 0, cum = 0;
    for (int k = 0; k < na; k++)
      total += (double)cf_node_comm_bytes(g0, &g0->nodes[ar[k]]);
    for (int k = 0, s = 0; k < na; k++) {
      if (ps->sp.kind == CF_SPLIT_INDEX) {
        while (k > ps->sp.idx[s])
          s++;
      } else {
        cum += (double)cf_node_comm_bytes(g0, &g0->nodes[ar[k]]);
        double bound = 0;
        for (int t = 0; t <= s; t++)
          bound += total * ps->sp.pct[t] / 100.0;
        while (s < ps->sp.n - 1 && cum > bound * (1 + 1e-12))
          bound += total * ps->sp.pct[++s] / 100.0;
      }
      seg[ar[k]] = s;
    }
    for (int k = 0; k < na; k++)
      for (int l = 0; l < na; l++)
        if (owner[ar[k]] >= 0 && owner[ar[k]] == owner[ar[l]] && seg[ar[k]] != seg[ar[l]])
          fail_msg("'%s' (segment %d) and '%s' (segment %d) share a bucket\n%s",
                   g0->nodes[ar[k]].name, seg[ar[k]], g0->nodes[ar[l]].name, seg[ar[l]], xml);
    free(seg);
  }
  free(ar);

  /* sealed, written and read back (every other run: parsing is slow
   * under the sanitizers) */
  assert_int_equal(cf_graph_seal(g), CF_OK);
  if (!round_trip) goto out;
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_int_equal(cf_xml_write(g, f), CF_OK);
  fclose(f);
  cf_graph *r = NULL;
  if (cf_graph_parse(ctx, "rt.xml", text, len, &r) != CF_OK)
    fail_msg("fused graph does not read back: %s\n%s", cf_context_errmsg(ctx), text);
  assert_int_equal(r->n_nodes, g->n_nodes);
  assert_string_equal(r->fingerprint, g->fingerprint);
  for (int i = 0; i < r->n_nodes; i++)
    assert_string_equal(r->nodes[i].name, g->nodes[i].name);
  cf_graph_destroy(r);
  free(text);
out:
  free(map), free(port), free(owner), free(claimed);
}

/* A copy of g0 built through the IR API (parsing is the slow part of this
 * test under the sanitizers; g0 itself was parsed). Strings stay in g0's
 * arena, which outlives the copy. */
static cf_graph *copy_graph(const cf_graph *g0) {
  cf_graph *g = NULL;
  assert_int_equal(cf_graph_new(ctx, g0->file, &g), CF_OK);
  g->name = g0->name;
  g->world_size = g0->world_size;
  g->version = g0->version;
  for (int i = 0; i < g0->n_groups; i++)
    assert_int_equal(cf_graph_add_group(g, g0->groups[i].name, g0->groups[i].ranks,
                                        g0->groups[i].n_ranks, g0->groups[i].line),
                     CF_OK);
  for (int i = 0; i < g0->n_nodes; i++) {
    const cf_node *n = &g0->nodes[i];
    int idx;
    assert_int_equal(cf_graph_add_node(g, n->name, n->op, n->line, &idx), CF_OK);
    assert_int_equal(idx, i);
  }
  for (int i = 0; i < g0->n_nodes; i++) {
    const cf_node *n = &g0->nodes[i];
    if (n->n_in) assert_int_equal(cf_node_set_inputs(g, i, n->n_in, n->in), CF_OK);
    for (int k = 0; k < n->n_attr; k++)
      assert_int_equal(cf_node_set_attr(g, i, &n->attr[k]), CF_OK);
    if (n->n_decl) {
      cf_decl *d = cf_arena_array(&g->arena, (size_t)n->n_decl, sizeof *d);
      memcpy(d, n->decl, (size_t)n->n_decl * sizeof *d);
      g->nodes[i].decl = d;
      g->nodes[i].n_decl = n->n_decl;
    }
  }
  assert_int_equal(cf_verify_structure(g), CF_OK);
  assert_int_equal(cf_infer(g), CF_OK);
  return g;
}

static void test_random_dags(void **state) {
  (void)state;
  /* a fixed seed; CF_TEST_SEED=N CF_TEST_GRAPHS=M explore other graphs */
  const char *seed = getenv("CF_TEST_SEED"), *count = getenv("CF_TEST_GRAPHS");
  xrng r = {seed ? strtoull(seed, NULL, 0) * 0x9e3779b97f4a7c15ull + 1 : 0x9e3779b97f4a7c15ull};
  int graphs = count ? atoi(count) : 300;
  int fused_total = 0, fused2 = 0, fused_ag = 0, fused_rs = 0, alone_ar1 = 0;
  for (int it = 0; it < graphs; it++) {
    char *xml = random_graph(&r);
    cf_graph *g0 = NULL;
    if (cf_graph_parse(ctx, "rnd.xml", xml, strlen(xml), &g0) != CF_OK)
      fail_msg("graph %d does not verify: %s\n%s", it, cf_context_errmsg(ctx), xml);
    int w0;
    uint64_t *anc0 = ancestors(g0, &w0);
    int n1 = 0;
    for (int i = 0; i < g0->n_nodes; i++)
      n1 += g0->nodes[i].op == CF_OP_ALLREDUCE && cf_node_fusion(&g0->nodes[i]) == 1;
    /* a valid index spec for the fusion=1 AllReduces */
    char index[96] = "index:0";
    if (n1 > 0) {
      int k = 1 + xint(&r, n1 < 8 ? n1 : 8), o = 6;
      int cut[8], nc = 0;
      for (int i = 0; i < n1 - 1 && nc < k - 1; i++)
        if (xint(&r, n1) < k) cut[nc++] = i;
      cut[nc++] = n1 - 1;
      for (int i = 0; i < nc; i++)
        o += snprintf(index + o, sizeof index - (size_t)o, i ? ",%d" : "%d", cut[i]);
    }
    prop_spec specs[] = {
        {.split = "auto"},
        {.split = "bytes:1K"},
        {.split = "bytes:4K,first=1K,count=3"},
        {.split = "bytes:2K,same_dtype"},
        {.split = "ddp:1K,first=256"},
        {.split = "ddp:2K,initial,same_dtype"},
        {.split = "size:50,50"},
        {.split = "size:10,20,30,40"},
        {.split = index, .index = true},
    };
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
      char why[256];
      assert_true(cf_split_parse(specs[s].split, &specs[s].sp, why, sizeof why));
      cf_graph *g = copy_graph(g0);
      lines ex = {0};
      cf_status st;
      if (specs[s].index) {
        st = fuse(g, "verify,infer,dce,fuse-allreduce", specs[s].split, &ex);
        if (!st) st = fuse(g, "fuse-allgather,fuse-reducescatter", "auto", &ex);
      } else {
        st = fuse(g, NULL, specs[s].split, &ex);
      }
      if (st)
        fail_msg("graph %d, --split %s: %s\n%s", it, specs[s].split, cf_context_errmsg(ctx), xml);
      /* one explain line per original collective */
      cf_graph_stats s0;
      cf_graph_stats_compute(g0, &s0);
      assert_int_equal(ex.n, s0.collectives);
      for (int i = 0; i < g0->n_nodes; i++) {
        const cf_node *n = &g0->nodes[i];
        if (!cf_op_is_collective(n->op)) continue;
        if (cf_node_fusion(n) == 0) expect_explain(&ex, n->name, "stays alone: fusion=0");
      }
      check_fused(g0, anc0, w0, g, &specs[s], (s + (size_t)it) % 2 == 0, xml);
      for (int i = 0; i < g->n_nodes; i++) {
        const cf_node *n = &g->nodes[i];
        fused_total += is_fused(n->op);
        fused2 += is_fused(n->op) && cf_node_fusion(n) == 2;
        fused_ag += n->op == CF_OP_FUSEDALLGATHER;
        fused_rs += n->op == CF_OP_FUSEDREDUCESCATTER;
        alone_ar1 += n->op == CF_OP_ALLREDUCE && cf_node_fusion(n) == 1;
      }
      lines_free(&ex);
      cf_graph_destroy(g);
    }
    free(anc0);
    cf_graph_destroy(g0);
    free(xml);
  }
  /* the generator exercises what it should */
  print_message(
      "random DAGs: %d graphs, %d fused nodes (%d by fusion_id, %d AllGather, %d ReduceScatter), "
      "%d fusion=1 AllReduce left alone\n",
      graphs, fused_total, fused2, fused_ag, fused_rs, alone_ar1);
  if (seed || count) return;
  assert_true(fused2 > 100 && fused_ag > 50 && fused_rs > 50 && fused_total > 1000 &&
              alone_ar1 > 100);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_split_parse),
      cmocka_unit_test(test_alltoall_buckets),
      cmocka_unit_test(test_any_dim),
      cmocka_unit_test(test_split_segments),
      cmocka_unit_test(test_split_format_and_cost),
      cmocka_unit_test(test_fusion0_never),
      cmocka_unit_test(test_fusion2_fusion_id),
      cmocka_unit_test(test_split_bytes),
      cmocka_unit_test(test_split_ready_order),
      cmocka_unit_test(test_split_size),
      cmocka_unit_test(test_split_index),
      cmocka_unit_test(test_split_auto),
      cmocka_unit_test(test_allgather_reducescatter),
      cmocka_unit_test(test_chains_global),
      cmocka_unit_test(test_fusion_id_cycle_split),
      cmocka_unit_test(test_fusion_id_unrelated_dependency),
      cmocka_unit_test(test_group_beyond_depth),
      cmocka_unit_test(test_key_details),
      cmocka_unit_test(test_fingerprint),
      cmocka_unit_test(test_random_dags),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
