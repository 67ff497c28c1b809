/* passes.h - the pass interface, the ordered registry and pipelines (one
 * header for the passes/ module).
 *
 * A pass is a const struct in its own file; its first comment says what it
 * requires and what it preserves. Passes mutate the graph in place and leave
 * it verified and inferred (the runner re-verifies after every pass when
 * CF_VERIFY_EACH_PASS is on, which it is in every non-Release build).
 */
#ifndef COLLFUSE_PASSES_H
#define COLLFUSE_PASSES_H

#include "../ir/ir.h"

/* ---- split.c: fusion=1 split strategies and the auto cost model ---- */

#define CF_MAX_SEGMENTS 8

typedef enum cf_split_kind {
  CF_SPLIT_AUTO,  /* cap chosen by the cost model (the default) */
  CF_SPLIT_BYTES, /* greedy buckets up to a hard byte cap (XLA's combine threshold) */
  CF_SPLIT_SIZE,  /* HCCL: percentages of the gradient bytes */
  CF_SPLIT_INDEX, /* HCCL: ascending gradient indices */
  CF_SPLIT_DDP    /* PyTorch DDP: a bucket closes once it reaches its limit */
} cf_split_kind;

typedef struct cf_split {
  cf_split_kind kind;
  int64_t cap;                     /* bytes: bucket cap */
  int64_t first;                   /* bytes: first bucket's cap, 0 = cap */
  int64_t count;                   /* bytes/auto: members per bucket, 0 = any */
  int n;                           /* size/index: segments */
  double pct[CF_MAX_SEGMENTS];     /* size */
  int64_t idx[CF_MAX_SEGMENTS];    /* index: last gradient of each segment */
  int64_t limit[CF_MAX_SEGMENTS];  /* ddp: the limits of buckets 1, 2, ..., the last repeats */
  bool initial;                    /* ddp: DDP's first assignment (parameter order) */
  bool same_dtype;                 /* any: AllGather and AllToAll buckets keep one dtype */
  bool any_dim;                    /* any: AllGathers / ReduceScatters of different dims share
                                    * buckets (XLA's combine_by_dim=false) */
  bool no_loops;                   /* any: collectives of a while's body or condition stay
                                    * alone (XLA's combine_while_loops=false) */
} cf_split;

/* Transport cost of one collective of b bytes: alpha + b / beta; the
 * backward pass makes gradients ready at gamma bytes per second. */
typedef struct cf_cost {
  double alpha_us;   /* fixed cost per collective, microseconds */
  double beta_gbps;  /* algorithm bandwidth, GB/s (1e9 bytes) */
  double gamma_gbps; /* gradient production rate, GB/s (default beta/2) */
} cf_cost;

#define CF_COST_DEFAULT_ALPHA_US 250.0
#define CF_COST_DEFAULT_BETA_GBPS 8.0

/* Parse "--split SPEC" / "--cost alpha_us,beta_GBps[,gamma_GBps]"; false
 * with why = "SPEC: what is wrong" (the caller names the flag or option). */
bool cf_split_parse(const char *spec, cf_split *out, char *why, size_t len);
bool cf_cost_parse(const char *spec, cf_cost *out, char *why, size_t len);
/* auto: split gradients (sizes in ready order) into consecutive buckets,
 * part[i] = bucket of gradient i from 0; returns the bucket count and the
 * model's exposed time in microseconds. */
int cf_split_auto_partition(const cf_cost *c, const int64_t *bytes, int n, int *part,
                            double *exposed_us);
/* The model's exposed time (us) of a partition (part non-decreasing). */
double cf_split_exposed(const cf_cost *c, const int64_t *bytes, int n, const int *part);
/* size/index: segment of each of n gradients (sizes in ready order); false
 * with why when the spec does not fit these gradients. */
bool cf_split_segments(const cf_split *s, const int64_t *bytes, int n, int *seg, char *why,
                       size_t len);
/* ddp: DDP's buckets over n gradients (sizes in ready order, one bucket
 * key): part[i] = bucket of gradient i from 0, non-decreasing; returns the
 * bucket count. */
int cf_split_ddp_partition(const cf_split *s, const int64_t *bytes, int n, int *part);
/* "bytes:25M" style text of a byte count ("25M", "1.5M", "4096"). */
char *cf_split_format_bytes(int64_t b, char *buf, size_t len);

typedef void (*cf_explain_fn)(void *user, const char *line);

typedef struct cf_pass_options {
  const char *split;       /* --split SPEC for fusion=1 (NULL: auto) */
  const char *cost;        /* --cost alpha_us,beta_GBps (NULL: measured_cost, else defaults) */
  const cf_cost *measured_cost; /* a profile's alpha/beta for the run's transport, or NULL */
  cf_explain_fn explain;   /* receives one line per collective, or NULL */
  void *explain_user;
  const char *target;      /* --target profile the result must meet (NULL: cpu) */
} cf_pass_options;

/* One --explain line through opt's sink (passes/explain.c); nothing without one. */
void cf_pass_explain(const cf_pass_options *opt, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

typedef struct cf_pass {
  const char *name;
  cf_status (*run)(cf_graph *g, const cf_pass_options *opt);
  const char *doc;
} cf_pass;

extern const cf_pass cf_pass_verify;
extern const cf_pass cf_pass_infer;
extern const cf_pass cf_pass_dce;
extern const cf_pass cf_pass_fuse_allreduce;
extern const cf_pass cf_pass_fuse_allgather;
extern const cf_pass cf_pass_fuse_reducescatter;
extern const cf_pass cf_pass_fuse_alltoall;
extern const cf_pass cf_pass_fuse_matmul_collective;

/* combine.c: the dependency-safe combiner behind the four bucketing passes.
 * kind is CF_OP_ALLREDUCE, CF_OP_ALLGATHER, CF_OP_REDUCESCATTER or CF_OP_ALLTOALL. */
cf_status cf_combine(cf_graph *g, const cf_pass_options *opt, cf_op kind);

/* merge_classes.c: grouping beyond equal depth. node_cls[v] is the class
 * of graph node v (-1: none); classes are antichains whose contraction
 * keeps g acyclic. Each class of family >= 0 is merged into the first
 * earlier class of its family that no path joins to it in the contracted
 * graph (with the merges so far): group[c] is the class c joined (c when
 * none). Too many classes: nothing merges. Needs g->topo. */
cf_status cf_merge_classes(cf_graph *g, const int *node_cls, int ncls, const int *family,
                           int *group);

#define CF_MAX_PIPELINE 32

typedef struct cf_pass_timing {
  const char *name;
  double ms;
} cf_pass_timing;

/* Registry, in pipeline order; NULL-terminated. */
extern const cf_pass *const cf_pass_registry[];
const cf_pass *cf_pass_find(const char *name);
/* "unknown pass 'NAME'" with the closest pass, else the list; returns buf. */
const char *cf_pass_unknown(const char *name, char *buf, size_t len);
/* True when every name of the comma list is a pass; else false with why
 * ("bad pass list" for an empty or overlong name; cf_pass_unknown's text,
 * and *unknown set when unknown is not NULL, for a name that is no pass). */
bool cf_pass_list_check(const char *list, char *why, size_t len, bool *unknown);
/* The default pipeline (everything) and the -O0 one (no fusion). */
extern const char cf_pipeline_default[];
extern const char cf_pipeline_O0[];
/* The pass list a pipeline name stands for: NULL and "default" the default
 * pipeline; "O0", "-O0" and "" cf_pipeline_O0 (verification and inference,
 * no fusion); anything else is a pass list and stands for itself. */
const char *cf_pipeline_list(const char *name);

/* Run a comma-separated list of passes; timing (may be NULL) receives up to
 * CF_MAX_PIPELINE entries and *n_timing their count. */
cf_status cf_passes_run(cf_graph *g, const char *list, const cf_pass_options *opt,
                        cf_pass_timing *timing, int *n_timing);

#endif /* COLLFUSE_PASSES_H */
