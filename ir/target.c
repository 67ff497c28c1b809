/* target.c - target profiles: one data table of each device's documented
 * limits, taken from the support tables of the Ascend API documents (TF
 * Adapter's npu.distribute.all_reduce, ATB's AllGatherOperation, HCCL's
 * HcclReduce, torch_npu.npu_mm_reduce_scatter_base; docs/format.md).
 *
 * A profile row says, per collective kind, whether the device has it at all,
 * which dtypes and reductions it takes, which dtypes forbid prod or allow only
 * sum, and for MatmulReduceScatter the world sizes and the k range. Kinds a
 * document does not describe for a device keep the permissive default.
 * Fused collectives are checked as the collective they fuse.
 *
 * torch_npu's MatmulReduceScatter adds three rules on the Atlas profiles:
 * comm_turn takes only 0 ("当前版本仅支持输入0"), the quantized form runs only
 * in comm_mode aiv (ai_cpu takes only the basic form), and on Atlas A2 every
 * fused matmul op (AllGatherMatmul, MatmulReduceScatter, MatmulAllReduce) in
 * comm_mode ai_cpu must use one communicator. The last is a rule over the
 * whole graph; cf_target_check_node checks everything else one node at a
 * time, so the fuse-matmul-collective pass can try a node before it builds it.
 */
#include "ir.h"

#include <stdio.h>
#include <string.h>

#define DT(x) (1u << CF_DT_##x)
#define RED(x) (1u << CF_RED_##x)
#define ALL_DT (((1u << CF_DT_COUNT) - 1) & ~1u) /* every valid dtype */
#define ALL_RED 0x1Fu

typedef struct kind_rule {
  bool unsupported;     /* the device has no such op */
  uint32_t dtypes;      /* allowed dtypes (0 = all) */
  uint32_t reds;        /* allowed reductions (0 = all) */
  uint32_t no_prod;     /* dtypes on which prod is not supported */
  uint32_t sum_only;    /* dtypes that allow only sum */
  const char *source;   /* where the rule comes from */
} kind_rule;

struct cf_target {
  const char *name;
  const char *desc;
  kind_rule k[CF_OP_COUNT]; /* by plain collective or fused matmul op */
  int mmrs_ws[8];       /* allowed world sizes, 0-terminated; empty = any */
  int64_t k_min, k_max; /* matmul k in [k_min, k_max); 0 = no limit */
  bool mc2_rules;       /* comm_turn 0 only, quantized form only in comm_mode aiv */
  bool mc2_one_group;   /* fused matmul ops in comm_mode ai_cpu share one communicator */
};

#define A2A3_ALLREDUCE                                                                     \
  {.dtypes = DT(INT8) | DT(INT32) | DT(FLOAT16) | DT(FLOAT32) | DT(BFLOAT16),              \
   .no_prod = DT(BFLOAT16), .source = "npu.distribute.all_reduce"}
#define ATB_ALLGATHER                                                                      \
  {.dtypes = DT(FLOAT16) | DT(FLOAT32) | DT(INT8) | DT(INT16) | DT(INT32) | DT(INT64) |    \
             DT(BFLOAT16),                                                                 \
   .source = "ATB AllGatherOperation"}
#define MMRS_DTYPES                                                                        \
  {.dtypes = DT(FLOAT16) | DT(BFLOAT16) | DT(INT8), .reds = RED(SUM),                      \
   .source = "torch_npu.npu_mm_reduce_scatter_base"}
#define NO(src) {.unsupported = true, .source = src}

static const cf_target targets[] = {
    {.name = "cpu", .desc = "collfuse's CPU executor: no device limits"},
    {.name = "atlas-a2",
     .desc = "Atlas A2 training/inference series",
     .k = {[CF_OP_ALLREDUCE] = A2A3_ALLREDUCE,
           [CF_OP_ALLGATHER] = ATB_ALLGATHER,
           [CF_OP_REDUCE] = {.no_prod = DT(INT16) | DT(BFLOAT16), .source = "HcclReduce"},
           [CF_OP_MATMULREDUCESCATTER] = MMRS_DTYPES},
     .mmrs_ws = {2, 4, 8},
     .k_min = 256,
     .k_max = 65535,
     .mc2_rules = true,
     .mc2_one_group = true},
    {.name = "atlas-a3",
     .desc = "Atlas A3 training/inference series",
     .k = {[CF_OP_ALLREDUCE] = A2A3_ALLREDUCE,
           [CF_OP_ALLGATHER] = ATB_ALLGATHER,
           [CF_OP_REDUCE] = {.no_prod = DT(INT16) | DT(BFLOAT16), .source = "HcclReduce"},
           [CF_OP_MATMULREDUCESCATTER] = MMRS_DTYPES},
     .mmrs_ws = {2, 4, 8, 16, 32},
     .k_min = 256,
     .k_max = 65535,
     .mc2_rules = true},
    {.name = "atlas-910",
     .desc = "Atlas training series (910)",
     .k = {[CF_OP_ALLREDUCE] = {.dtypes = DT(INT8) | DT(INT32) | DT(FLOAT16) | DT(FLOAT32),
                                .source = "npu.distribute.all_reduce"},
           [CF_OP_ALLGATHER] = NO("ATB AllGatherOperation"),
           [CF_OP_MATMULREDUCESCATTER] = NO("torch_npu.npu_mm_reduce_scatter_base"),
           [CF_OP_MATMULALLREDUCE] = NO("torch_npu.npu_mm_reduce_scatter_base"),
           [CF_OP_ALLGATHERMATMUL] = NO("torch_npu.npu_mm_reduce_scatter_base")}},
    {.name = "atlas-310p",
     .desc = "Atlas inference series (310P)",
     .k = {[CF_OP_ALLREDUCE] = {.dtypes =
                                    DT(INT8) | DT(INT16) | DT(INT32) | DT(FLOAT16) | DT(FLOAT32),
                                .sum_only = DT(INT16),
                                .source = "npu.distribute.all_reduce"},
           [CF_OP_ALLGATHER] = ATB_ALLGATHER,
           [CF_OP_REDUCE] = NO("HcclReduce"),
           [CF_OP_MATMULREDUCESCATTER] = NO("torch_npu.npu_mm_reduce_scatter_base"),
           [CF_OP_MATMULALLREDUCE] = NO("torch_npu.npu_mm_reduce_scatter_base"),
           [CF_OP_ALLGATHERMATMUL] = NO("torch_npu.npu_mm_reduce_scatter_base")}},
    {.name = "ascend-950",
     .desc = "Ascend 950PR/950DT (Atlas 350)",
     .k = {[CF_OP_ALLGATHER] = NO("ATB AllGatherOperation"),
           [CF_OP_REDUCE] = {.reds = RED(SUM) | RED(MAX) | RED(MIN), .source = "HcclReduce"},
           [CF_OP_MATMULREDUCESCATTER] = NO("torch_npu.npu_mm_reduce_scatter_base"),
           [CF_OP_MATMULALLREDUCE] = NO("torch_npu.npu_mm_reduce_scatter_base"),
           [CF_OP_ALLGATHERMATMUL] = NO("torch_npu.npu_mm_reduce_scatter_base")}},
};

#define N_TARGETS (sizeof targets / sizeof targets[0])

const char *cf_target_at(size_t i) { return i < N_TARGETS ? targets[i].name : NULL; }

const cf_target *cf_target_find(const char *name) {
  if (!name) return &targets[0];
  for (size_t i = 0; i < N_TARGETS; i++)
    if (strcmp(name, targets[i].name) == 0) return &targets[i];
  return NULL;
}

const char *cf_target_suggest(const char *name) {
  cf_suggest s;
  cf_suggest_init(&s, name);
  for (size_t i = 0; cf_target_at(i); i++)
    cf_suggest_add(&s, cf_target_at(i));
  return s.best;
}

const char *cf_target_profile_name(const cf_target *t) { return t->name; }

const char *cf_target_unknown(const char *name, char *buf, size_t len) {
  const char *near = cf_target_suggest(name);
  size_t o = (size_t)snprintf(buf, len, "unknown target '%s'", name);
  if (near) {
    if (o < len) snprintf(buf + o, len - o, "; did you mean '%s'?", near);
    return buf;
  }
  for (size_t i = 0; cf_target_at(i) && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, i ? ", %s" : " (one of: %s", cf_target_at(i));
  if (o < len) snprintf(buf + o, len - o, ")");
  return buf;
}

static cf_status violation(const cf_graph *g, const cf_node *n, const cf_target *t,
                           const kind_rule *r, const char *rule) {
  return cf_node_error(g, n, CF_ERR_INVALID, "target %s: %s (%s)", t->name, rule, r->source);
}

const char *cf_node_comm_mode(const cf_node *n) { return cf_node_str(n, CF_A_COMM_MODE, "ai_cpu"); }

bool cf_target_one_mc2_group(const cf_target *t) { return t && t->mc2_one_group; }

static const kind_rule *mmrs_source(const cf_target *t) { return &t->k[CF_OP_MATMULREDUCESCATTER]; }

cf_status cf_target_check_node(const cf_graph *g, const cf_node *n, const cf_target *t) {
  char rule[256];
  if (!cf_op_is_collective(n->op)) return CF_OK;
  cf_op k = cf_op_unfused(n->op);
  const kind_rule *r = &t->k[k];
  if (r->unsupported) {
    snprintf(rule, sizeof rule, "%s is not supported on %s", cf_op_table[k].name, t->desc);
    return violation(g, n, t, r, rule);
  }
  const cf_node *src = &g->nodes[n->in[0].node];
  cf_dtype dt = src->out[n->in[0].port].dtype;
  bool has_red = cf_op_reduces(n->op);
  cf_reduction red = cf_node_reduction(n);
  if (r->dtypes && !(r->dtypes & (1u << dt))) {
    snprintf(rule, sizeof rule, "%s does not support dtype %s", cf_op_table[k].name,
             cf_dtype_name(dt));
    return violation(g, n, t, r, rule);
  }
  if (has_red && r->reds && !(r->reds & (1u << red))) {
    snprintf(rule, sizeof rule, "%s does not support reduction %s", cf_op_table[k].name,
             cf_reduction_name(red));
    return violation(g, n, t, r, rule);
  }
  if (has_red && red == CF_RED_PROD && (r->no_prod & (1u << dt))) {
    snprintf(rule, sizeof rule, "%s does not support prod on %s", cf_op_table[k].name,
             cf_dtype_name(dt));
    return violation(g, n, t, r, rule);
  }
  if (has_red && red != CF_RED_SUM && (r->sum_only & (1u << dt))) {
    snprintf(rule, sizeof rule, "%s supports only sum on %s, not %s", cf_op_table[k].name,
             cf_dtype_name(dt), cf_reduction_name(red));
    return violation(g, n, t, r, rule);
  }
  if (t->mc2_rules && cf_op_table[n->op].cat == CF_CAT_FUSED_MATMUL) {
    int64_t turn = cf_node_int(n, CF_A_COMM_TURN, 0);
    if (turn != 0) {
      snprintf(rule, sizeof rule, "comm_turn=%lld: only 0 (automatic) is supported", (long long)turn);
      return violation(g, n, t, mmrs_source(t), rule);
    }
    if (dt == CF_DT_INT8 && strcmp(cf_node_comm_mode(n), "aiv") != 0) {
      snprintf(rule, sizeof rule, "the quantized form needs comm_mode=\"aiv\" (ai_cpu runs only the basic form)");
      return violation(g, n, t, mmrs_source(t), rule);
    }
  }
  if (k == CF_OP_MATMULREDUCESCATTER) {
    int64_t ws = cf_node_int(n, CF_A_WORLD_SIZE, 0);
    if (t->mmrs_ws[0]) {
      bool ok = false;
      char list[64] = "";
      size_t o = 0;
      for (int j = 0; j < 8 && t->mmrs_ws[j]; j++) {
        ok |= t->mmrs_ws[j] == ws;
        o += (size_t)snprintf(list + o, sizeof list - o, j ? ",%d" : "%d", t->mmrs_ws[j]);
      }
      if (!ok) {
        snprintf(rule, sizeof rule, "world_size=%lld not in {%s}", (long long)ws, list);
        return violation(g, n, t, r, rule);
      }
    }
    const cf_value *x2 = &g->nodes[n->in[1].node].out[n->in[1].port];
    int64_t kk = x2->shape.dims[0];
    if (t->k_max && (kk < t->k_min || kk >= t->k_max)) {
      snprintf(rule, sizeof rule, "k=%lld outside [%lld, %lld)", (long long)kk,
               (long long)t->k_min, (long long)t->k_max);
      return violation(g, n, t, r, rule);
    }
  }
  return CF_OK;
}

cf_status cf_target_check(const cf_graph *g, const cf_target *t) {
  cf_status st;
  const cf_node *first_mc2 = NULL; /* the first fused matmul op in comm_mode ai_cpu */
  for (int i = 0; i < g->n_nodes; i++) {
    const cf_node *n = &g->nodes[i];
    if ((st = cf_target_check_node(g, n, t))) return st;
    if (!t->mc2_one_group || cf_op_table[n->op].cat != CF_CAT_FUSED_MATMUL ||
        strcmp(cf_node_comm_mode(n), "ai_cpu") != 0)
      continue;
    if (!first_mc2) {
      first_mc2 = n;
    } else if (strcmp(cf_node_group(first_mc2), cf_node_group(n)) != 0) {
      char rule[512];
      snprintf(rule, sizeof rule,
               "fused matmul ops in comm_mode ai_cpu must share one communicator: group '%s' here, "
               "'%s' on '%s'",
               cf_node_group(n), cf_node_group(first_mc2), first_mc2->name);
      return violation(g, n, t, mmrs_source(t), rule);
    }
  }
  return CF_OK;
}
