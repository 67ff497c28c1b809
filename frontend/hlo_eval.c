/* hlo_eval.c - HLO instructions to IR nodes.
 *
 * The ENTRY computation is evaluated symbolically: each instruction yields a
 * value, either one IR output or a tuple of values. `call` is inlined by
 * evaluating the callee with its parameters bound to the arguments (XLA's
 * CallInliner), `tuple` and `get-tuple-element` only move values around, and
 * every other instruction becomes IR nodes: the IR op where the IR has the
 * instruction's exact semantics, Opaque (shape, dtype and operands kept)
 * where it has not. A `while` or `conditional` is an Opaque node of its
 * result types, and each computation it runs (condition and body, each
 * branch) is evaluated once into a region of the graph (cf_region), its
 * parameter bound to the op's operand, and what it ends in is an operand
 * of the op's node: the bodies' collectives are read, counted and
 * combined within their body, and `run` refuses the graph.
 */
#include "hlo_reader.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A fresh node name: base (+ suffix) unless taken; taken names get /N, base
 * cut to keep the name within CF_MAX_NAME. An inlined instruction leaves the
 * names of ENTRY's instructions to them. */
static cf_status add_node(hlo_reader *r, const char *base, const char *suffix, bool at_entry,
                          cf_op op, int line, int *idx) {
  char *nm = cf_arena_name(&r->scratch, base, suffix);
  if (!nm) return cf_hlo_oom(r, line);
  bool taken =
      cf_graph_find(r->g, nm) >= 0 || (!at_entry && cf_hlo_map_find(&r->entry->map, nm) >= 0);
  while (taken) { /* '/' never occurs in an HLO name, so the second try is free */
    char tail[48];
    snprintf(tail, sizeof tail, "%s/%llu", suffix, ++r->serial);
    if (!(nm = cf_arena_name(&r->scratch, base, tail))) return cf_hlo_oom(r, line);
    taken = cf_graph_find(r->g, nm) >= 0;
  }
  cf_status st = cf_graph_add_node(r->g, nm, op, line, idx);
  if (!st) r->g->nodes[*idx].region = r->region;
  return st;
}

static cf_status set_type(hlo_reader *r, int idx, const hshape *t, int line) {
  char buf[CF_MAX_RANK * 24];
  cf_status st = cf_node_parse_attr(r->g, idx, CF_A_DTYPE, cf_dtype_name(t->dt), line);
  if (!st)
    st = cf_node_parse_attr(r->g, idx, CF_A_SHAPE, cf_shape_format(&t->s, buf, sizeof buf), line);
  return st;
}

static cf_status set_str(hlo_reader *r, int idx, cf_attr_id id, const char *s, int line) {
  return cf_node_parse_attr(r->g, idx, id, s, line);
}

static cf_status push_ref(hlo_reader *r, cf_ref ref, int line) {
  if (r->n_refs == r->cap_refs) {
    size_t cap = r->cap_refs ? r->cap_refs * 2 : 64;
    cf_ref *nr = realloc(r->refs, cap * sizeof *nr);
    if (!nr) return cf_hlo_oom(r, line);
    r->refs = nr;
    r->cap_refs = cap;
  }
  r->refs[r->n_refs++] = ref;
  return CF_OK;
}

/* Spend n of the work budget (hlo_reader.h). */
static cf_status charge(hlo_reader *r, int64_t n, int line) {
  if ((r->work -= n) >= 0) return CF_OK;
  return cf_hlo_fail(r, line,
                     "the module expands to more than %lld instructions and operands (the limit "
                     "is %d per byte of the module, at least %d and at most %d)",
                     (long long)r->work_limit, HLO_WORK_PER_BYTE, HLO_MIN_WORK, HLO_MAX_WORK);
}

/* Append the arrays of v to r->refs (leaves in order). */
static cf_status push_leaves(hlo_reader *r, const hval *v, int line) {
  if (v->n < 0) return push_ref(r, v->ref, line);
  cf_status st = charge(r, v->n, line);
  if (st) return st;
  for (int i = 0; i < v->n && !st; i++)
    st = push_leaves(r, &v->elem[i], line);
  return st;
}

static int count_leaves(const hshape *t) {
  if (t->n < 0) return 1;
  int n = 0;
  for (int i = 0; i < t->n; i++)
    n += count_leaves(&t->elem[i]);
  return n;
}

/* The value of shape t whose arrays are outputs *port, *port+1, ... of node. */
static cf_status shape_value(hlo_reader *r, const hshape *t, int node, int *port, hval *out,
                             int line) {
  memset(out, 0, sizeof *out);
  out->n = t->n;
  if (t->n < 0) {
    out->ref = (cf_ref){node, (*port)++};
    out->type = t;
    return CF_OK;
  }
  if (t->n && !(out->elem = cf_arena_array(&r->scratch, (size_t)t->n, sizeof *out->elem)))
    return cf_hlo_oom(r, line);
  for (int i = 0; i < t->n; i++) {
    cf_status st = shape_value(r, &t->elem[i], node, port, &out->elem[i], line);
    if (st) return st;
    if (out->elem[i].depth + 1 > out->depth) out->depth = out->elem[i].depth + 1;
  }
  return CF_OK;
}

static void collect_types(const hshape *t, cf_decl *d, int *k) {
  if (t->n < 0) {
    d[*k].has_dtype = d[*k].has_shape = true;
    d[*k].v.dtype = t->dt;
    d[*k].v.shape = t->s;
    ++*k;
    return;
  }
  for (int i = 0; i < t->n; i++)
    collect_types(&t->elem[i], d, k);
}

/* An Opaque node for in: operands are every array of ops and then
 * extra[0..n_extra), outputs every array of in's shape, type the opcode (or
 * note). */
static cf_status emit_opaque_ext(hlo_reader *r, const hinstr *in, bool at_entry,
                                 const hval *const *ops, const cf_ref *extra, int n_extra,
                                 const char *type, hval *out) {
  cf_status st;
  int leaves = count_leaves(&in->shape);
  if (!leaves)
    return shape_value(r, &in->shape, -1, &leaves, out, in->line); /* () carries nothing */
  r->n_refs = 0;
  for (int i = 0; i < in->n_opnd; i++)
    if ((st = push_leaves(r, ops[i], in->line))) return st;
  for (int i = 0; i < n_extra; i++)
    if ((st = push_ref(r, extra[i], in->line))) return st;
  if (r->n_refs > CF_MAX_OPERANDS)
    return cf_hlo_fail(r, in->line, "instruction '%s': more than %d operand arrays", in->name,
                       CF_MAX_OPERANDS);
  int idx, port = 0;
  if ((st = add_node(r, in->name, "", at_entry, CF_OP_OPAQUE, in->line, &idx)) ||
      (st = cf_node_set_inputs(r->g, idx, (int)r->n_refs, r->refs)) ||
      (st = set_str(r, idx, CF_A_TYPE, type, in->line)))
    return st;
  if (leaves == 1) {
    const hshape *t = &in->shape;
    while (t->n >= 0) /* (f32[8]): the one array inside */
      for (int i = 0; i < t->n; i++)
        if (count_leaves(&t->elem[i])) {
          t = &t->elem[i];
          break;
        }
    if ((st = set_type(r, idx, t, in->line))) return st;
  } else {
    cf_node *n = &r->g->nodes[idx];
    if (!(n->decl = cf_arena_array(&r->g->arena, (size_t)leaves, sizeof *n->decl)))
      return cf_hlo_oom(r, in->line);
    collect_types(&in->shape, n->decl, &n->n_decl);
  }
  return shape_value(r, &in->shape, idx, &port, out, in->line);
}

static cf_status emit_opaque(hlo_reader *r, const hinstr *in, bool at_entry, const hval *const *ops,
                             const char *type, hval *out) {
  return emit_opaque_ext(r, in, at_entry, ops, NULL, 0, type, out);
}

/* An IR op with operands ops (arrays) and in's shape (an array) declared. */
static cf_status emit_op(hlo_reader *r, const hinstr *in, bool at_entry, cf_op op,
                         const hval *const *ops, int n, int *idx_out, hval *out) {
  cf_ref refs[2];
  int idx, port = 0;
  for (int i = 0; i < n; i++)
    refs[i] = ops[i]->ref;
  cf_status st = add_node(r, in->name, "", at_entry, op, in->line, &idx);
  if (!st) st = cf_node_set_inputs(r->g, idx, n, refs);
  if (!st) st = set_type(r, idx, &in->shape, in->line);
  if (!st) st = shape_value(r, &in->shape, idx, &port, out, in->line);
  if (idx_out) *idx_out = idx;
  return st;
}

static bool exact_array(const hval *v) { return v->n < 0 && v->type->exact; }

/* {1} or {} into v[0..*n) */
static bool int_set(const hattr *a, int64_t *v, int max, int *n) {
  *n = 0;
  if (!a) return true;
  const char *p = a->val.p, *e = p + a->val.n;
  return p < e && *p == '{' && (p = cf_hlo_int_list(p, e, '}', INT32_MAX, v, max, n)) &&
         cf_hlo_skip(p, e) == e;
}

/* dot as MatMul: lhs (m,k) . rhs (k,n), no batch dims, the IR's result type. */
static bool dot_is_matmul(const hinstr *in, const hval *a, const hval *b) {
  int64_t lc[2], rc[2], bd[1];
  int nl, nr, nb;
  const hshape *t = &in->shape;
  if (!exact_array(a) || !exact_array(b) || t->n >= 0 || !t->exact) return false;
  const cf_shape *x = &a->type->s, *y = &b->type->s;
  if (x->rank != 2 || y->rank != 2 || a->type->dt != b->type->dt) return false;
  if (!int_set(cf_hlo_attr(in, "lhs_contracting_dims"), lc, 2, &nl) || nl != 1 || lc[0] != 1)
    return false;
  if (!int_set(cf_hlo_attr(in, "rhs_contracting_dims"), rc, 2, &nr) || nr != 1 || rc[0] != 0)
    return false;
  if (!int_set(cf_hlo_attr(in, "lhs_batch_dims"), bd, 1, &nb) || nb) return false;
  if (!int_set(cf_hlo_attr(in, "rhs_batch_dims"), bd, 1, &nb) || nb) return false;
  cf_dtype want = cf_dtype_matmul_out(a->type->dt);
  return want != CF_DT_INVALID && t->dt == want && t->s.rank == 2 && x->dims[1] == y->dims[0] &&
         t->s.dims[0] == x->dims[0] && t->s.dims[1] == y->dims[1];
}

/* What a constant's literal holds, for count elements (LIT_*). */
static int classify_literal(cf_span lit, int64_t count, double *value) {
  const char *p = lit.p, *e = lit.p + lit.n;
  int64_t n = 0;
  bool splat = true, iota = true;
  double first = 0;
  for (;;) {
    while (p < e && (is_space(*p) || *p == '{' || *p == '}' || *p == ','))
      p++;
    if (p < e && at_comment(p, e)) {
      p = cf_hlo_past(p, e);
      continue;
    }
    if (p >= e) break;
    const char *ts = p;
    while (p < e && (isalnum((unsigned char)*p) || *p == '.' || *p == '-' || *p == '+'))
      p++;
    char tok[64];
    size_t tl = (size_t)(p - ts);
    if (!tl || tl >= sizeof tok || n >= count) return LIT_OTHER;
    memcpy(tok, ts, tl);
    tok[tl] = 0;
    double v;
    char *end;
    if (!strcmp(tok, "true"))
      v = 1;
    else if (!strcmp(tok, "false"))
      v = 0;
    else {
      errno = 0;
      v = strtod(tok, &end);
      if (*end || errno == ERANGE || !isfinite(v) || isalpha((unsigned char)tok[tl - 1]))
        return LIT_OTHER;
    }
    if (!n) first = v;
    splat &= v == first;
    iota &= v == (double)n;
    n++;
  }
  if (n != count && !(count == 0 && n == 0)) return LIT_OTHER;
  *value = first;
  return splat ? LIT_SPLAT : iota ? LIT_IOTA : LIT_OTHER;
}

static cf_status eval_constant(hlo_reader *r, hinstr *in, bool at_entry, hval *out) {
  int64_t count;
  if (in->shape.n >= 0 || !in->shape.exact || !cf_shape_elements(&in->shape.s, &count))
    return emit_opaque(r, in, at_entry, NULL, "constant", out);
  if (!in->lit) in->lit = classify_literal(in->args, count, &in->lit_value);
  /* a Constant's value is a double: an integer literal it cannot hold
   * exactly (beyond +-2^53, or with a fraction) stays an opaque constant */
  double v = in->lit_value;
  if (in->lit == LIT_SPLAT && !cf_dtype_is_float(in->shape.dt) &&
      (v != trunc(v) || fabs(v) > 0x1p53))
    in->lit = LIT_OTHER;
  if (in->lit == LIT_OTHER) return emit_opaque(r, in, at_entry, NULL, "constant", out);
  int idx;
  cf_status st = emit_op(r, in, at_entry, CF_OP_CONSTANT, NULL, 0, &idx, out);
  if (st) return st;
  if (in->lit == LIT_IOTA) return set_str(r, idx, CF_A_INIT, "iota", in->line);
  cf_attr a = {.id = CF_A_VALUE, .v.f = in->lit_value};
  return cf_node_set_attr(r->g, idx, &a);
}

/* Whether v is a Constant of one value everywhere (a splat, not an iota),
 * into value. */
static bool splat_of(const hlo_reader *r, const hval *v, double *value) {
  if (v->n >= 0 || v->ref.node < 0 || v->ref.node >= r->g->n_nodes) return false;
  const cf_node *n = &r->g->nodes[v->ref.node];
  const cf_attr *a = cf_node_attr(n, CF_A_VALUE);
  if (n->op != CF_OP_CONSTANT || !a) return false;
  *value = a->v.f;
  return true;
}

/* broadcast of a splat (XLA writes `broadcast(constant(42.3)),
 * dimensions={}` for a filled array): a Constant of that value in the
 * broadcast's type, as a constant literal of one value is; an integer type
 * that cannot hold the value exactly keeps the broadcast Opaque (*done
 * false). */
static cf_status eval_splat_broadcast(hlo_reader *r, const hinstr *in, bool at_entry, double v,
                                      hval *out, bool *done) {
  *done = false;
  if (!cf_dtype_is_float(in->shape.dt) && (v != trunc(v) || fabs(v) > 0x1p53)) return CF_OK;
  int idx;
  cf_status st = emit_op(r, in, at_entry, CF_OP_CONSTANT, NULL, 0, &idx, out);
  if (st) return st;
  *done = true;
  cf_attr a = {.id = CF_A_VALUE, .v.f = v};
  return cf_node_set_attr(r->g, idx, &a);
}

/* Give every array of v (an ENTRY parameter) its own Input node. */
static cf_status make_inputs(hlo_reader *r, const hinstr *in, hval *v, int *seen) {
  if (v->n >= 0) {
    for (int i = 0; i < v->n; i++) {
      cf_status st = make_inputs(r, in, &v->elem[i], seen);
      if (st) return st;
    }
    return CF_OK;
  }
  char suffix[24] = "";
  if (in->shape.n >= 0) snprintf(suffix, sizeof suffix, "#%d", (*seen)++);
  int idx;
  cf_status st = add_node(r, in->name, suffix, true, CF_OP_INPUT, in->line, &idx);
  if (!st) st = set_type(r, idx, v->type, in->line);
  v->ref = (cf_ref){idx, 0};
  return st;
}

static cf_status eval_parameter(hlo_reader *r, const hinstr *in, bool at_entry, const hval *args,
                                int n_args, hval *out) {
  int64_t k;
  const char *p = in->args.p;
  if (!cf_hlo_read_int(&p, in->args.p + in->args.n, INT32_MAX, &k) || p != in->args.p + in->args.n)
    return cf_hlo_fail(r, in->line, "instruction '%s': parameter(N) needs a parameter number",
                       in->name);
  if (!at_entry) {
    if (k >= n_args)
      return cf_hlo_fail(r, in->line,
                         "instruction '%s': parameter(%lld) but the call passes %d operands",
                         in->name, (long long)k, n_args);
    if (args[k].n != in->shape.n)
      return cf_hlo_fail(r, in->line,
                         "instruction '%s': parameter(%lld) is %s but the call passes %s", in->name,
                         (long long)k, in->shape.n < 0 ? "an array" : "a tuple",
                         args[k].n < 0 ? "an array" : "a tuple");
    *out = args[k];
    return CF_OK;
  }
  /* ENTRY: an Input per array (NAME#i for the arrays of a tuple) */
  int port = 0, seen = 0;
  cf_status st = shape_value(r, &in->shape, -1, &port, out, in->line);
  return st ? st : make_inputs(r, in, out, &seen);
}

/* The parameter number of instruction k of c when it is a parameter, else -1. */
static int64_t param_number(const hcomp *c, int k) {
  const hinstr *in = &c->ins[k];
  int64_t n;
  const char *p = in->args.p;
  if (strcmp(in->opcode, "parameter") || in->shape.n >= 0 ||
      !cf_hlo_read_int(&p, in->args.p + in->args.n, INT32_MAX, &n) || p != in->args.p + in->args.n)
    return -1;
  return n;
}

/* Operand i of instruction k of c: the index of the parameter it names
 * (through one convert when widened: a float parameter converted to a float
 * type at least as wide), else -1. */
static int64_t reducer_param(const hcomp *c, const hinstr *k, int i, bool widened) {
  int j = cf_hlo_map_find(&c->map, k->opnd[i]);
  if (j < 0 || &c->ins[j] == k) return -1;
  if (widened) {
    const hinstr *cv = &c->ins[j];
    if (strcmp(cv->opcode, "convert") || cv->n_opnd != 1 || cv->shape.n >= 0 ||
        (j = cf_hlo_map_find(&c->map, cv->opnd[0])) < 0 || c->ins[j].shape.n >= 0 ||
        !cf_dtype_is_float(cv->shape.dt) || !cf_dtype_is_float(c->ins[j].shape.dt) ||
        cf_dtype_size(cv->shape.dt) < cf_dtype_size(c->ins[j].shape.dt))
      return -1;
  }
  return param_number(c, j);
}

/* The reduction of a collective's to_apply (an HLO computation or a
 * StableHLO reducer region), -1 when it is none: the computation must be
 * exactly one add, multiply, maximum or minimum of its two parameters (or,
 * and of pred ones: bool's sum and prod), in
 * either order, and nothing else (a root op alone would take (a+b)*(a+b)
 * for a product and a+1 for a sum). -1 when the root is another op or
 * there is no computation, -2 when the root is one of the four but the
 * computation is more or less than it; *why is the root op, or what is
 * wrong. *widened: the op works in a wider float type, each parameter
 * converted to it and the result back (a bf16 sum in f32, as JAX writes
 * one): the same reduction but for rounding, and no reduction kind to
 * XLA's combiners (ReduceScatterCombiner's DoNotCombineWithoutReductionKind),
 * so the caller leaves it uncombined. */
static int reducer(hlo_reader *r, const hinstr *in, const char **why, bool *widened) {
  hcomp *c = cf_hlo_attr_comp(r, in, "to_apply");
  *why = "to_apply names no computation of the module";
  *widened = false;
  if (!c) return -1;
  const hinstr *root = &c->ins[c->root];
  /* convert(op(convert(p0), convert(p1))) back to the parameters' type */
  if (!strcmp(root->opcode, "convert") && root->n_opnd == 1 && c->n_ins == 6 &&
      root->shape.n < 0 && cf_dtype_is_float(root->shape.dt)) {
    int k = cf_hlo_map_find(&c->map, root->opnd[0]);
    if (k >= 0 && k != c->root && c->ins[k].n_opnd == 2 && c->ins[k].shape.n < 0) {
      root = &c->ins[k];
      *widened = true;
    }
  }
  const char *op = root->opcode;
  bool pred = root->shape.n < 0 && root->shape.dt == CF_DT_BOOL; /* or, and: pred's sum, prod */
  int red = !strcmp(op, "add")                ? CF_RED_SUM
            : !strcmp(op, "multiply")         ? CF_RED_PROD
            : !strcmp(op, "maximum")          ? CF_RED_MAX
            : !strcmp(op, "minimum")          ? CF_RED_MIN
            : pred && !strcmp(op, "or")       ? CF_RED_SUM
            : pred && !strcmp(op, "and")      ? CF_RED_PROD
                                              : -1;
  *why = op;
  if (red < 0) return -1;
  /* three instructions: parameter(0), parameter(1) and the root over both
   * (six when widened: two converts in, one out) */
  bool exact = c->n_ins == (*widened ? 6 : 3) && root->n_opnd == 2 && root->shape.n < 0;
  int64_t seen = 0;
  for (int i = 0; exact && i < 2; i++) {
    int64_t n = reducer_param(c, root, i, *widened);
    exact = (n == 0 || n == 1) && !(seen & (1 << n));
    if (exact) seen |= 1 << n;
  }
  /* and back to the parameters' own type */
  for (int i = 0; exact && *widened && i < c->n_ins; i++)
    if (param_number(c, i) >= 0) exact = c->ins[i].shape.dt == c->ins[c->root].shape.dt;
  return exact ? red : -2;
}

/* The signature XLA's and StableHLO's verifiers ask of a collective's
 * reducer (StableHLO's all_reduce C5, reduce_scatter C7): two parameters,
 * numbered 0 and 1, scalars of one element type, and one result of that
 * type. A reducer that breaks it is no reduction at all, not an unknown
 * one: the collective is refused rather than imported as Opaque. Shapes the
 * text leaves out are not checked. */
static cf_status reducer_signature(hlo_reader *r, const hinstr *in, const hcomp *c) {
  const char *opc = in->opcode;
  const hshape *par[2] = {NULL, NULL};
  int n_par = 0;
  for (int i = 0; i < c->n_ins; i++) {
    const hinstr *k = &c->ins[i];
    if (strcmp(k->opcode, "parameter")) continue;
    n_par++;
    int64_t num;
    const char *p = k->args.p;
    if (cf_hlo_read_int(&p, k->args.p + k->args.n, 1, &num) && p == k->args.p + k->args.n &&
        !k->no_shape)
      par[num] = &k->shape;
  }
  if (n_par != 2)
    return cf_hlo_fail(r, in->line, "instruction '%s': %s's reducer takes %d parameter%s, not 2",
                       in->name, opc, n_par, n_par == 1 ? "" : "s");
  for (int i = 0; i < 2; i++)
    if (par[i] && (par[i]->n >= 0 || par[i]->s.rank))
      return cf_hlo_fail(r, in->line, "instruction '%s': %s's reducer parameter %d is not a scalar",
                         in->name, opc, i);
  if (par[0] && par[1] && (par[0]->dt != par[1]->dt || par[0]->exact != par[1]->exact))
    return cf_hlo_fail(r, in->line,
                       "instruction '%s': %s's reducer parameters are of two element types",
                       in->name, opc);
  const hinstr *root = &c->ins[c->root];
  const hshape *want = par[0] ? par[0] : par[1];
  if (!strcmp(root->opcode, "tuple") && root->n_opnd != 1)
    return cf_hlo_fail(r, in->line, "instruction '%s': %s's reducer returns %d values, not 1",
                       in->name, opc, root->n_opnd);
  if (root->no_shape) return CF_OK;
  if (root->shape.n >= 0 || root->shape.s.rank)
    return cf_hlo_fail(r, in->line, "instruction '%s': %s's reducer returns %s, not a scalar",
                       in->name, opc, root->shape.n >= 0 ? "a tuple" : "an array");
  if (want && (root->shape.dt != want->dt || root->shape.exact != want->exact))
    return cf_hlo_fail(r, in->line,
                       "instruction '%s': %s's reducer returns %s but its parameters are %s",
                       in->name, opc, cf_dtype_name(root->shape.dt), cf_dtype_name(want->dt));
  return CF_OK;
}

/* What XLA's combiners key a collective on besides its replica groups,
 * reduction, dtype and dimension (AllReduceKey, AllGatherCombiner's and
 * ReduceScatterCombiner's GroupKey): a channel_id makes it cross-module,
 * use_global_device_ids, the domain of a sharding={maximal device=N}; a
 * frontend_attributes={collective_group_key="G"} (XLA's launch group: a
 * keyed collective is never combined with an unkeyed one or one of another
 * key, side_effect_util.h); and a user's frontend_attributes={combine_key=
 * "..."}. Written into key (NULL when none). */
static cf_status combine_key(hlo_reader *r, const hinstr *in, char **out) {
  char head[96];
  size_t o = 0;
  head[0] = 0;
  *out = NULL;
  const hattr *a;
  if (cf_hlo_attr(in, "channel_id")) o += (size_t)snprintf(head + o, sizeof head - o, "cross_module");
  if ((a = cf_hlo_attr(in, "use_global_device_ids")) && a->val.n == 4 &&
      !memcmp(a->val.p, "true", 4))
    o += (size_t)snprintf(head + o, sizeof head - o, "%sglobal_ids", o ? "," : "");
  if ((a = cf_hlo_attr(in, "sharding"))) {
    const char *p = a->val.p, *e = p + a->val.n, *m = NULL;
    for (const char *q = p; q + 15 <= e && !m; q++)
      if (!memcmp(q, "maximal device=", 15)) m = q + 15;
    int64_t dev;
    if (m && cf_hlo_read_int(&m, e, INT32_MAX, &dev))
      o += (size_t)snprintf(head + o, sizeof head - o, "%sdevice=%lld", o ? "," : "", (long long)dev);
  }
  /* the user's key is kept whole: two keys that differ only far in are two
   * keys (XLA compares the attribute's whole string) */
  cf_span v = {NULL, 0}, g = {NULL, 0};
  if ((a = cf_hlo_attr(in, "frontend_attributes"))) {
    v = cf_hlo_sub_value(r, a->val, "combine_key");
    g = cf_hlo_sub_value(r, a->val, "collective_group_key");
  }
  if (g.p && !g.n) g.p = NULL; /* an empty key is no key (XLA: "nonempty") */
  if (!o && !v.p && !g.p) return CF_OK;
  /* written as collective_group_key=G, before the user's key */
  size_t len = o + 1 + (g.p ? g.n + 24 : 0) + (v.p ? v.n : 0) + 1;
  if (!(*out = malloc(len))) return cf_hlo_oom(r, in->line);
  snprintf(*out, len, "%s%s%s%.*s%s%.*s", head, o && g.p ? "," : "",
           g.p ? "collective_group_key=" : "", g.p ? (int)g.n : 0, g.p ? g.p : "",
           (o || g.p) && v.p ? "," : "", v.p ? (int)v.n : 0, v.p ? v.p : "");
  return CF_OK;
}

/* all-reduce, all-gather, reduce-scatter (and the async -start forms). */
static cf_status eval_collective(hlo_reader *r, hinstr *in, bool at_entry, const hval *const *ops,
                                 hval *out) {
  static const cf_op plain[] = {CF_OP_ALLREDUCE, CF_OP_ALLGATHER, CF_OP_REDUCESCATTER};
  static const cf_op fused[] = {CF_OP_FUSEDALLREDUCE, CF_OP_FUSEDALLGATHER,
                                CF_OP_FUSEDREDUCESCATTER};
  const char *opc = in->opcode;
  int kind = !strncmp(opc, "all-reduce", 10) ? 0 : !strncmp(opc, "all-gather", 10) ? 1 : 2;
  bool start = strstr(opc, "-start") != NULL;
  char note[320];
  cf_status st;
  /* all-gather-start's and reduce-scatter-start's shape is (operands, results) */
  const hshape *res = &in->shape;
  if (start && kind != 0) {
    if (res->n != 2) return emit_opaque(r, in, at_entry, ops, opc, out);
    res = &res->elem[1];
  }
  int n = in->n_opnd;
  bool tuple = res->n >= 0;
  /* one result per operand (XLA's shape inference; StableHLO: "requires
   * the same number of operands and results"); an old -start form's
   * (operand, result) tuple stays Opaque */
  if (!start && (!n || (tuple && res->n != n) || (!tuple && n != 1)))
    return cf_hlo_fail(r, in->line, "instruction '%s': %s has %d operand%s but %d result%s",
                       in->name, opc, n, n == 1 ? "" : "s", tuple ? res->n : 1,
                       tuple && res->n != 1 ? "s" : "");
  if (!n || (tuple && res->n != n) || (!tuple && n != 1))
    return emit_opaque(r, in, at_entry, ops, opc, out);
  for (int i = 0; i < n; i++) {
    const hshape *t = tuple ? &res->elem[i] : res;
    if (!exact_array(ops[i]) || t->n >= 0 || !t->exact) {
      snprintf(note, sizeof note, "%s (element type without an IR dtype)", opc);
      return emit_opaque(r, in, at_entry, ops, note, out);
    }
  }
  int red = -1;
  bool widened = false;
  if (kind != 1) {
    const char *why;
    const hcomp *rc = cf_hlo_attr_comp(r, in, "to_apply");
    if (!rc)
      return cf_hlo_fail(r, in->line,
                         "instruction '%s': %s needs to_apply=COMPUTATION of the module", in->name,
                         opc);
    if ((st = reducer_signature(r, in, rc))) return st;
    if ((red = reducer(r, in, &why, &widened)) < 0) {
      if (red == -2)
        snprintf(note, sizeof note, "%s (reducer other than one '%s' of its two parameters)", opc,
                 why);
      else
        snprintf(note, sizeof note, "%s (reducer '%.40s')", opc, why);
      return emit_opaque(r, in, at_entry, ops, note, out);
    }
  }
  /* the reducer's parameters are scalars of the operands' element type;
   * a wider one of the same kind (StableHLO's promotable types: an f32 sum
   * in f64, whose result is f64) has no IR op, another is wrong */
  bool same_dt = true;
  for (int i = 1; i < n; i++)
    same_dt &= ops[i]->type->dt == ops[0]->type->dt;
  const hcomp *rc = kind != 1 ? cf_hlo_attr_comp(r, in, "to_apply") : NULL;
  for (int i = 0; rc && i < rc->n_ins; i++) {
    const hshape *t = &rc->ins[i].shape;
    cf_dtype want = ops[0]->type->dt;
    if (param_number(rc, i) < 0 || widened ||
        (t->n < 0 && !t->s.rank && (!same_dt || t->dt == want)))
      continue;
    if (t->n < 0 && !t->s.rank && t->exact && cf_dtype_size(t->dt) > cf_dtype_size(want) &&
        cf_dtype_is_float(t->dt) == cf_dtype_is_float(want) && want != CF_DT_BOOL) {
      /* in StableHLO the results are of the reducer's type (all_reduce C7,
       * reduce_scatter C9: a promoted reduction returns the wider type); XLA
       * keeps the operands' (collective_quantizer's bf16 all-reduce in f32) */
      for (int j = 0; r->stablehlo && j < n; j++) {
        const hshape *rt = tuple ? &res->elem[j] : res;
        if (rt->dt != t->dt)
          return cf_hlo_fail(
              r, in->line,
              "instruction '%s': %s reduces in %s, so its result %d must be %s, not %s", in->name,
              opc, cf_dtype_name(t->dt), j, cf_dtype_name(t->dt), cf_dtype_name(rt->dt));
      }
      snprintf(note, sizeof note, "%s (reduced in the wider %s)", opc, cf_dtype_name(t->dt));
      return emit_opaque(r, in, at_entry, ops, note, out);
    }
    return cf_hlo_fail(r, in->line,
                       "instruction '%s': %s's reducer takes parameters other than scalars of "
                       "its operands' element type %s",
                       in->name, opc, cf_dtype_name(want));
  }
  int64_t dim = 0; /* all_gather_dimension / scatter_dimension */
  if (kind != 0) {
    int64_t dims[2];
    int nd;
    if (!int_set(cf_hlo_attr(in, "dimensions"), dims, 2, &nd) || nd != 1 || dims[0] < 0 ||
        dims[0] >= CF_MAX_RANK) {
      snprintf(note, sizeof note, "%s (not along one dimension)", opc);
      return emit_opaque(r, in, at_entry, ops, note, out);
    }
    dim = dims[0];
  }
  const hgset *gs = NULL;
  if ((st = cf_hlo_coll_groups(r, in, &gs))) return st;
  if (gs->n_sub && !gs->name && kind != 0) /* XLA's verifier and StableHLO's say so too */
    return cf_hlo_fail(r, in->line, "instruction '%s': %s needs replica groups of one size",
                       in->name, opc);
  /* groups of one device, with shapes for more: XLA's verifier leaves a
   * group of one unchecked (its size may be unknown: reduce_scatter_
   * reassociate_test's MismatchReplicaGroups), but there is nothing to run */
  for (int i = 0; kind != 0 && gs->n_sub && gs->name && gs->off[1] - gs->off[0] == 1 && i < n;
       i++) {
    const cf_shape *a = &ops[i]->type->s, *b = tuple ? &res->elem[i].s : &res->s;
    if (dim < a->rank && dim < b->rank && a->dims[dim] != b->dims[dim]) {
      snprintf(note, sizeof note, "%s over groups of one device, with shapes for more", opc);
      return emit_opaque(r, in, at_entry, ops, note, out);
    }
  }
  if (gs->n_sub && !gs->name) {
    snprintf(note, sizeof note, "%s over %d replica groups of different sizes", opc, gs->n_sub);
    /* the parts of an IR group are communicators of one size (reported with
     * every other Opaque op: cf_graph_note_opaque); all-reduce allows them */
    return emit_opaque(r, in, at_entry, ops, note, out);
  }
  /* one node: a plain collective, or a fused one for a tuple of one dtype */
  int nodes = tuple && !same_dt ? n : 1;
  hval v = {.n = tuple ? n : -1};
  if (tuple && !(v.elem = cf_arena_array(&r->scratch, (size_t)n, sizeof *v.elem)))
    return cf_hlo_oom(r, in->line);
  v.depth = tuple;
  for (int k = 0; k < nodes; k++) {
    bool fuse = tuple && same_dt;
    char suffix[24] = "";
    if (nodes > 1) snprintf(suffix, sizeof suffix, "#%d", k);
    int idx, m = fuse ? n : 1;
    if ((st = add_node(r, in->name, suffix, at_entry, fuse ? fused[kind] : plain[kind], in->line,
                       &idx)))
      return st;
    r->n_refs = 0;
    for (int i = 0; i < m; i++)
      if ((st = push_ref(r, ops[fuse ? i : k]->ref, in->line))) return st;
    if ((st = cf_node_set_inputs(r->g, idx, m, r->refs))) return st;
    if (gs->n_sub && (st = set_str(r, idx, CF_A_GROUP, gs->name, in->line))) return st;
    if (red >= 0 &&
        (st = set_str(r, idx, CF_A_REDUCTION, cf_reduction_name((cf_reduction)red), in->line)))
      return st;
    if (kind == 1 && (st = set_str(r, idx, CF_A_LAYOUT, "concat", in->line))) return st;
    /* XLA's pipelines combine every all-reduce, all-gather and reduce-scatter
     * (AllReduceCombiner, AllGatherCombiner, ReduceScatterCombiner): in HLO
     * and StableHLO each one is combinable, where GE's default is fusion=0
     * (all-to-all too: eval_alltoall) */
    if (kind != 0 && !widened && (st = set_str(r, idx, CF_A_FUSION, "1", in->line))) return st;
    /* a widened reducer has no reduction kind for XLA's combiners: alone */
    if (widened && (st = set_str(r, idx, CF_A_FUSION, "0", in->line))) return st;
    if (dim) {
      cf_attr a = {.id = CF_A_DIM, .v.i = dim};
      if ((st = cf_node_set_attr(r->g, idx, &a))) return st;
    }
    char *key;
    if ((st = combine_key(r, in, &key))) return st;
    if (key) st = set_str(r, idx, CF_A_COMBINE_KEY, key, in->line);
    free(key);
    if (st) return st;
    if (fuse) {
      size_t len = (strlen(in->name) + 12) * (size_t)n + 1;
      if (len > ((size_t)1 << 24))
        return cf_hlo_fail(
            r, in->line,
            "instruction '%s': %d operands with this name make a members list above 16 MiB",
            in->name, n);
      char *members = cf_arena_alloc(&r->scratch, len);
      if (!members) return cf_hlo_oom(r, in->line);
      for (int i = 0, o = 0; i < n; i++)
        o += snprintf(members + o, len - (size_t)o, "%s%s#%d", i ? "," : "", in->name, i);
      if ((st = set_str(r, idx, CF_A_MEMBERS, members, in->line)) ||
          (st = set_str(r, idx, CF_A_REASON, "HLO tuple collective", in->line)))
        return st;
      hfused *f = cf_arena_alloc(&r->scratch, sizeof *f);
      const hshape **opnd = cf_arena_array(&r->scratch, (size_t)n, sizeof *opnd);
      if (!f || !opnd) return cf_hlo_oom(r, in->line);
      for (int i = 0; i < n; i++)
        opnd[i] = ops[i]->type;
      *f = (hfused){in, res, opnd, kind, dim, gs, r->fused};
      r->fused = f;
    } else if ((st = set_type(r, idx, tuple ? &res->elem[k] : res, in->line))) {
      return st;
    }
    for (int i = 0; i < m; i++) {
      hval *dst = tuple ? &v.elem[fuse ? i : k] : &v;
      *dst = (hval){
          .n = -1, .ref = {idx, fuse ? i : 0}, .type = tuple ? &res->elem[fuse ? i : k] : res};
    }
  }
  if (!start || kind == 0) {
    *out = v;
    return CF_OK;
  }
  /* all-gather-start, reduce-scatter-start: (operands, results) for -done */
  hval *pair = cf_arena_array(&r->scratch, 2, sizeof *pair);
  if (!pair) return cf_hlo_oom(r, in->line);
  if (n == 1) {
    pair[0] = *ops[0];
  } else {
    pair[0] =
        (hval){.n = n, .depth = 1, .elem = cf_arena_array(&r->scratch, (size_t)n, sizeof(hval))};
    if (!pair[0].elem) return cf_hlo_oom(r, in->line);
    for (int i = 0; i < n; i++)
      pair[0].elem[i] = *ops[i];
  }
  pair[1] = v;
  *out = (hval){.n = 2, .depth = 2, .elem = pair};
  return CF_OK;
}

/* collective-broadcast: the first device of each replica group sends its
 * operand to the others (a Broadcast from group rank 0). */
static cf_status eval_cbcast(hlo_reader *r, hinstr *in, bool at_entry, const hval *const *ops,
                             hval *out) {
  const hgset *gs = NULL;
  /* StableHLO's has_dynamic_root: data operands, then the root as a rank-1
   * i32 of one element per data operand (the verifier's C4); the root is
   * known only at run time, so it stays Opaque */
  if (cf_hlo_attr(in, "has_dynamic_root")) {
    int nd = in->n_opnd - 1;
    const hshape *rt = nd >= 0 && ops[nd]->n < 0 ? ops[nd]->type : NULL;
    if (nd < 1)
      return cf_hlo_fail(r, in->line,
                         "instruction '%s': collective-broadcast with has_dynamic_root needs data "
                         "operands and a root operand, not %d operand%s",
                         in->name, in->n_opnd, in->n_opnd == 1 ? "" : "s");
    if (!rt || !rt->exact || rt->dt != CF_DT_INT32 || rt->s.rank != 1)
      return cf_hlo_fail(r, in->line,
                         "instruction '%s': collective-broadcast's root operand (the last, with "
                         "has_dynamic_root) must be a rank-1 i32 tensor",
                         in->name);
    if (rt->s.dims[0] != nd)
      return cf_hlo_fail(r, in->line,
                         "instruction '%s': collective-broadcast's root operand has %lld "
                         "element%s but there %s %d data operand%s",
                         in->name, (long long)rt->s.dims[0], rt->s.dims[0] == 1 ? "" : "s",
                         nd == 1 ? "is" : "are", nd, nd == 1 ? "" : "s");
  }
  if (in->n_opnd != 1 || !exact_array(ops[0]) || in->shape.n >= 0 || !in->shape.exact)
    return emit_opaque(r, in, at_entry, ops, in->opcode, out);
  cf_status st = cf_hlo_coll_groups(r, in, &gs);
  if (st) return st;
  if (gs->n_sub && !gs->name) {
    char note[96];
    snprintf(note, sizeof note, "%s over %d replica groups of different sizes", in->opcode,
             gs->n_sub);
    return emit_opaque(r, in, at_entry, ops, note, out);
  }
  int idx;
  if ((st = emit_op(r, in, at_entry, CF_OP_BROADCAST, ops, 1, &idx, out))) return st;
  if (gs->n_sub && (st = set_str(r, idx, CF_A_GROUP, gs->name, in->line))) return st;
  return set_str(r, idx, CF_A_ROOT, "0", in->line);
}

/* all-to-all: the array form (one operand, dimensions={d}: split and
 * concatenated along d, the shape kept) or the tuple form (one operand per
 * rank of the group, operand j to rank j), as an AllToAll node; StableHLO's
 * variadic form (split_dimension and concat_dimension with several
 * operands, each split and concatenated alone) as one AllToAll per operand. */
static cf_status eval_alltoall(hlo_reader *r, hinstr *in, bool at_entry, const hval *const *ops,
                               hval *out) {
  const hshape *res = &in->shape;
  int n = in->n_opnd, nd, idx, port = 0;
  int64_t dims[2];
  char note[320], buf[24];
  cf_status st;
  bool tuple = res->n >= 0;
  if (!n || (tuple && res->n != n) || (!tuple && n != 1))
    return cf_hlo_fail(r, in->line, "instruction '%s': all-to-all has %d operand%s but %d result%s",
                       in->name, n, n == 1 ? "" : "s", tuple ? res->n : 1,
                       tuple && res->n != 1 ? "s" : "");
  for (int i = 0; i < n; i++) {
    const hshape *t = tuple ? &res->elem[i] : res;
    if (!exact_array(ops[i]) || t->n >= 0 || !t->exact) {
      snprintf(note, sizeof note, "%s (element type without an IR dtype)", in->opcode);
      return emit_opaque(r, in, at_entry, ops, note, out);
    }
  }
  /* StableHLO's split_dimension and concat_dimension (decimal), else dimensions={d} */
  const hattr *sd = cf_hlo_attr(in, "split_dimension"), *cd = cf_hlo_attr(in, "concat_dimension");
  bool split_concat = sd && cd;
  if (!split_concat && (!int_set(cf_hlo_attr(in, "dimensions"), dims, 2, &nd) || nd != !tuple))
    return cf_hlo_fail(r, in->line,
                       "instruction '%s': all-to-all needs dimensions={d} with one operand and "
                       "none with a tuple of operands",
                       in->name);
  const hgset *gs = NULL;
  if ((st = cf_hlo_coll_groups(r, in, &gs))) return st;
  if (gs->n_sub && !gs->name)
    return cf_hlo_fail(r, in->line, "instruction '%s': %s needs replica groups of one size",
                       in->name, in->opcode);
  const hattr *sc = cf_hlo_attr(in, "split_count"); /* StableHLO: must be the group size */
  int64_t count = -1,
          size = gs->n_sub ? gs->off[1] - gs->off[0]
                           : (r->partitions ? r->partitions : 1) * (r->replicas ? r->replicas : 1);
  const char *q = sc ? sc->val.p : NULL;
  if (sc && (!cf_hlo_read_int(&q, sc->val.p + sc->val.n, INT32_MAX, &count) || count != size))
    return cf_hlo_fail(r, in->line,
                       "instruction '%s': split_count=%lld but its replica groups have %lld "
                       "devices",
                       in->name, (long long)count, (long long)size);
  bool each = tuple && split_concat; /* StableHLO's variadic form */
  hval v = {.n = n, .depth = 1};
  if (each && !(v.elem = cf_arena_array(&r->scratch, (size_t)n, sizeof *v.elem)))
    return cf_hlo_oom(r, in->line);
  for (int k = 0; k < (each ? n : 1); k++) {
    char suffix[24] = "";
    if (each) snprintf(suffix, sizeof suffix, "#%d", k);
    if ((st = add_node(r, in->name, suffix, at_entry, CF_OP_ALLTOALL, in->line, &idx))) return st;
    r->n_refs = 0;
    for (int i = each ? k : 0; i < (each ? k + 1 : n); i++)
      if ((st = push_ref(r, ops[i]->ref, in->line))) return st;
    if ((st = cf_node_set_inputs(r->g, idx, r->n_refs, r->refs))) return st;
    if (gs->n_sub && (st = set_str(r, idx, CF_A_GROUP, gs->name, in->line))) return st;
    /* combinable, with XLA's keys, as every collective read from HLO or
     * StableHLO (the tuple form stays alone in the combiner all the same) */
    if ((st = set_str(r, idx, CF_A_FUSION, "1", in->line))) return st;
    char *key;
    if ((st = combine_key(r, in, &key))) return st;
    if (key) st = set_str(r, idx, CF_A_COMBINE_KEY, key, in->line);
    free(key);
    if (st) return st;
    if (!tuple || each) {
      const char *split = buf, *concat = buf;
      snprintf(buf, sizeof buf, "%lld", split_concat ? 0 : (long long)dims[0]);
      if (split_concat && (!(split = cf_hlo_str(r, sd->val.p, sd->val.n)) ||
                           !(concat = cf_hlo_str(r, cd->val.p, cd->val.n))))
        return cf_hlo_oom(r, in->line);
      if ((st = set_str(r, idx, CF_A_SPLIT_DIMENSION, split, in->line)) ||
          (st = set_str(r, idx, CF_A_CONCAT_DIMENSION, concat, in->line)) ||
          (st = set_type(r, idx, each ? &res->elem[k] : res, in->line)))
        return st;
    }
    if (each) v.elem[k] = (hval){.n = -1, .ref = {idx, 0}, .type = &res->elem[k]};
  }
  if (each) {
    *out = v;
    return CF_OK;
  }
  return shape_value(r, res, idx, &port, out, in->line);
}

/* collective-permute (and -start, whose shape is (operand, result, ...) for
 * -done): source_target_pairs over devices, as a CollectivePermute of the
 * world group. */
static cf_status emit_tuple(hlo_reader *r, const hinstr *in, const hval *const *ops, hval *out);

static cf_status eval_permute(hlo_reader *r, hinstr *in, bool at_entry, const hval *const *ops,
                              hval *out) {
  const hshape *res = &in->shape;
  bool start = strstr(in->opcode, "-start") != NULL;
  int idx, port = 0;
  char note[320], why[128];
  cf_status st;
  if (start) {
    if (res->n < 2) return emit_opaque(r, in, at_entry, ops, in->opcode, out);
    res = &res->elem[1];
  }
  /* one operand and array, or XLA's combined form: k operands, a tuple of k
   * results, each its operand's permuted (not the in-place form, whose
   * operands are buffers and offsets) */
  int k = in->n_opnd;
  bool combined = k > 1 && res->n == k && !cf_hlo_attr(in, "slice_sizes");
  if (!combined && (k != 1 || res->n >= 0))
    return emit_opaque(r, in, at_entry, ops, in->opcode, out);
  for (int i = 0; i < k; i++) {
    const hshape *ri = combined ? &res->elem[i] : res;
    if (ri->n >= 0) return emit_opaque(r, in, at_entry, ops, in->opcode, out);
    if (!exact_array(ops[i]) || !ri->exact) {
      snprintf(note, sizeof note, "%s (element type without an IR dtype)", in->opcode);
      return emit_opaque(r, in, at_entry, ops, note, out);
    }
  }
  /* pairs of partition ids (with a channel_id) or of replica ids: devices
   * when the module has only one kind */
  if (r->partitions > 1 && r->replicas > 1) {
    snprintf(note, sizeof note, "%s (pairs in a module of replicas and partitions)", in->opcode);
    return emit_opaque(r, in, at_entry, ops, note, out);
  }
  const hattr *a = cf_hlo_attr(in, "source_target_pairs");
  char *text = a ? cf_arena_strndup(&r->scratch, a->val.p, a->val.n) : NULL;
  int target[CF_MAX_WORLD], source[CF_MAX_WORLD];
  if (a && !text) return cf_hlo_oom(r, in->line);
  if (!a)
    return cf_hlo_fail(r, in->line, "instruction '%s': %s needs source_target_pairs", in->name,
                       in->opcode);
  if (!cf_pairs_parse(text, CF_MAX_WORLD, target, source, why, sizeof why))
    return cf_hlo_fail(r, in->line, "instruction '%s': source_target_pairs: %s", in->name, why);
  for (int d = 0; d < CF_MAX_WORLD; d++)
    if ((target[d] >= 0 || source[d] >= 0) && d > r->max_rank) r->max_rank = d;
  hval v, *each = combined ? cf_arena_array(&r->scratch, (size_t)k, sizeof *each) : &v;
  if (!each) return cf_hlo_oom(r, in->line);
  for (int i = 0; i < k; i++) { /* combined: one CollectivePermute per operand, NAME#i */
    const hshape *ri = combined ? &res->elem[i] : res;
    char suffix[16] = "";
    if (combined) snprintf(suffix, sizeof suffix, "#%d", i);
    port = 0;
    if ((st = add_node(r, in->name, suffix, at_entry, CF_OP_COLLECTIVEPERMUTE, in->line, &idx)) ||
        (st = cf_node_set_inputs(r->g, idx, 1, &ops[i]->ref)) ||
        (st = set_str(r, idx, CF_A_SOURCE_TARGET_PAIRS, text, in->line)) ||
        (st = set_type(r, idx, ri, in->line)) ||
        (st = shape_value(r, ri, idx, &port, &each[i], in->line)))
      return st;
  }
  if (combined) v = (hval){.n = k, .depth = 1, .elem = each};
  hval sent = *ops[0];
  if (combined && (st = emit_tuple(r, in, ops, &sent))) return st;
  if (!start) {
    *out = v;
    return CF_OK;
  }
  hval *pair = cf_arena_array(&r->scratch, 2, sizeof *pair);
  if (!pair) return cf_hlo_oom(r, in->line);
  pair[0] = sent;
  pair[1] = v;
  *out = (hval){.n = 2, .depth = 1 + (sent.depth > v.depth ? sent.depth : v.depth), .elem = pair};
  return CF_OK;
}

static cf_status eval_comp(hlo_reader *r, hcomp *c, const hval *args, int n_args, hval *out);

/* The tuple of in's operands. */
static cf_status emit_tuple(hlo_reader *r, const hinstr *in, const hval *const *ops, hval *out) {
  *out = (hval){.n = in->n_opnd};
  if (in->n_opnd &&
      !(out->elem = cf_arena_array(&r->scratch, (size_t)in->n_opnd, sizeof *out->elem)))
    return cf_hlo_oom(r, in->line);
  for (int i = 0; i < in->n_opnd; i++) {
    out->elem[i] = *ops[i];
    if (ops[i]->depth + 1 > out->depth) out->depth = ops[i]->depth + 1;
  }
  return CF_OK;
}

/* Custom calls that are the identity in the per-rank program collfuse runs:
 * sharding annotations, and the shard_map exits (local -> global shape),
 * whose per-rank value is the rank's local shard, as in XLA's partitioned
 * module. The entries (global -> local shape) take each rank's block: see
 * eval_shard_entry. */
static bool forwards_operands(const hinstr *in) {
  static const char *targets[] = {"\"Sharding\"", "\"xla.sdy.FuncResultSharding\"",
                                  "\"xla.sdy.LocalToGlobalShape\"", "\"SPMDShardToFullShape\""};
  const hattr *t = cf_hlo_attr(in, "custom_call_target");
  for (size_t i = 0; t && i < sizeof targets / sizeof targets[0]; i++)
    if (cf_span_is(t->val, targets[i])) return true;
  return false;
}

static bool is_target(const hinstr *in, const char *quoted_name) {
  const hattr *t = cf_hlo_attr(in, "custom_call_target");
  return t && cf_span_is(t->val, quoted_name);
}

/* The entry into a shard_map body (xla.sdy.GlobalToLocalShape with its
 * in_shardings, or SPMDFullToShardShape after a Sharding custom-call): each
 * rank goes on with its block of each operand, a Shard node (ir/shard.c;
 * the cut from hlo_sharding.c), or the operand itself where nothing is cut.
 * *imported is false (and nothing is emitted) when the sharding is not one
 * collfuse runs or its blocks are not the shapes the call declares: then
 * the call stays Opaque, which check reports. */
static cf_status eval_shard_entry(hlo_reader *r, hcomp *c, const hinstr *in, bool at_entry,
                                  const hval *const *ops, hval *out, bool *imported) {
  int n = in->n_opnd;
  *imported = false;
  const hshape *t = &in->shape;
  if (n > CF_MAX_OPERANDS || (n == 1 ? t->n >= 0 && t->n != 1 : t->n != n)) return CF_OK;
  int ranks[CF_MAX_OPERANDS];
  for (int i = 0; i < n; i++) {
    const hshape *ti = t->n >= 0 ? &t->elem[i] : t;
    if (!exact_array(ops[i]) || ti->n >= 0 || ti->dt != ops[i]->type->dt) return CF_OK;
    ranks[i] = ops[i]->type->s.rank;
  }
  hcut *cut = calloc((size_t)n, sizeof *cut);
  if (!cut) return cf_hlo_oom(r, in->line);
  char why[200];
  bool ok;
  if (is_target(in, "\"SPMDFullToShardShape\"")) {
    int j = cf_hlo_map_find(&c->map, in->opnd[0]);
    const hinstr *def = j >= 0 ? &c->ins[j] : NULL;
    const hattr *sh = def && !strcmp(def->opcode, "custom-call") && is_target(def, "\"Sharding\"")
                          ? cf_hlo_attr(def, "sharding")
                          : NULL;
    ok = n == 1 && sh && cf_hlo_sharding_cut(sh->val, ranks[0], &cut[0], why, sizeof why);
  } else {
    ok = cf_hlo_sdy_cuts(r, in, ranks, n, cut, why, sizeof why);
  }
  for (int i = 0; i < n && ok; i++) { /* the blocks must be what the call declares */
    const hshape *ti = t->n >= 0 ? &t->elem[i] : t;
    cf_shape local = ops[i]->type->s;
    for (int d = 0; d < local.rank && cut[i].n_dev; d++)
      ok = ok && local.dims[d] % cut[i].tiles[d] == 0 && (local.dims[d] /= cut[i].tiles[d], true);
    ok = ok && cf_shape_equal(&local, &ti->s);
  }
  cf_status st = CF_OK;
  hval *elem = ok && t->n >= 0 ? cf_arena_array(&r->scratch, (size_t)n, sizeof *elem) : NULL;
  if (ok && t->n >= 0 && !elem) st = cf_hlo_oom(r, in->line);
  for (int i = 0; i < n && ok && !st; i++) {
    const hshape *ti = t->n >= 0 ? &t->elem[i] : t;
    hval *dst = t->n >= 0 ? &elem[i] : out;
    bool cuts = false;
    for (int d = 0; d < cut[i].rank && cut[i].n_dev; d++)
      cuts |= cut[i].tiles[d] > 1;
    if (!cuts) {
      *dst = *ops[i];
      continue;
    }
    char suffix[24];
    snprintf(suffix, sizeof suffix, "/%d", i);
    int idx, port = 0;
    cf_shape tiles = {.rank = cut[i].rank};
    memcpy(tiles.dims, cut[i].tiles, sizeof tiles.dims);
    int64_t devices[CF_MAX_WORLD];
    for (int k = 0; k < cut[i].n_dev; k++)
      devices[k] = cut[i].dev[k];
    if ((st = add_node(r, in->name, n > 1 ? suffix : "", at_entry, CF_OP_SHARD, in->line, &idx)) ||
        (st = cf_node_set_inputs(r->g, idx, 1, &ops[i]->ref)) ||
        (st = set_type(r, idx, ti, in->line)) ||
        (st = set_str(r, idx, CF_A_TILES, cf_shape_format(&tiles, suffix, sizeof suffix),
                      in->line)) ||
        (st = cf_node_set_ints(r->g, idx, CF_A_DEVICES, devices, cut[i].n_dev)) ||
        (st = shape_value(r, ti, idx, &port, dst, in->line)))
      break;
    if (cut[i].n_dev > r->mesh_world) r->mesh_world = cut[i].n_dev;
  }
  if (ok && !st && t->n >= 0) *out = (hval){.n = n, .depth = 1, .elem = elem};
  *imported = ok;
  free(cut);
  return st;
}

/* Attributes that name computations an op runs (while, conditional,
 * fusion, async ops): not reducers (to_apply), which hold no collective. */
static const char *const body_keys[] = {"body", "condition", "true_computation",
                                        "false_computation", "branch_computations", "calls"};

static bool is_collective_opcode(const char *op) {
  static const char *const names[] = {
      "all-reduce", "all-reduce-start", "all-gather", "all-gather-start", "reduce-scatter",
      "reduce-scatter-start",
      "all-to-all", "ragged-all-to-all", "collective-permute", "collective-permute-start",
      "collective-broadcast"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strcmp(op, names[i])) return true;
  return false;
}

/* The collectives in the computations in's attributes name (a while's body
 * and condition, a conditional's branches, ...), and in those they name in
 * turn, added to *n: what an Opaque op that collfuse cannot run hides. */
static cf_status inner_collectives(hlo_reader *r, const hinstr *in, int depth, int64_t *n) {
  if (depth >= HLO_MAX_CALLS)
    return cf_hlo_fail(r, in->line, "computations nested deeper than %d", HLO_MAX_CALLS);
  for (size_t b = 0; b < sizeof body_keys / sizeof body_keys[0]; b++) {
    const hattr *a = cf_hlo_attr(in, body_keys[b]);
    if (!a) continue;
    const char *p = a->val.p, *e = p + a->val.n;
    if (p < e && *p == '{') p++, e -= e[-1] == '}';
    for (p = cf_hlo_skip(p, e); p < e; p = cf_hlo_skip(p, e)) {
      cf_span nm;
      const char *q = cf_hlo_read_name(p, e, &nm);
      char name[CF_MAX_NAME + 1];
      int k = -1;
      if (nm.n && nm.n <= CF_MAX_NAME) {
        memcpy(name, nm.p, nm.n);
        name[nm.n] = 0;
        k = cf_hlo_map_find(&r->comp_map, name);
      }
      const hcomp *c = k >= 0 ? &r->comps[k] : NULL;
      cf_status st = c ? charge(r, c->n_ins, in->line) : CF_OK;
      for (int i = 0; c && i < c->n_ins && !st; i++) {
        *n += is_collective_opcode(c->ins[i].opcode);
        st = inner_collectives(r, &c->ins[i], depth + 1, n);
      }
      if (st) return st;
      p = q > p ? cf_hlo_skip(q, e) : p + 1;
      if (p < e && *p == ',') p++;
    }
  }
  return CF_OK;
}

/* Every array of succ runs after every array of pred (control edges). */
static cf_status order_after(hlo_reader *r, const hval *succ, const hval *pred, int line) {
  cf_status st = CF_OK;
  if (succ->n >= 0) {
    for (int i = 0; i < succ->n && !st; i++)
      st = order_after(r, &succ->elem[i], pred, line);
    return st;
  }
  if (pred->n >= 0) {
    for (int i = 0; i < pred->n && !st; i++)
      st = order_after(r, succ, &pred->elem[i], line);
    return st;
  }
  if ((st = charge(r, 1, line))) return st;
  return cf_node_add_control(r->g, succ->ref.node, pred->ref.node);
}

/* control-predecessors={a, b}: instruction k runs after a and b, a control
 * edge in the IR that every pass keeps (two collectives it orders never
 * share a bucket; the schedule runs them in its order). The predecessors
 * must be defined before k, as XLA prints them. */
static cf_status keep_order(hlo_reader *r, const hcomp *c, int k, const hval *vals) {
  const hinstr *in = &c->ins[k];
  cf_span v = cf_hlo_attr(in, "control-predecessors")->val;
  const char *p = v.p, *e = v.p + v.n;
  if (p >= e || *p != '{' || e[-1] != '}')
    return cf_hlo_fail(r, in->line, "instruction '%s': control-predecessors must be {NAME, ...}",
                       in->name);
  cf_status st = CF_OK;
  for (p = cf_hlo_skip(p + 1, e - 1); p < e - 1 && !st; p = cf_hlo_skip(p, e - 1)) {
    cf_span nm;
    const char *q = cf_hlo_read_name(p, e - 1, &nm);
    char name[CF_MAX_NAME + 1];
    if (!nm.n || nm.n > CF_MAX_NAME)
      return cf_hlo_fail(r, in->line, "instruction '%s': control-predecessors: bad name at '%s'",
                         in->name, CF_SPAN_QUOTE(((cf_span){p, (size_t)(e - 1 - p)})));
    memcpy(name, nm.p, nm.n);
    name[nm.n] = 0;
    int j = cf_hlo_map_find(&c->map, name);
    if (j < 0 || j >= k)
      return cf_hlo_fail(r, in->line,
                         "instruction '%s': control predecessor '%s' is %s computation '%s'",
                         in->name, name, j < 0 ? "not an instruction of" : "defined after it in",
                         c->name);
    st = order_after(r, &vals[k], &vals[j], in->line);
    p = cf_hlo_skip(q, e - 1);
    if (p < e - 1 && *p == ',') p++;
    else if (p < e - 1)
      return cf_hlo_fail(r, in->line, "instruction '%s': control-predecessors: expected ',' at '%s'",
                         in->name, CF_SPAN_QUOTE(((cf_span){p, (size_t)(e - 1 - p)})));
  }
  return st;
}

/* The computations a control-flow op's attribute key names: one
 * (body=%b) or a list (branch_computations={%b0, %b1}), at most max, into
 * comps[*n...]. Errors name the instruction and what is missing. */
static cf_status comp_list(hlo_reader *r, const hinstr *in, const char *key, hcomp **comps,
                           int max, int *n) {
  const hattr *a = cf_hlo_attr(in, key);
  if (!a)
    return cf_hlo_fail(r, in->line, "instruction '%s': %s needs %s=COMPUTATION", in->name,
                       in->opcode, key);
  const char *p = a->val.p, *e = p + a->val.n;
  bool list = p < e && *p == '{';
  if (list) {
    if (e[-1] != '}')
      return cf_hlo_fail(r, in->line, "instruction '%s': %s={NAME, ...} is not closed", in->name,
                         key);
    p++, e--;
  }
  for (p = cf_hlo_skip(p, e); p < e; p = cf_hlo_skip(p, e)) {
    cf_span nm;
    const char *q = cf_hlo_read_name(p, e, &nm);
    char name[CF_MAX_NAME + 1];
    if (!nm.n || nm.n > CF_MAX_NAME)
      return cf_hlo_fail(r, in->line, "instruction '%s': %s: expected a computation's name at '%s'",
                         in->name, key, CF_SPAN_QUOTE(((cf_span){p, (size_t)(e - p)})));
    memcpy(name, nm.p, nm.n);
    name[nm.n] = 0;
    int k = cf_hlo_map_find(&r->comp_map, name);
    if (k < 0)
      return cf_hlo_fail(r, in->line, "instruction '%s': %s=%s is not a computation of the module",
                         in->name, key, name);
    if (*n >= max)
      return cf_hlo_fail(r, in->line, "instruction '%s': more than %d computations", in->name, max);
    comps[(*n)++] = &r->comps[k];
    p = cf_hlo_skip(q, e);
    if (p < e && *p == ',' && list) p++;
    else if (p < e)
      return cf_hlo_fail(r, in->line, "instruction '%s': %s: expected ',' at '%s'", in->name, key,
                         CF_SPAN_QUOTE(((cf_span){p, (size_t)(e - p)})));
  }
  if (!*n) return cf_hlo_fail(r, in->line, "instruction '%s': %s names no computation", in->name, key);
  return CF_OK;
}

/* The nodes made since node first, in the regions the op's bodies made,
 * that no other node uses (what the bodies end in), as operands for the
 * op's node (port 0 each: one suffices to order them) into a malloc'd
 * *out: the op runs after its whole bodies, and a collective in a body
 * keeps no control edge that would keep it alone. */
static cf_status body_ends(hlo_reader *r, int first, int outer, int line, cf_ref **out, int *n_out) {
  cf_graph *g = r->g;
  int n = g->n_nodes - first, k = 0;
  *out = NULL;
  *n_out = 0;
  if (n <= 0) return CF_OK;
  unsigned char *used = calloc((size_t)n, 1);
  cf_ref *v = malloc((size_t)n * sizeof *v);
  if (!used || !v) {
    free(used);
    free(v);
    return cf_hlo_oom(r, line);
  }
  for (int i = first; i < g->n_nodes; i++)
    for (int j = 0; j < cf_node_n_deps(&g->nodes[i]); j++) {
      int d = cf_node_dep(&g->nodes[i], j);
      if (d >= first) used[d - first] = 1;
    }
  cf_status st = CF_OK;
  for (int i = first; i < g->n_nodes && !st; i++) {
    const cf_region *rg = &g->regions[g->nodes[i].region];
    if (!used[i - first] && g->nodes[i].region && rg->parent == outer &&
        cf_node_n_outputs(&g->nodes[i]) > 0 && !(st = charge(r, 1, line)))
      v[k++] = (cf_ref){i, 0};
  }
  free(used);
  if (st) free(v);
  else
    *out = v, *n_out = k;
  return st;
}

/* The node of v's first array, -1 when it has none. */
static int first_node(const hval *v) {
  if (v->n < 0) return v->ref.node;
  for (int i = 0; i < v->n; i++) {
    int k = first_node(&v->elem[i]);
    if (k >= 0) return k;
  }
  return -1;
}

/* while(init), condition=%c, body=%b and conditional(p, a0, a1, ...),
 * true_computation=/false_computation= or branch_computations={...}: each
 * computation into a region of its own with its operands (a while's for
 * both: one tuple in HLO, StableHLO's values each; operand k+1 for branch
 * k, or none where the branches take no operand, as StableHLO's capture
 * what they use), then the op as an Opaque node of its result types that
 * also takes what the bodies end in. */
static cf_status eval_control(hlo_reader *r, hinstr *in, bool at_entry, const hval *const *ops,
                              hval *out) {
  enum { MAX_BRANCHES = 64 };
  hcomp *comps[MAX_BRANCHES];
  const char *part[MAX_BRANCHES];
  char partbuf[MAX_BRANCHES][24];
  int n = 0;
  cf_status st = CF_OK;
  const char *spelled = in->spelled ? in->spelled : in->opcode;
  bool loop = !strcmp(in->opcode, "while");
  if (loop) {
    if ((st = comp_list(r, in, "condition", comps, 1, &n)) ||
        (st = comp_list(r, in, "body", comps + 1, 1, &(int){0})))
      return st;
    n = 2;
    part[0] = "condition", part[1] = "body";
  } else {
    if (cf_hlo_attr(in, "branch_computations")) {
      st = comp_list(r, in, "branch_computations", comps, MAX_BRANCHES, &n);
      for (int i = 0; i < n; i++) {
        snprintf(partbuf[i], sizeof partbuf[i], "branch %d", i);
        part[i] = partbuf[i];
      }
    } else {
      if (!(st = comp_list(r, in, "true_computation", comps, 1, &n)))
        st = comp_list(r, in, "false_computation", comps + 1, 1, &(int){0});
      n = 2;
      part[0] = "true branch", part[1] = "false branch";
    }
    if (st) return st;
    if (in->n_opnd != n + 1 && in->n_opnd != 1)
      return cf_hlo_fail(r, in->line,
                         "instruction '%s': conditional with %d branches takes %d operands, not %d",
                         in->name, n, n + 1, in->n_opnd);
  }
  int first = r->g->n_nodes, outer = r->region, *ids = malloc((size_t)n * sizeof *ids);
  hval *argv = malloc(((size_t)in->n_opnd + 1) * sizeof *argv);
  if (!ids || !argv) {
    free(ids);
    free(argv);
    return cf_hlo_oom(r, in->line);
  }
  for (int i = 0; i < in->n_opnd; i++)
    argv[i] = *ops[i];
  for (int i = 0; i < n && !st; i++) {
    hval res;
    const hval *args = loop ? argv : in->n_opnd > 1 ? &argv[i + 1] : NULL;
    int n_args = loop ? in->n_opnd : in->n_opnd > 1 ? 1 : 0;
    if ((st = cf_graph_add_region(r->g, spelled, in->name, part[i], outer, in->line, &ids[i])))
      break;
    r->region = ids[i];
    st = eval_comp(r, comps[i], args, n_args, &res);
    r->region = outer;
  }
  cf_ref *ends = NULL;
  int n_ends = 0;
  if (!st) st = body_ends(r, first, outer, in->line, &ends, &n_ends);
  if (!st) st = emit_opaque_ext(r, in, at_entry, ops, ends, n_ends, spelled, out);
  int node = st ? -1 : first_node(out);
  for (int i = 0; i < n && node >= 0; i++) /* () carries nothing: the name stays */
    r->g->regions[ids[i]].owner = r->g->nodes[node].name; /* renamed when taken */
  free(ends);
  free(argv);
  free(ids);
  return st;
}

/* The value named name that a nested computation sees around it: defined
 * before the op being evaluated in the computations that hold it. */
static const hval *outer_value(hlo_reader *r, const char *name) {
  for (const hscope *sc = r->scope; sc && sc->c->nested && sc->up;) {
    sc = sc->up;
    int j = cf_hlo_map_find(&sc->c->map, name);
    if (j >= 0 && j < sc->k) return &sc->vals[j];
  }
  return NULL;
}

/* t as text for messages: f32[8,4] (the IR's dtype name), or a tuple. */
static const char *type_text(const hshape *t, char *buf, size_t len) {
  char dims[96];
  if (t->n >= 0)
    snprintf(buf, len, "a tuple of %d", t->n);
  else
    snprintf(buf, len, "%s[%s]", cf_dtype_name(t->dt), cf_shape_format(&t->s, dims, sizeof dims));
  return buf;
}

/* The value an X-done or async-update passes on is of the type the
 * instruction declares, as XLA's verifier holds it ("Expected instruction
 * to have shape equal to"): ROOT d = f32[4] collective-permute-done(s) of
 * an f32[8] permute was read as f32[8]. Dims always, the dtype when both
 * are exact; at is the tuple index path, from what gives the value.
 * (get-tuple-element is not held to
 * it: a sharded value is its local shard, the text declares the whole.) */
static cf_status check_declared(hlo_reader *r, const hinstr *in, const hshape *t, const hval *v,
                                const char *at, const char *from) {
  if (in->no_shape) return CF_OK;
  char a[128], b[128], sub[64];
  bool same = (t->n < 0) == (v->n < 0) && (t->n < 0 || t->n == v->n);
  if (same && t->n < 0)
    same = cf_shape_equal(&t->s, &v->type->s) &&
           (!t->exact || !v->type->exact || t->dt == v->type->dt);
  if (!same) {
    hshape got = v->n < 0 ? *v->type : (hshape){.n = v->n};
    return cf_hlo_fail(r, in->line, "instruction '%s': declares %s%s but %s gives %s", in->name,
                       type_text(t, a, sizeof a), at, from, type_text(&got, b, sizeof b));
  }
  for (int i = 0; t->n >= 0 && i < t->n; i++) {
    snprintf(sub, sizeof sub, "%s{%d}", at, i);
    cf_status st = check_declared(r, in, &t->elem[i], &v->elem[i], sub, from);
    if (st) return st;
  }
  return CF_OK;
}

/* XLA's verifier (CheckAsyncOpOperand, "The operand of a X-done instruction
 * needs to be X-start"): an X-done or X-update takes its X-start (or an
 * X-update) itself, never another value of that shape:
 * all-reduce-done(tuple(...)) passed the tuple through as its result.
 * send-done and recv-done are free (a pipelined recv reaches its recv-done
 * through a while loop's tuple), and so is a value from around a region. */
static cf_status check_async_operand(hlo_reader *r, const hcomp *c, const hinstr *in) {
  const char *op = in->opcode;
  size_t n = strlen(op), base;
  if (n > 5 && !strcmp(op + n - 5, "-done"))
    base = n - 5;
  else if (n > 7 && !strcmp(op + n - 7, "-update"))
    base = n - 7;
  else
    return CF_OK;
  if (in->n_opnd != 1)
    return cf_hlo_fail(r, in->line, "instruction '%s': %s takes one operand, not %d", in->name, op,
                       in->n_opnd);
  int j = cf_hlo_map_find(&c->map, in->opnd[0]);
  if (j < 0 || (base == 4 && (!strncmp(op, "send", 4) || !strncmp(op, "recv", 4)))) return CF_OK;
  const char *from = c->ins[j].opcode;
  if (!strncmp(from, op, base) &&
      (!strcmp(from + base, "-start") || !strcmp(from + base, "-update")))
    return CF_OK;
  return cf_hlo_fail(r, in->line,
                     "instruction '%s': the operand of %s must be its %.*s-start, not %s '%s'",
                     in->name, op, (int)base, op, from, in->opnd[0]);
}

static cf_status eval_instr(hlo_reader *r, hcomp *c, int k, hval *vals, const hval *args,
                            int n_args) {
  hinstr *in = &c->ins[k];
  hval *out = &vals[k];
  bool at_entry = c == r->entry;
  const char *op = in->opcode;
  cf_status st = charge(r, 1 + (int64_t)in->n_opnd, in->line);
  if (st) return st;
  const hval *small[8], **ops = small;
  if (in->n_opnd > 8 && !(ops = malloc((size_t)in->n_opnd * sizeof *ops)))
    return cf_hlo_oom(r, in->line);
  for (int i = 0; i < in->n_opnd && !st; i++) {
    int j = cf_hlo_map_find(&c->map, in->opnd[i]);
    if (j < 0 && c->nested && (ops[i] = outer_value(r, in->opnd[i])))
      continue; /* a region's use of a value around it */
    if (j < 0 && c->nested)
      st = cf_hlo_fail(r, in->line,
                       "instruction '%s': operand '%s' is defined neither in its region nor "
                       "before the op that holds the region",
                       in->name, in->opnd[i]);
    else if (j < 0)
      st = cf_hlo_fail(r, in->line,
                       "instruction '%s': operand '%s' is not defined in computation '%s'",
                       in->name, in->opnd[i], c->name);
    else if (j >= k)
      st = cf_hlo_fail(r, in->line, "instruction '%s': operand '%s' is defined after it (line %d)",
                       in->name, in->opnd[i], c->ins[j].line);
    else
      ops[i] = &vals[j];
  }
  if (!st) st = check_async_operand(r, c, in);
  if (st) goto done;
  bool binary = !strcmp(op, "add") || !strcmp(op, "subtract") || !strcmp(op, "multiply");
  bool imported = false, splatted = false;
  bool passed = false; /* the value of an operand passed on: of the type in declares */
  double splat;
  const hshape *t = &in->shape;
  if (!strcmp(op, "parameter")) {
    st = eval_parameter(r, in, at_entry, args, n_args, out);
  } else if (!strcmp(op, "constant")) {
    st = eval_constant(r, in, at_entry, out);
  } else if (!strcmp(op, "tuple")) {
    st = emit_tuple(r, in, ops, out);
    if (!st && out->depth > HLO_MAX_TUPLE)
      st = cf_hlo_fail(r, in->line, "instruction '%s': tuples nested deeper than %d", in->name,
                       HLO_MAX_TUPLE);
  } else if (!strcmp(op, "get-tuple-element")) {
    const hattr *ia = cf_hlo_attr(in, "index");
    int64_t idx = -1;
    const char *p = ia ? ia->val.p : NULL;
    if (!ia || !cf_hlo_read_int(&p, ia->val.p + ia->val.n, INT32_MAX, &idx) ||
        p != ia->val.p + ia->val.n)
      st = cf_hlo_fail(r, in->line, "instruction '%s': get-tuple-element needs index=N", in->name);
    else if (in->n_opnd != 1 || ops[0]->n < 0 || idx >= ops[0]->n)
      st = cf_hlo_fail(r, in->line, "instruction '%s': get-tuple-element index=%lld of %s",
                       in->name, (long long)idx,
                       in->n_opnd != 1 ? "other than one operand"
                       : ops[0]->n < 0 ? "an array"
                                       : "a shorter tuple");
    else
      *out = ops[0]->elem[idx];
  } else if (!strcmp(op, "call")) {
    hcomp *callee = cf_hlo_attr_comp(r, in, "to_apply");
    if (!callee) callee = cf_hlo_attr_comp(r, in, "calls");
    hval *argv = in->n_opnd ? malloc((size_t)in->n_opnd * sizeof *argv) : NULL;
    if (!callee)
      st = cf_hlo_fail(r, in->line,
                       "instruction '%s': call needs to_apply=COMPUTATION of the module", in->name);
    else if (in->n_opnd && !argv)
      st = cf_hlo_oom(r, in->line);
    for (int i = 0; i < in->n_opnd && !st; i++)
      argv[i] = *ops[i];
    if (!st) st = eval_comp(r, callee, argv, in->n_opnd, out);
    /* StableHLO's async_start (a call of its region) declares its future's
     * type: what the region returns (its verifier's inferred type) */
    if (!st && in->spelled && !strcmp(in->spelled, "stablehlo.async_start"))
      st = check_declared(r, in, &in->shape, out, "", "its region");
    free(argv);
  } else if (!strcmp(op, "async-start") && cf_hlo_attr_comp(r, in, "calls")) {
    /* the computation it calls, run as a call ((operands), result) for
     * async-update and async-done, as XLA's async wrapping of a collective
     * (AsyncCollectiveCreator) runs it */
    hval *pair = cf_arena_array(&r->scratch, 2, sizeof *pair);
    hval *argv = in->n_opnd ? cf_arena_array(&r->scratch, (size_t)in->n_opnd, sizeof *argv) : NULL;
    if (!pair || (in->n_opnd && !argv)) return cf_hlo_oom(r, in->line);
    pair[0] = (hval){.n = in->n_opnd, .elem = argv};
    for (int i = 0; i < in->n_opnd; i++) {
      argv[i] = *ops[i];
      if (argv[i].depth + 1 > pair[0].depth) pair[0].depth = argv[i].depth + 1;
    }
    st = eval_comp(r, cf_hlo_attr_comp(r, in, "calls"), argv, in->n_opnd, &pair[1]);
    *out = (hval){.n = 2,
                  .elem = pair,
                  .depth = 1 + (pair[0].depth > pair[1].depth ? pair[0].depth : pair[1].depth)};
  } else if ((!strcmp(op, "async-update") || !strcmp(op, "async-done")) && in->n_opnd == 1 &&
             ops[0]->n == 2) {
    *out = !strcmp(op, "async-done") ? ops[0]->elem[1] : *ops[0];
    passed = true;
  } else if (!strcmp(op, "while") || !strcmp(op, "conditional")) {
    st = eval_control(r, in, at_entry, ops, out);
  } else if (!strcmp(op, "all-reduce") || !strcmp(op, "all-reduce-start") ||
             !strcmp(op, "all-gather") || !strcmp(op, "all-gather-start") ||
             !strcmp(op, "reduce-scatter") || !strcmp(op, "reduce-scatter-start")) {
    st = eval_collective(r, in, at_entry, ops, out);
  } else if (!strcmp(op, "collective-broadcast")) {
    st = eval_cbcast(r, in, at_entry, ops, out);
  } else if (!strcmp(op, "all-to-all")) {
    st = eval_alltoall(r, in, at_entry, ops, out);
  } else if (!strcmp(op, "collective-permute") || !strcmp(op, "collective-permute-start")) {
    st = eval_permute(r, in, at_entry, ops, out);
  } else if (!strcmp(op, "collective-permute-done") && in->n_opnd == 1 && ops[0]->n == 2) {
    *out = ops[0]->elem[1];
    passed = true;
  } else if (!strcmp(op, "-forward") && in->n_opnd == 1) {
    *out = *ops[0]; /* a StableHLO region's return of a value around it (no HLO opcode) */
  } else if (!strcmp(op, "all-reduce-done") && in->n_opnd == 1) {
    *out = *ops[0];
    passed = true;
  } else if ((!strcmp(op, "all-gather-done") || !strcmp(op, "reduce-scatter-done")) &&
             in->n_opnd == 1 && ops[0]->n == 2) {
    *out = ops[0]->elem[1];
    passed = true;
  } else if (binary && in->n_opnd == 2 && exact_array(ops[0]) && exact_array(ops[1]) && t->n < 0 &&
             ops[0]->type->dt == t->dt && ops[1]->type->dt == t->dt &&
             cf_shape_equal(&ops[0]->type->s, &t->s) && cf_shape_equal(&ops[1]->type->s, &t->s)) {
    cf_op ir = op[0] == 'a' ? CF_OP_ADD : op[0] == 's' ? CF_OP_SUB : CF_OP_MUL;
    st = emit_op(r, in, at_entry, ir, ops, 2, NULL, out);
  } else if (!strcmp(op, "broadcast") && in->n_opnd == 1 && t->n < 0 && t->exact &&
             splat_of(r, ops[0], &splat) &&
             ((st = eval_splat_broadcast(r, in, at_entry, splat, out, &splatted)) || splatted)) {
    /* a Constant, or an error */
  } else if (!strcmp(op, "copy") && in->n_opnd == 1 && exact_array(ops[0]) && t->n < 0 &&
             ops[0]->type->dt == t->dt && cf_shape_equal(&ops[0]->type->s, &t->s)) {
    *out = *ops[0]; /* XLA's copy: the same values, perhaps in another layout */
  } else if (!strcmp(op, "convert") && in->n_opnd == 1 && exact_array(ops[0]) && t->n < 0 &&
             t->exact && cf_shape_equal(&ops[0]->type->s, &t->s)) {
    st = emit_op(r, in, at_entry, CF_OP_CAST, ops, 1, NULL, out);
  } else if ((!strcmp(op, "reshape") || !strcmp(op, "bitcast")) && in->n_opnd == 1 &&
             exact_array(ops[0]) && t->n < 0 && ops[0]->type->dt == t->dt) {
    int64_t a, b;
    if (cf_shape_elements(&ops[0]->type->s, &a) && cf_shape_elements(&t->s, &b) && a == b)
      st = emit_op(r, in, at_entry, CF_OP_RESHAPE, ops, 1, NULL, out);
    else
      st = emit_opaque(r, in, at_entry, ops, op, out);
  } else if (!strcmp(op, "dot") && in->n_opnd == 2 && dot_is_matmul(in, ops[0], ops[1])) {
    st = emit_op(r, in, at_entry, CF_OP_MATMUL, ops, 2, NULL, out);
  } else if (!strcmp(op, "custom-call") && in->n_opnd &&
             (is_target(in, "\"xla.sdy.GlobalToLocalShape\"") ||
              is_target(in, "\"SPMDFullToShardShape\"")) &&
             !(st = eval_shard_entry(r, c, in, at_entry, ops, out, &imported)) && imported) {
    /* each rank's block: see eval_shard_entry */
  } else if (st) {
    /* eval_shard_entry failed */
  } else if (!strcmp(op, "custom-call") && in->n_opnd && forwards_operands(in)) {
    /* per-rank, a value's local shard is the value: see forwards_operands */
    if (in->n_opnd == 1) {
      *out = *ops[0];
    } else if (!(st = emit_tuple(r, in, ops, out))) {
      if (out->depth > HLO_MAX_TUPLE)
        st = cf_hlo_fail(r, in->line, "instruction '%s': tuples nested deeper than %d", in->name,
                         HLO_MAX_TUPLE);
    }
  } else {
    /* everything else keeps shape, dtype and dependencies */
    char type[200];
    const hattr *target = cf_hlo_attr(in, "custom_call_target");
    const hattr *kind = cf_hlo_attr(in, "kind");
    cf_span extra = target ? target->val : kind ? kind->val : (cf_span){"", 0};
    if (extra.n >= 2 && extra.p[0] == '"') extra = (cf_span){extra.p + 1, extra.n - 2};
    bool printable = true;
    for (size_t i = 0; i < extra.n; i++)
      printable &= extra.p[i] > ' ' && extra.p[i] < 127;
    if (extra.n && printable)
      snprintf(type, sizeof type, "%s:%.*s", op, (int)(extra.n > 120 ? 120 : extra.n), extra.p);
    else
      snprintf(type, sizeof type, "%s", op);
    int64_t inner = 0;
    if ((st = inner_collectives(r, in, 0, &inner))) goto done;
    if (inner) /* never hidden: the warning (and --strict) names them */
      snprintf(type + strlen(type), sizeof type - strlen(type),
               " (%lld collective%s inside, not run)", (long long)inner, inner == 1 ? "" : "s");
    st = emit_opaque(r, in, at_entry, ops, type, out);
  }
  if (!st && passed) st = check_declared(r, in, &in->shape, out, "", "its operand");
  if (!st && cf_hlo_attr(in, "control-predecessors")) st = keep_order(r, c, k, vals);
done:
  if (ops != small) free(ops);
  return st;
}

static cf_status eval_comp(hlo_reader *r, hcomp *c, const hval *args, int n_args, hval *out) {
  if (c->active) return cf_hlo_fail(r, c->line, "computation '%s' calls itself", c->name);
  if (r->depth >= HLO_MAX_CALLS)
    return cf_hlo_fail(r, c->line, "calls nested deeper than %d", HLO_MAX_CALLS);
  hval *vals = calloc((size_t)c->n_ins, sizeof *vals);
  if (!vals) return cf_hlo_oom(r, c->line);
  c->active = true;
  r->depth++;
  hscope sc = {c, vals, 0, r->scope};
  r->scope = &sc;
  cf_status st = CF_OK;
  for (int k = 0; k < c->n_ins && !st; k++) {
    sc.k = k;
    st = eval_instr(r, c, k, vals, args, n_args);
  }
  if (!st) *out = vals[c->root];
  r->scope = sc.up;
  c->active = false;
  r->depth--;
  free(vals);
  return st;
}

/* Outputs for the arrays of the ENTRY result: output, or output.0, output.1, ...
 * A tuple may hold one value many times (tuple(t, t) of tuple(t, t) ...), so
 * its leaves are paid for from the work budget. */
static cf_status emit_outputs(hlo_reader *r, const hval *v, bool many, int *k) {
  int line = r->entry->ins[r->entry->root].line, idx;
  if (v->n >= 0) {
    cf_status st = charge(r, v->n, line);
    for (int i = 0; i < v->n && !st; i++)
      st = emit_outputs(r, &v->elem[i], true, k);
    return st;
  }
  char name[32];
  if (many)
    snprintf(name, sizeof name, "output.%d", (*k)++);
  else
    snprintf(name, sizeof name, "output");
  cf_status st = add_node(r, name, "", true, CF_OP_OUTPUT, line, &idx);
  return st ? st : cf_node_set_inputs(r->g, idx, 1, &v->ref);
}

/* The devices of a module whose collectives span every device
 * (replica_groups={}) but that says not how many: those an all-gather or
 * reduce-scatter over every device implies by its shapes (the first one of
 * the module), else 1, XLA's default replica_count, as XLA's own tests
 * write their modules. cf_hlo_build takes it when the replica groups name
 * fewer devices. */
static int64_t implied_world(hlo_reader *r) {
  for (int ci = 0; ci < r->n_comps; ci++) {
    const hcomp *c = &r->comps[ci];
    for (int k = 0; k < c->n_ins; k++) {
      const hinstr *in = &c->ins[k];
      bool gather = !strncmp(in->opcode, "all-gather", 10),
           start = strstr(in->opcode, "-start") != NULL; /* shape (operand, result) */
      const hattr *rg = cf_hlo_attr(in, "replica_groups");
      int64_t d;
      int nd, j = in->n_opnd ? cf_hlo_map_find(&c->map, in->opnd[0]) : -1;
      if ((!gather && strncmp(in->opcode, "reduce-scatter", 14)) || j < 0 ||
          strstr(in->opcode, "-done") || (start && in->shape.n != 2) ||
          (rg && !cf_span_is(rg->val, "{}")) ||
          !int_set(cf_hlo_attr(in, "dimensions"), &d, 1, &nd) || nd != 1)
        continue;
      const hshape *a = &c->ins[j].shape, *b = start ? &in->shape.elem[1] : &in->shape;
      if (in->n_opnd > 1) { /* the tuple form: its first operand and result */
        if (b->n != in->n_opnd) continue;
        b = &b->elem[0];
      }
      if (gather) {
        const hshape *t = a;
        a = b;
        b = t;
      }
      /* a is the larger: a.dims[d] = n * b.dims[d] */
      if (a->n >= 0 || b->n >= 0 || d >= a->s.rank || d >= b->s.rank || b->s.dims[d] <= 0 ||
          a->s.dims[d] % b->s.dims[d])
        continue;
      int64_t n = a->s.dims[d] / b->s.dims[d];
      if (n >= 1 && n <= CF_MAX_WORLD) return n;
    }
  }
  return 1;
}

/* The results of the tuple collectives read as one fused node (hfused)
 * against what their operands make on the module's world devices: the
 * IR node declares none. */
static cf_status check_fused(hlo_reader *r, int64_t world) {
  for (const hfused *f = r->fused; f; f = f->next) {
    int64_t size = f->gs->n_sub ? f->gs->off[1] - f->gs->off[0] : world;
    for (int i = 0; i < f->res->n; i++) {
      const hshape *a = f->opnd[i], *b = &f->res->elem[i];
      cf_shape want = a->s;
      bool none = false; /* no result: too large, or not a multiple of the group */
      if (f->kind && f->dim < want.rank) {
        int64_t *d = &want.dims[f->dim];
        if (f->kind == 1)
          none = !cf_mul_i64(*d, size, d);
        else if (!(none = *d % size != 0))
          *d /= size;
      }
      char b1[CF_MAX_RANK * 24], b2[CF_MAX_RANK * 24];
      if (a->dt != b->dt)
        return cf_hlo_fail(r, f->in->line, "node '%s#%d': declared dtype %s but inferred %s",
                           f->in->name, i, cf_dtype_name(b->dt), cf_dtype_name(a->dt));
      if (none || !cf_shape_equal(&want, &b->s))
        return cf_hlo_fail(r, f->in->line, "node '%s#%d': declared shape (%s) but inferred (%s)",
                           f->in->name, i, cf_shape_format(&b->s, b1, sizeof b1),
                           none ? "none: not a multiple of the group"
                                : cf_shape_format(&want, b2, sizeof b2));
    }
  }
  return CF_OK;
}

cf_status cf_hlo_build(hlo_reader *r) {
  hval root;
  cf_status st = eval_comp(r, r->entry, NULL, -1, &root);
  int k = 0;
  if (!st) st = emit_outputs(r, &root, root.n >= 0, &k);
  if (st) return st;
  int64_t world = r->partitions || r->replicas
                      ? (r->partitions ? r->partitions : 1) * (r->replicas ? r->replicas : 1)
                      : (r->max_rank + 1 > r->mesh_world ? r->max_rank + 1 : r->mesh_world);
  /* an all-gather or reduce-scatter over {} whose shapes imply more devices
   * than the groups name (those groups' collectives then Opaque: groups of
   * one device with shapes for more, as XLA's verifier lets through) */
  if (!r->partitions && !r->replicas && r->world_line) {
    int64_t implied = implied_world(r);
    if (implied > world) world = implied;
  }
  if ((st = check_fused(r, world))) return st;
  r->g->world_size = world;
  if (r->module && !(r->g->name = cf_arena_strdup(&r->g->arena, r->module)))
    return cf_hlo_oom(r, 0);
  return CF_OK;
}
