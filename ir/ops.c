/* ops.c - the op and attribute tables generated from ops.def, and the
 * facts read from them: names and aliases, reductions and layouts by name,
 * an op's collective and flags, how many outputs a node has. The bottom of
 * ir/: the graph, the verifier, inference, suggestions and targets read
 * these, and nothing here calls back up.
 */
#include "ir.h"

#include <string.h>

#define A(id) (1u << CF_A_##id)
#define F(id) CF_OPF_##id
/* the attributes an op's flags imply: required, allowed */
#define FLAG_REQUIRED(flags) ((flags)&F(ROOTED) ? A(ROOT) : 0u)
#define FLAG_ALLOWED(flags) ((flags)&F(REDUCES) ? A(REDUCTION) : 0u)

const cf_op_info cf_op_table[CF_OP_COUNT] = {
    [CF_OP_INVALID] = {"Invalid", 0, 0, CF_CAT_COMPUTE, CF_OP_INVALID, 0, CF_LOOK_ROUNDED_BOX, 0,
                       0},
#define OP(id, nm, mn, mx, cat, coll, flags, look, req, allowed)                                   \
  [CF_OP_##id] = {nm,                                                                              \
                  mn,                                                                              \
                  mx,                                                                              \
                  CF_CAT_##cat,                                                                    \
                  CF_OP_##coll,                                                                    \
                  (flags),                                                                         \
                  CF_LOOK_##look,                                                                  \
                  (req) | FLAG_REQUIRED(flags),                                                    \
                  (req) | (allowed) | FLAG_REQUIRED(flags) | FLAG_ALLOWED(flags)},
#include "ops.def"
#undef OP
};

const cf_attr_info cf_attr_table[CF_A_COUNT] = {
#define ATTR(id, nm, kind, dflt, doc) [CF_A_##id] = {nm, CF_AK_##kind},
#include "ops.def"
#undef ATTR
};

const cf_op_alias cf_op_aliases[] = {
#define ALIAS(nm, id, layout) {nm, CF_OP_##id, layout},
#include "ops.def"
#undef ALIAS
};
const size_t cf_op_alias_count = sizeof cf_op_aliases / sizeof cf_op_aliases[0];

cf_op cf_op_lookup(const char *name, int *layout) {
  if (layout) *layout = -1;
  if (!name) return CF_OP_INVALID;
  for (int i = 1; i < CF_OP_COUNT; i++)
    if (strcmp(name, cf_op_table[i].name) == 0) return (cf_op)i;
  for (size_t i = 0; i < cf_op_alias_count; i++)
    if (strcmp(name, cf_op_aliases[i].name) == 0) {
      if (layout) *layout = cf_op_aliases[i].layout;
      return cf_op_aliases[i].op;
    }
  return CF_OP_INVALID;
}

const char *cf_op_alias_name(size_t i) {
  return i < cf_op_alias_count ? cf_op_aliases[i].name : NULL;
}

cf_attr_id cf_attr_lookup(const char *name) {
  for (int i = 0; i < CF_A_COUNT; i++)
    if (strcmp(name, cf_attr_table[i].name) == 0) return (cf_attr_id)i;
  return CF_A_COUNT;
}

static const char *red_names[CF_RED_COUNT] = {"sum", "mean", "max", "min", "prod"};

const char *cf_reduction_name(cf_reduction r) {
  return r >= 0 && r < CF_RED_COUNT ? red_names[r] : "?";
}

int cf_reduction_parse(const char *s) {
  for (int i = 0; i < CF_RED_COUNT; i++)
    if (strcmp(s, red_names[i]) == 0) return i;
  return -1;
}

const char *cf_layout_name(cf_layout l) { return l == CF_LAYOUT_CONCAT ? "concat" : "stack"; }

int cf_layout_parse(const char *s) {
  if (strcmp(s, "stack") == 0) return CF_LAYOUT_STACK;
  if (strcmp(s, "concat") == 0) return CF_LAYOUT_CONCAT;
  return -1;
}

cf_op cf_op_coll(cf_op op) { return cf_op_table[op].coll; }
bool cf_op_reduces(cf_op op) { return cf_op_table[op].flags & CF_OPF_REDUCES; }
bool cf_op_rooted(cf_op op) { return cf_op_table[op].flags & CF_OPF_ROOTED; }

cf_op cf_op_unfused(cf_op op) {
  return cf_op_table[op].cat == CF_CAT_FUSED_COLLECTIVE ? cf_op_table[op].coll : op;
}

cf_op cf_op_fused(cf_op coll) {
  for (int i = 1; i < CF_OP_COUNT; i++)
    if (cf_op_table[i].cat == CF_CAT_FUSED_COLLECTIVE && cf_op_table[i].coll == coll)
      return (cf_op)i;
  return CF_OP_INVALID;
}

bool cf_op_is_collective(cf_op op) {
  cf_category c = cf_op_table[op].cat;
  return c == CF_CAT_COLLECTIVE || c == CF_CAT_FUSED_COLLECTIVE || c == CF_CAT_FUSED_MATMUL;
}

/* Outputs a node has: a fused collective's and the tuple forms' one per
 * operand, a multi-output Opaque node's declared ones. */
int cf_node_n_outputs(const cf_node *n) {
  switch (cf_op_table[n->op].cat) {
  case CF_CAT_SINK: return 0;
  case CF_CAT_FUSED_COLLECTIVE: return n->n_in;
  default: break;
  }
  if (n->op == CF_OP_ALLGATHERMATMUL) return n->n_in; /* n_in-1 products + gathered x1 */
  if (n->op == CF_OP_ALLTOALL) return n->n_in;         /* the tuple form: one per operand */
  if (n->op == CF_OP_OPAQUE) return n->n_decl > 0 ? n->n_decl : 1;
  return 1;
}
