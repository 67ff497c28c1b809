/* stablehlo.c - reader for StableHLO MLIR text, as JAX prints it
 * (`jax.jit(f).lower(x).as_text()`): scanning, functions and ops, and the
 * entry point cf_stablehlo_read.
 *
 * The text is cleaned and cut into statements by stablehlo_scan.c (as in
 * the HLO reader, an op with regions is one statement). Each func.func, each
 * sdy.manual_computation body and each collective's reduction region becomes
 * a computation of the HLO reader's parsed module, each op an instruction
 * with the HLO opcode of the same semantics (stablehlo.add is add,
 * all_reduce is all-reduce, func.call is call, a manual computation is a
 * call between the shard_map's global-to-local and local-to-global custom
 * calls), and the HLO reader's evaluator does the rest (hlo_eval.c): calls
 * inlined with the cycle check, variadic collectives fused, replica groups
 * declared, everything it has no IR op for imported as Opaque.
 */
#include "stablehlo_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SKIP(p, e) ((p) = cf_hlo_skip((p), (e)))

/* ------------------------------------------------------------------ */
/* building computations                                              */

typedef struct ibuf {
  hinstr *v;
  cf_span *captures; /* text of regions whose uses of outer values are operands */
  int n, cap;
} ibuf;

static hinstr *ibuf_add(sh_reader *s, ibuf *b, int line) {
  if (b->n == b->cap) {
    int cap = b->cap ? 2 * b->cap : 16;
    hinstr *v = realloc(b->v, (size_t)cap * sizeof *v);
    if (v) b->v = v;
    cf_span *c = v ? realloc(b->captures, (size_t)cap * sizeof *c) : NULL;
    if (c) b->captures = c;
    if (!v || !c) {
      cf_hlo_oom(s->r, line);
      return NULL;
    }
    b->cap = cap;
  }
  hinstr *in = &b->v[b->n];
  memset(in, 0, sizeof *in);
  b->captures[b->n++] = (cf_span){NULL, 0};
  in->line = line;
  in->shape.n = -1;
  return in;
}

static const char *str(sh_reader *s, const char *p, size_t n) { return cf_hlo_str(s->r, p, n); }

static cf_status set_attrs(sh_reader *s, hinstr *in, int n, const char *const *kv) {
  if (!n) return CF_OK;
  if (!(in->attr = cf_arena_array(&s->r->scratch, (size_t)n, sizeof *in->attr)))
    return cf_hlo_oom(s->r, in->line);
  for (int i = 0; i < n; i++) {
    const char *k = kv[2 * i], *v = kv[2 * i + 1];
    in->attr[i] = (hattr){{k, strlen(k)}, {v, strlen(v)}};
  }
  in->n_attr = n;
  return CF_OK;
}

/* The operands: the uses in [p, e) in order, copied to the arena. */
static cf_status set_operands(sh_reader *s, hinstr *in, const char *p, const char *e, bool deep) {
  const char **v = NULL;
  int n = 0, cap = 0;
  cf_status st = cf_sh_collect_uses(s, in->line, p, e, deep, &v, &n, &cap);
  if (!st && n && !(in->opnd = cf_arena_array(&s->r->scratch, (size_t)n, sizeof *v)))
    st = cf_hlo_oom(s->r, in->line);
  if (!st && n) memcpy(in->opnd, v, (size_t)n * sizeof *v);
  in->n_opnd = st ? 0 : n;
  free(v);
  return st;
}

/* What a body returns: its values' types are checked against want when
 * check (a function's declared results); n and line say how many values
 * its return gives, and where. */
typedef struct body_ret {
  const hshape *want;
  int n_want;
  bool check;
  int n, line; /* out */
} body_ret;

/* The values computation c returns (n of them, as parse_body builds it: the
 * root, or the root tuple's operands) against the types want[0..n_want);
 * errors name line and who. */
static cf_status check_results(sh_reader *s, const hcomp *c, int n, int line, const char *who,
                               const hshape *want, int n_want) {
  if (n != n_want)
    return cf_hlo_fail(s->r, line, "%s returns %d value%s but declares %d", who, n,
                       n == 1 ? "" : "s", n_want);
  for (int i = 0; i < n; i++) {
    const hinstr *root = &c->ins[c->root];
    int k = n == 1 ? c->root : cf_hlo_map_find(&c->map, root->opnd[i]);
    char a[200], b[200];
    if (k >= 0 && !cf_sh_type_equal(&c->ins[k].shape, &want[i])) /* (undefined: evaluator) */
      return cf_hlo_fail(s->r, line, "%s: result %d ('%%%s') is %s but %s is declared", who, i,
                         c->ins[k].name, cf_sh_type_text(&c->ins[k].shape, a, sizeof a),
                         cf_sh_type_text(&want[i], b, sizeof b));
  }
  return CF_OK;
}

static cf_status parse_body(sh_reader *s, const char *name, int line, const char *bs,
                            const char *be, int body_line, const char *args, const char *args_e,
                            body_ret *br, int *out);

/* A region `{ ^bb0(%a: T, ...): ops; stablehlo.return %x }` at p as a new
 * computation; its name (for to_apply) in *name. A region without ^bb0
 * takes the arguments [args, args_e) when args (a pretty while's), else
 * none. */
static cf_status region_comp_args(sh_reader *s, const char *p, const char *e, int line,
                                  const char *args, const char *args_e, bool forward_ok,
                                  const char **name) {
  const char *bs = p + 1, *be = cf_sh_past(s, p, e) - 1;
  const char *q = cf_hlo_skip(bs, be);
  int body_line = line;      /* the line at bs, where parse_body starts counting */
  if (q < be && *q == '^') { /* ^bb0(%a: T, %b: T): */
    body_line += cf_sh_count_nl(s, p, q);
    const char *lp = memchr(q, '(', (size_t)(be - q));
    const char *nl = cf_sh_stmt_end(s, q, be);
    if (lp && lp < nl) {
      args = lp + 1;
      args_e = cf_sh_past(s, lp, be) - 1;
    }
    bs = nl;
    body_line += cf_sh_count_nl(s, q, nl);
  }
  char nm[48];
  snprintf(nm, sizeof nm, "region-line-%d-%d", line, s->n_regions++); /* '-': no MLIR symbol */
  if (!(*name = str(s, nm, strlen(nm)))) return cf_hlo_oom(s->r, line);
  int idx;
  bool was = s->forward_ok;
  s->forward_ok = forward_ok;
  cf_status st = parse_body(s, *name, line, bs, be, body_line, args, args_e, NULL, &idx);
  s->forward_ok = was;
  if (!st) s->comps[idx].nested = true;
  return st;
}

static cf_status region_comp(sh_reader *s, const char *p, const char *e, int line,
                             const char **name) {
  return region_comp_args(s, p, e, line, NULL, NULL, false, name);
}

/* Results: "%0" or "%0:3"; *n is the count. */
/* The results before an op's '=': `%NAME`, `%NAME:N`, or a list `%a, %b`
 * (MLIR's pretty form of several results), whose names go to *list
 * (scratch; NULL for the other forms) while *name is the first. */
static cf_status parse_results(sh_reader *s, const char *p, const char *e, int line, cf_span *name,
                               int *n, const char ***list) {
  *list = NULL;
  p = cf_hlo_skip(p, e);
  if (p >= e || *p != '%') return cf_hlo_fail(s->r, line, "expected '%%NAME = ...'");
  const char *q = cf_sh_read_use(p, e, name);
  *n = 1;
  q = cf_hlo_skip(q, e);
  if (q < e && *q == ':') {
    int64_t k;
    q = cf_hlo_skip(q + 1, e);
    if (!cf_hlo_read_int(&q, e, CF_MAX_OPERANDS, &k) || !k)
      return cf_hlo_fail(s->r, line, "expected a result count after ':'");
    *n = (int)k;
  } else if (q < e && *q == ',') {
    int k = cf_hlo_count_top(p, e, ',') + 1;
    if (k > CF_MAX_OPERANDS)
      return cf_hlo_fail(s->r, line, "more than %d results", CF_MAX_OPERANDS);
    if (!(*list = cf_arena_array(&s->r->scratch, (size_t)k, sizeof **list)))
      return cf_hlo_oom(s->r, line);
    for (int i = 0; i < k; i++) {
      cf_span nm;
      p = cf_hlo_skip(i ? p + 1 : p, e);
      if (p >= e || *p != '%' || (q = cf_sh_read_use(p, e, &nm), !nm.n) ||
          memchr(nm.p, '#', nm.n) || nm.n > CF_MAX_NAME - 8)
        return cf_hlo_fail(s->r, line, "expected '%%NAME, %%NAME, ... = ...'");
      if (!((*list)[i] = str(s, nm.p, nm.n))) return cf_hlo_oom(s->r, line);
      p = cf_hlo_skip(q, e);
      if (p < e && *p != ',') break;
    }
    *n = k;
    q = p;
  }
  if (cf_hlo_skip(q, e) != e || !name->n || memchr(name->p, '#', name->n))
    return cf_hlo_fail(s->r, line, "expected '%%NAME', '%%NAME:N' or '%%NAME, %%NAME, ...'");
  if (name->n > CF_MAX_NAME - 8)
    return cf_hlo_fail(s->r, line, "value name longer than %d bytes", CF_MAX_NAME - 8);
  return CF_OK;
}

/* The op's type signature after its last top-level ':': operand types (a
 * function type's inputs) and result types. */
typedef struct sig {
  hshape *in, *out;
  int n_in, n_out;
} sig;

static cf_status parse_sig(sh_reader *s, const char *colon, const char *e, int line, int n_res,
                           sig *g) {
  memset(g, 0, sizeof *g);
  const char *p = cf_hlo_skip(colon + 1, e);
  cf_status st;
  const char *te = cf_sh_types_end(s, p, e);
  if (p < te && *p == '(') {
    const char *pe = cf_sh_past(s, p, te);
    if ((st = cf_sh_type_list(s, p + 1, pe - 1, line, &g->in, &g->n_in))) return st;
    p = cf_hlo_skip(pe, te);
    if (te - p < 2 || p[0] != '-' || p[1] != '>')
      return cf_hlo_fail(s->r, line, "expected '->' in the op's function type");
    p = cf_hlo_skip(p + 2, te);
    if (p < te && *p == '(') {
      const char *oe = cf_sh_past(s, p, te);
      return cf_sh_type_list(s, p + 1, oe - 1, line, &g->out, &g->n_out);
    }
    return cf_sh_type_list(s, p, te, line, &g->out, &g->n_out);
  }
  /* `chlo.square %x : T -> U`: a function type of one input, unparenthesised */
  const char *arrow = NULL;
  for (const char *q = p; q + 1 < te && !arrow; q = cf_sh_step(s, q, te))
    if (q[0] == '-' && q[1] == '>') arrow = q;
  if (arrow) {
    if ((st = cf_sh_type_list(s, p, arrow, line, &g->in, &g->n_in))) return st;
    p = cf_hlo_skip(arrow + 2, te);
    if (p < te && *p == '(') {
      const char *oe = cf_sh_past(s, p, te);
      return cf_sh_type_list(s, p + 1, oe - 1, line, &g->out, &g->n_out);
    }
    return cf_sh_type_list(s, p, te, line, &g->out, &g->n_out);
  }
  if ((st = cf_sh_type_list(s, p, te, line, &g->out, &g->n_out))) return st;
  if (n_res >= 1 && g->n_out > n_res) { /* `select %p, %a, %b : P, T`: results last */
    g->in = g->out;
    g->n_in = g->n_out - n_res;
    g->out += g->n_in;
    g->n_out = n_res;
    return CF_OK;
  }
  if (g->n_out == 1 && n_res == 1) { /* `stablehlo.add %a, %b : T`: T for all */
    g->in = g->out;
    g->n_in = 1;
  }
  return CF_OK;
}

/* The result shape of an op with n results. */
static cf_status result_shape(sh_reader *s, hinstr *in, const sig *g, int n) {
  if (g->n_out != n)
    return cf_hlo_fail(s->r, in->line, "op '%s': %d results but %d result types", in->name, n,
                       g->n_out);
  if (n == 1) {
    in->shape = g->out[0];
    return CF_OK;
  }
  in->shape = (hshape){.n = n, .elem = g->out};
  return CF_OK;
}

/* get-tuple-element instructions NAME#i for the results of a multi-result op. */
static cf_status split_results(sh_reader *s, ibuf *b, const char *base, const sig *g, int n,
                               int line, const char *const *res_names) {
  for (int i = 0; i < n; i++) {
    char idx[16], nm[CF_MAX_NAME + 1];
    snprintf(idx, sizeof idx, "%d", i);
    snprintf(nm, sizeof nm, "%s#%d", base, i);
    hinstr *in = ibuf_add(s, b, line);
    if (!in) return CF_ERR_NO_MEMORY;
    in->opcode = "get-tuple-element";
    const char *rn = res_names ? res_names[i] : nm;
    const char *kv[] = {"index", str(s, idx, strlen(idx))};
    if (!(in->name = str(s, rn, strlen(rn))) || !kv[1] ||
        !(in->opnd = cf_arena_array(&s->r->scratch, 1, sizeof *in->opnd)))
      return cf_hlo_oom(s->r, line);
    in->opnd[0] = base;
    in->n_opnd = 1;
    in->shape = g->out[i];
    cf_status st = set_attrs(s, in, 1, kv);
    if (st) return st;
  }
  return CF_OK;
}

/* An instruction `name = custom-call(operand)` to target (quoted). */
/* A one-operand custom-call to target; sharding (an entry's Shardy text
 * `<@mesh, [{"x"}, {}]>`, or NULL) becomes its xla.sdy.in_shardings, as
 * JAX writes them into HLO, so the HLO evaluator takes the rank's block
 * (hlo_sharding.c). */
static cf_status custom_call(sh_reader *s, ibuf *b, const char *name, const char *operand,
                             const char *target, const hshape *shape, cf_span sharding,
                             int line) {
  hinstr *in = ibuf_add(s, b, line);
  if (!in) return CF_ERR_NO_MEMORY;
  in->name = name;
  in->opcode = "custom-call";
  in->shape = *shape;
  if (!(in->opnd = cf_arena_array(&s->r->scratch, 1, sizeof *in->opnd)))
    return cf_hlo_oom(s->r, line);
  in->opnd[0] = operand;
  in->n_opnd = 1;
  const char *kv[] = {"custom_call_target", target, "frontend_attributes", NULL};
  if (!sharding.p) return set_attrs(s, in, 1, kv);
  static const char head[] = "{xla.sdy.in_shardings=\"#sdy.sharding_per_value<[",
                    tail[] = "]>\"}";
  size_t cap = sizeof head + 2 * sharding.n + sizeof tail, o = 0;
  char *fa = cf_arena_alloc(&s->r->scratch, cap);
  if (!fa) return cf_hlo_oom(s->r, line);
  memcpy(fa, head, sizeof head - 1);
  o = sizeof head - 1;
  for (size_t i = 0; i < sharding.n; i++) { /* quoted inside the attribute's string */
    if (sharding.p[i] == '"' || sharding.p[i] == '\\') fa[o++] = '\\';
    fa[o++] = sharding.p[i];
  }
  memcpy(fa + o, tail, sizeof tail);
  kv[3] = fa;
  return set_attrs(s, in, 2, kv);
}

static const char *sh_name(sh_reader *s, const char *base, const char *suffix, int k) {
  char nm[CF_MAX_NAME + 32];
  snprintf(nm, sizeof nm, "%s%s%d", base, suffix, k);
  return str(s, nm, strlen(nm));
}

static bool is_list(cf_span v) { return v.n >= 2 && v.p[0] == '[' && v.p[v.n - 1] == ']'; }

/* The next comma-separated entry of a list in [*pp, e): false at the end. */
static bool next_entry(const sh_reader *s, const char **pp, const char *e, cf_span *out) {
  const char *p = cf_hlo_skip(*pp, e);
  if (p >= e) return false;
  const char *pe = cf_sh_find_top(s, p, e, ',');
  if (!pe) pe = e;
  *out = (cf_span){p, (size_t)(pe - p)};
  *pp = pe < e ? pe + 1 : e;
  return out->n > 0;
}

/* sdy.manual_computation(%a, ...) in_shardings=[...] out_shardings=[...]
 * manual_axes={...} (%x: T, ...) { body } : (GLOBAL...) -> GLOBAL...
 * -> each operand to its local shape (GlobalToLocalShape where the sharding
 * splits it, the value itself where not), a call of the body, and each
 * result back (LocalToGlobalShape, the per-rank identity). */
static cf_status manual_computation(sh_reader *s, ibuf *b, const char *base, int n_res,
                                    const char *p, const char *colon, const sig *g, int line) {
  hlo_reader *r = s->r;
  cf_status st;
  p = cf_hlo_skip(p, colon);
  if (p >= colon || *p != '(') return cf_hlo_fail(r, line, "sdy.manual_computation: expected '('");
  const char *ope = cf_sh_past(s, p, colon);
  /* the body: the brace group right after the (%ARG: TYPE, ...) group */
  const char *body = NULL, *args = NULL;
  for (const char *q = ope; q < colon; q = cf_sh_step(s, q, colon)) {
    const char *nx = *q == '(' ? cf_hlo_skip(cf_sh_past(s, q, colon), colon) : NULL;
    if (nx && nx < colon && *nx == '{') {
      args = q;
      body = nx;
    }
  }
  if (!args || !body)
    return cf_hlo_fail(r, line, "sdy.manual_computation: expected '(%%ARG: TYPE, ...) { BODY }'");
  cf_span ins, outs, manual = {NULL, 0};
  if (!cf_sh_attr(s, ope, args, "in_shardings", &ins) ||
      !cf_sh_attr(s, ope, args, "out_shardings", &outs))
    return cf_hlo_fail(r, line,
                       "sdy.manual_computation needs in_shardings=[...] and "
                       "out_shardings=[...]");
  cf_sh_attr(s, ope, args, "manual_axes", &manual);
  hinstr tmp = {.line = line};
  if ((st = set_operands(s, &tmp, p + 1, ope - 1, false))) return st;
  if (tmp.n_opnd != g->n_in || n_res != g->n_out)
    return cf_hlo_fail(r, line,
                       "sdy.manual_computation: %d operands and %d results but a type of %d -> %d",
                       tmp.n_opnd, n_res, g->n_in, g->n_out);
  int bidx;
  char nm[CF_MAX_NAME + 16];
  snprintf(nm, sizeof nm, "sdy.manual_computation-line-%d", line); /* '-': no MLIR symbol */
  const char *body_name = str(s, nm, strlen(nm));
  if (!body_name) return cf_hlo_oom(r, line);
  if (!is_list(ins) || !is_list(outs))
    return cf_hlo_fail(r, line,
                       "sdy.manual_computation: in_shardings and out_shardings are lists "
                       "'[<@mesh, [...]>, ...]'");
  /* the body returns each result's local type: out_shardings cut the global one */
  hshape *local_out = cf_arena_array(&r->scratch, (size_t)n_res + 1, sizeof *local_out);
  if (!local_out) return cf_hlo_oom(r, line);
  const char *sp = outs.p + 1, *se = outs.p + outs.n - 1; /* inside [...] */
  for (int i = 0; i < n_res; i++) {
    cf_span one;
    bool have = next_entry(s, &sp, se, &one);
    local_out[i] = g->out[i];
    if (g->out[i].n >= 0) continue;
    if (!have)
      return cf_hlo_fail(r, line, "sdy.manual_computation: out_shardings has fewer than %d entries",
                         n_res);
    if ((st = cf_sh_local_shape(s, one, manual, &g->out[i].s, line, &local_out[i].s))) return st;
  }
  const char *aend = cf_sh_past(s, args, colon) - 1;
  body_ret br = {.want = local_out, .n_want = n_res}; /* checked below, after the operands */
  if ((st = parse_body(s, body_name, line, body + 1, cf_sh_past(s, body, colon) - 1,
                       line + cf_sh_count_nl(s, p, body + 1), args + 1, aend, &br, &bidx)))
    return st;
  hcomp *bc = &s->comps[bidx];
  /* operands to local shapes */
  const char **callargs = cf_arena_array(&r->scratch, (size_t)tmp.n_opnd + 1, sizeof *callargs);
  if (!callargs) return cf_hlo_oom(r, line);
  sp = ins.p + 1, se = ins.p + ins.n - 1;
  for (int i = 0; i < tmp.n_opnd; i++) {
    cf_span one;
    if (!next_entry(s, &sp, se, &one))
      return cf_hlo_fail(r, line, "sdy.manual_computation: in_shardings has fewer than %d entries",
                         tmp.n_opnd);
    const hshape *gt = &g->in[i], *lt = i < bc->n_ins ? &bc->ins[i].shape : NULL;
    callargs[i] = tmp.opnd[i];
    if (gt->n >= 0) continue;
    cf_shape local;
    if ((st = cf_sh_local_shape(s, one, manual, &gt->s, line, &local))) return st;
    if (!lt || strcmp(bc->ins[i].opcode, "parameter") || lt->n >= 0 ||
        !cf_shape_equal(&lt->s, &local))
      return cf_hlo_fail(r, line,
                         "sdy.manual_computation: operand %d's sharding gives a local shape that "
                         "is not the type of the body's argument %d",
                         i, i);
    if (cf_shape_equal(&local, &gt->s)) continue; /* replicated: the value itself */
    const char *ln = sh_name(s, base, ".local", i);
    if (!ln) return cf_hlo_oom(r, line);
    if ((st = custom_call(s, b, ln, tmp.opnd[i], "\"xla.sdy.GlobalToLocalShape\"", lt, one, line)))
      return st;
    callargs[i] = ln;
  }
  if ((st = check_results(s, bc, br.n, br.line, "sdy.manual_computation body", local_out, n_res)))
    return st;
  hinstr *call = ibuf_add(s, b, line);
  if (!call) return CF_ERR_NO_MEMORY;
  const char *cn = sh_name(s, base, ".body", 0);
  const char *kv[] = {"to_apply", body_name};
  if (!cn) return cf_hlo_oom(r, line);
  call->name = cn;
  call->opcode = "call";
  call->opnd = callargs;
  call->n_opnd = tmp.n_opnd;
  if ((st = set_attrs(s, call, 1, kv))) return st;
  /* results back to global shapes */
  for (int i = 0; i < n_res; i++) {
    const char *src = cn, *dst = base;
    if (n_res > 1) {
      hinstr *gte;
      char idx[16];
      snprintf(idx, sizeof idx, "%d", i);
      const char *gkv[] = {"index", str(s, idx, strlen(idx))};
      if (!(gte = ibuf_add(s, b, line))) return CF_ERR_NO_MEMORY;
      if (!gkv[1] || !(gte->name = src = sh_name(s, cn, "#", i)) ||
          !(dst = sh_name(s, base, "#", i)) ||
          !(gte->opnd = cf_arena_array(&r->scratch, 1, sizeof *gte->opnd)))
        return cf_hlo_oom(r, line);
      gte->opcode = "get-tuple-element";
      gte->opnd[0] = cn;
      gte->n_opnd = 1;
      if ((st = set_attrs(s, gte, 1, gkv))) return st;
    }
    bool split = !cf_shape_equal(&local_out[i].s, &g->out[i].s);
    if ((st = custom_call(s, b, dst, src, split ? "\"xla.sdy.LocalToGlobalShape\"" : "\"Sharding\"",
                          &g->out[i], (cf_span){NULL, 0}, line)))
      return st;
  }
  return CF_OK;
}

/* The MLIR op name without its dialect, when the dialect is StableHLO's. */
static cf_span short_name(cf_span op) {
  static const char *prefixes[] = {"stablehlo.", "mhlo."};
  for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
    size_t n = strlen(prefixes[i]);
    if (op.n > n && !memcmp(op.p, prefixes[i], n)) return (cf_span){op.p + n, op.n - n};
  }
  return op;
}

/* dot_general as a plain product: contracting lhs 1 with rhs 0, no batch. */
static bool dot_plain(const sh_reader *s, const char *p, const char *e) {
  cf_span v;
  int64_t l[2], r[2];
  int nl = 0, nr = 0;
  if (cf_sh_attr(s, p, e, "batching_dims", &v) ||
      cf_sh_attr(s, p, e, "lhs_batching_dimensions", &v))
    return false;
  if (cf_sh_attr(s, p, e, "contracting_dims", &v)) { /* [1] x [0] */
    const char *q = v.p, *qe = e;                 /* v is the first [...] */
    if (q >= qe || *q != '[' || !(q = cf_hlo_int_list(q, qe, ']', 64, l, 2, &nl))) return false;
    SKIP(q, qe);
    if (q >= qe || *q != 'x') return false;
    q = cf_hlo_skip(q + 1, qe);
    if (q >= qe || *q != '[' || !cf_hlo_int_list(q, qe, ']', 64, r, 2, &nr)) return false;
  } else {
    cf_span lv, rv;
    if (!cf_sh_attr(s, p, e, "lhs_contracting_dimensions", &lv) ||
        !cf_sh_attr(s, p, e, "rhs_contracting_dimensions", &rv) || !lv.n || !rv.n || *lv.p != '[' ||
        *rv.p != '[' || !cf_hlo_int_list(lv.p, lv.p + lv.n, ']', 64, l, 2, &nl) ||
        !cf_hlo_int_list(rv.p, rv.p + rv.n, ']', 64, r, 2, &nr))
      return false;
  }
  return nl == 1 && nr == 1 && l[0] == 1 && r[0] == 0;
}

/* A collective's attributes: groups, channel, global ids, and its HLO ones. */
static cf_status collective(sh_reader *s, hinstr *in, const char *p, const char *e,
                            const char *hlo_opcode, const char *dim_key) {
  hlo_reader *r = s->r;
  cf_span v;
  cf_status st;
  const char *kv[8];
  int n = 0;
  in->opcode = hlo_opcode;
  if (cf_sh_attr(s, p, e, "replica_groups", &v)) {
    if ((st = cf_sh_groups(s, in, v))) return st;
  } else {
    static const hrg all = {.all = true};
    in->rg = &all;
  }
  if (cf_sh_attr(s, p, e, "channel_handle", &v)) {
    cf_span h;
    int64_t id = 0;
    const char *q;
    if (v.n && (q = memchr(v.p, '<', v.n)) && cf_sh_attr(s, q, v.p + v.n, "handle", &h)) {
      const char *hp = h.p;
      if (!cf_hlo_read_int(&hp, h.p + h.n, INT32_MAX, &id))
        return cf_hlo_fail(r, in->line, "op '%s': channel_handle: bad handle", in->name);
    }
    if (id > 0) kv[n++] = "channel_id", kv[n++] = "1";
  }
  if (cf_sh_attr(s, p, e, "use_global_device_ids", &v))
    kv[n++] = "use_global_device_ids", kv[n++] = "true";
  if (cf_sh_attr(s, p, e, "has_dynamic_root", &v)) /* collective_broadcast's */
    kv[n++] = "has_dynamic_root", kv[n++] = "true";
  if (dim_key) {
    int64_t d = -1;
    const char *q;
    if (!cf_sh_attr(s, p, e, dim_key, &v) || !((q = v.p), cf_hlo_read_int(&q, v.p + v.n, 64, &d)))
      return cf_hlo_fail(r, in->line, "op '%s': %s needs %s = N", in->name, hlo_opcode, dim_key);
    char text[32];
    snprintf(text, sizeof text, "{%lld}", (long long)d);
    kv[n++] = "dimensions";
    if (!(kv[n++] = str(s, text, strlen(text)))) return cf_hlo_oom(r, in->line);
  }
  return set_attrs(s, in, n / 2, kv);
}

/* all_to_all's split_dimension, concat_dimension and split_count as
 * attributes (their digits) for the HLO evaluator. */
static cf_status dim_attrs(sh_reader *s, hinstr *in, const char *p, const char *e) {
  static const char *keys[] = {"split_dimension", "concat_dimension", "split_count"};
  hattr *a = cf_arena_array(&s->r->scratch, (size_t)in->n_attr + 3, sizeof *a);
  if (!a) return cf_hlo_oom(s->r, in->line);
  if (in->n_attr) memcpy(a, in->attr, (size_t)in->n_attr * sizeof *a);
  for (int i = 0; i < 3; i++) {
    cf_span v;
    const char *q;
    int64_t d;
    if (!cf_sh_attr(s, p, e, keys[i], &v) || !((q = v.p), cf_hlo_read_int(&q, v.p + v.n, 64, &d)))
      return cf_hlo_fail(s->r, in->line, "op '%s': all_to_all needs %s = N", in->name, keys[i]);
    a[in->n_attr++] = (hattr){{keys[i], strlen(keys[i])}, {v.p, (size_t)(q - v.p)}};
  }
  in->attr = a;
  return CF_OK;
}

/* A collective's reduction region `({ ... })` in [p, colon) as its to_apply
 * computation (line is p's). */
static cf_status reducer_region(sh_reader *s, hinstr *in, const char *p, const char *colon,
                                const char *e, int line) {
  const char *reg = NULL, *rn;
  for (const char *t = p; t < colon && !reg; t = cf_sh_step(s, t, colon))
    if (*t == '(' && *cf_hlo_skip(t + 1, colon) == '{') reg = cf_hlo_skip(t + 1, colon);
  if (!reg)
    return cf_hlo_fail(s->r, in->line, "op '%%%s': %s needs its reduction region '({ ... })'",
                       in->name, in->opcode);
  cf_status st = region_comp(s, reg, e, line + cf_sh_count_nl(s, p, reg), &rn);
  hattr *a = st ? NULL : cf_arena_array(&s->r->scratch, (size_t)in->n_attr + 1, sizeof *a);
  if (!st && !a) st = cf_hlo_oom(s->r, in->line);
  if (st) return st;
  if (in->n_attr) memcpy(a, in->attr, (size_t)in->n_attr * sizeof *a);
  a[in->n_attr++] = (hattr){{"to_apply", 8}, {rn, strlen(rn)}};
  in->attr = a;
  return CF_OK;
}

/* stablehlo.while, stablehlo.if and stablehlo.case (or mhlo's): each
 * region a computation of its own, the op the HLO reader's `while`
 * (condition=, body=) or `conditional` (branch_computations=), which the
 * evaluator reads into regions of the graph (hlo_eval.c; an if's then and
 * else are its true and false computations). The generic form
 * holds the regions in `({...}, {...})` with their ^bb0 arguments; the
 * pretty while `(%it = %x, ...) : T, ... cond {...} do {...}` names its
 * arguments in front and their types after ':'. Regions use the values
 * around them (hcomp.nested). [p, e) is the statement, line its line. */
static cf_status control_op(sh_reader *s, hinstr *in, cf_span op, cf_span sn, bool generic,
                            const char *p, const char *after, const char *colon, const char *e,
                            int line) {
  enum { MAX_REGIONS = 64 };
  hlo_reader *r = s->r;
  const char *reg[MAX_REGIONS];
  int n = 0;
  bool loop = cf_span_is(sn, "while");
  if (generic) { /* the (...) group of regions before the type */
    for (const char *t = after; t < colon && !n; t = cf_sh_step(s, t, colon)) {
      if (*t != '(' || *cf_hlo_skip(t + 1, colon) != '{') continue;
      const char *ge = cf_sh_past(s, t, colon) - 1;
      for (const char *q = cf_hlo_skip(t + 1, ge); q < ge;) {
        if (*q != '{')
          return cf_hlo_fail(r, line, "op '%%%s': %s: expected a region '{' at '%s'", in->name,
                             CF_SPAN_QUOTE(op), CF_SPAN_QUOTE(((cf_span){q, (size_t)(ge - q)})));
        if (n == MAX_REGIONS)
          return cf_hlo_fail(r, line, "op '%%%s': more than %d regions", in->name, MAX_REGIONS);
        reg[n++] = q;
        q = cf_hlo_skip(cf_sh_past(s, q, ge), ge);
        if (q < ge && *q == ',') q = cf_hlo_skip(q + 1, ge);
      }
    }
  } else { /* the brace groups after the type */
    for (const char *t = colon; t < e; t = cf_sh_step(s, t, e))
      if (*t == '{') {
        if (n == MAX_REGIONS)
          return cf_hlo_fail(r, line, "op '%%%s': more than %d regions", in->name, MAX_REGIONS);
        reg[n++] = t;
      }
  }
  bool two = cf_span_is(sn, "if"); /* if: then and else */
  if (loop || two ? n != 2 : n < 1)
    return cf_hlo_fail(r, line, "op '%%%s': %s needs %s, not %d region%s", in->name,
                       CF_SPAN_QUOTE(op),
                       loop  ? "2 regions (cond and do)"
                       : two ? "2 regions (then and else)"
                             : "its branch regions",
                       n, n == 1 ? "" : "s");
  /* a pretty while's arguments `%it: T, ...`, from `(%it = %x, ...)` and `: T, ...` */
  char *args = NULL;
  size_t alen = 0;
  cf_status st = CF_OK;
  if (loop && !generic) {
    const char *h = cf_hlo_skip(after, colon);
    const char *he = h < colon && *h == '(' ? cf_sh_past(s, h, colon) - 1 : NULL;
    const char *ts = cf_hlo_skip(colon + 1, e), *te = cf_sh_types_end(s, ts, e);
    if (!he)
      return cf_hlo_fail(r, line, "op '%%%s': %s needs its arguments '(%%NAME = %%VALUE, ...)'",
                         in->name, CF_SPAN_QUOTE(op));
    size_t cap = (size_t)(he - h) + (size_t)(te - ts) + 16;
    if (!(args = cf_arena_alloc(&r->scratch, cap))) return cf_hlo_oom(r, line);
    for (const char *a = cf_hlo_skip(h + 1, he), *t = ts; a < he;) {
      const char *ae = cf_sh_find_top(s, a, he, ','), *tend;
      if (!ae) ae = he;
      const char *eq = cf_sh_find_top(s, a, ae, '=');
      while (te > t && is_space(te[-1]))
        te--;
      if (t >= te)
        return cf_hlo_fail(r, line, "op '%%%s': %s has more arguments than types", in->name,
                           CF_SPAN_QUOTE(op));
      if (!(tend = cf_sh_find_top(s, t, te, ','))) tend = te;
      if (!eq || *cf_hlo_skip(a, eq) != '%')
        return cf_hlo_fail(r, line, "op '%%%s': %s: expected '%%NAME = %%VALUE' at '%s'",
                           in->name, CF_SPAN_QUOTE(op),
                           CF_SPAN_QUOTE(((cf_span){a, (size_t)(ae - a)})));
      alen += (size_t)snprintf(args + alen, cap - alen, "%s%.*s: %.*s", alen ? ", " : "",
                               (int)(eq - a), a, (int)(tend - t), t);
      a = ae < he ? cf_hlo_skip(ae + 1, he) : he;
      t = tend < te ? cf_hlo_skip(tend + 1, te) : te;
    }
  }
  const char *names[MAX_REGIONS];
  for (int i = 0; i < n && !st; i++)
    st = region_comp_args(s, reg[i], e, line + cf_sh_count_nl(s, p, reg[i]), args,
                          args ? args + alen : NULL, true, &names[i]);
  if (st) return st;
  char *list = NULL;
  if (!loop && !two) { /* branch_computations={a, b, ...} */
    size_t cap = 3;
    for (int i = 0; i < n; i++)
      cap += strlen(names[i]) + 2;
    if (!(list = cf_arena_alloc(&r->scratch, cap))) return cf_hlo_oom(r, line);
    size_t o = (size_t)snprintf(list, cap, "{");
    for (int i = 0; i < n; i++)
      o += (size_t)snprintf(list + o, cap - o, "%s%s", i ? ", " : "", names[i]);
    snprintf(list + o, cap - o, "}");
  }
  const char *kv[4] = {"condition", names[0], "body", names[1 % n]};
  if (two) kv[0] = "true_computation", kv[2] = "false_computation";
  if (!loop && !two) kv[0] = "branch_computations", kv[1] = list;
  in->opcode = loop ? "while" : "conditional";
  if (!(in->spelled = str(s, op.p, op.n))) return cf_hlo_oom(r, line);
  return set_attrs(s, in, loop || two ? 2 : 1, kv);
}

/* One `%res = op ...` statement into instructions appended to b. */
/* The collective ops written in [p, e) (an op's regions), in either form. */
static int region_collectives(const char *p, const char *e) {
  static const char *const names[] = {"all_reduce",         "all_gather",
                                      "reduce_scatter",     "all_to_all",
                                      "collective_permute", "collective_broadcast"};
  int n = 0;
  for (const char *q = p; q < e; q++) {
    const char *w = NULL;
    if (e - q > 10 && !memcmp(q, "stablehlo.", 10))
      w = q + 10;
    else if (e - q > 5 && !memcmp(q, "mhlo.", 5))
      w = q + 5;
    for (size_t i = 0; w && i < sizeof names / sizeof names[0]; i++) {
      size_t k = strlen(names[i]);
      if ((size_t)(e - w) >= k && !memcmp(w, names[i], k) &&
          ((size_t)(e - w) == k || !(isalnum((unsigned char)w[k]) || w[k] == '_')))
        n++;
    }
  }
  return n;
}

static cf_status parse_op(sh_reader *s, ibuf *b, const char *p, const char *e, int line) {
  hlo_reader *r = s->r;
  cf_status st;
  const char *eq = cf_sh_find_top(s, p, e, '=');
  if (!eq) return cf_hlo_fail(r, line, "expected '%%NAME = OP ...'");
  cf_span res;
  int n_res = 0;
  const char **res_list;
  if ((st = parse_results(s, p, eq, line, &res, &n_res, &res_list))) return st;
  /* a result list's op is named after the first result and the count (no
   * SSA name holds ':'), its results after their own names */
  char listed[CF_MAX_NAME + 1];
  snprintf(listed, sizeof listed, "%.*s:%d", (int)res.n, res.p, n_res);
  const char *base = res_list ? str(s, listed, strlen(listed)) : str(s, res.p, res.n);
  if (!base) return cf_hlo_oom(r, line);
  const char *q = cf_hlo_skip(eq + 1, e), *after;
  cf_span op;
  bool generic = q < e && *q == '"';
  if (generic) {
    after = cf_sh_past(s, q, e);
    op = (cf_span){q + 1, (size_t)(after - q - 2)};
  } else {
    op.p = q;
    while (q < e && (isalnum((unsigned char)*q) || *q == '_' || *q == '.'))
      q++;
    op.n = (size_t)(q - op.p);
    after = q;
  }
  /* the quoted form also takes '-' ("stablehlo.cross-replica-sum", a
   * deprecated op that stablehlo-legalize-deprecated-ops rewrites) */
  bool ok = op.n > 0;
  for (size_t i = 0; i < op.n && ok; i++)
    ok = isalnum((unsigned char)op.p[i]) || op.p[i] == '_' || op.p[i] == '.' || op.p[i] == '$' ||
         (generic && op.p[i] == '-');
  if (!ok) return cf_hlo_fail(r, line, "value '%%%s': expected an op name", base);
  /* every op but func's `call` names its dialect (and so never reads as
   * one of the HLO opcodes the evaluator knows) */
  if (!memchr(op.p, '.', op.n) && !cf_span_is(op, "call"))
    return cf_hlo_fail(r, line, "value '%%%s': op '%s' has no dialect (stablehlo.%s?)", base,
                       CF_SPAN_QUOTE(op), CF_SPAN_QUOTE(op));
  const char *colon = cf_sh_find_last_top(s, after, e, ':');
  if (!colon)
    return cf_hlo_fail(r, line, "op '%s': expected ': TYPE' after the op", CF_SPAN_QUOTE(op));
  sig g;
  if ((st = parse_sig(s, colon, e, line, n_res, &g))) return st;
  if (cf_span_is(op, "sdy.manual_computation") && res_list)
    return cf_hlo_fail(r, line, "sdy.manual_computation: write its results as '%%NAME:N'");
  if (cf_span_is(op, "sdy.manual_computation"))
    return manual_computation(s, b, base, n_res, after, colon, &g, line);
  hinstr *in = ibuf_add(s, b, line);
  if (!in) return CF_ERR_NO_MEMORY;
  int k = b->n - 1;
  in->name = base;
  if ((st = result_shape(s, in, &g, n_res))) return st;
  /* operands: a generic op's (...) right after its name; else every use up
   * to the signature outside regions and attribute dicts */
  const char *os = after, *oe = colon;
  if (generic) {
    os = cf_hlo_skip(after, e);
    if (os >= colon || *os != '(')
      return cf_hlo_fail(r, line, "op '%s': expected '(' with its operands", CF_SPAN_QUOTE(op));
    oe = cf_sh_past(s, os, colon);
  }
  if ((st = set_operands(s, in, os, oe, false))) return st;
  cf_span sn = short_name(op);
  const char *opc = NULL;
  static const char *same[] = {"add",     "subtract", "multiply", "maximum", "minimum",
                               "convert", "reshape",  "or",       "and"};
  for (size_t i = 0; i < sizeof same / sizeof same[0] && sn.p != op.p; i++)
    if (cf_span_is(sn, same[i])) opc = same[i];
  if (opc) {
    in->opcode = opc;
  } else if (sn.p != op.p && cf_span_is(sn, "constant")) {
    in->opcode = "constant";
    in->n_opnd = 0;
    const char *d = after;
    while (d < colon && !(colon - d >= 6 && !memcmp(d, "dense<", 6)))
      d++;
    if (in->shape.n >= 0)
      return cf_hlo_fail(r, line, "value '%%%s': a constant of a tuple type", base);
    cf_sh_dense(s, d, e, &in->shape, in);
  } else if (sn.p != op.p && cf_span_is(sn, "dot_general") && dot_plain(s, after, colon)) {
    static const char *kv[] = {"lhs_contracting_dims", "{1}", "rhs_contracting_dims", "{0}"};
    in->opcode = "dot";
    if ((st = set_attrs(s, in, 2, kv))) return st;
  } else if (sn.p != op.p && (cf_span_is(sn, "all_reduce") || cf_span_is(sn, "reduce_scatter"))) {
    bool ar = cf_span_is(sn, "all_reduce");
    if ((st = collective(s, in, after, colon, ar ? "all-reduce" : "reduce-scatter",
                         ar ? NULL : "scatter_dimension")) ||
        (st = reducer_region(s, in, oe, colon, e, line + cf_sh_count_nl(s, p, oe))))
      return st;
  } else if (sn.p != op.p && cf_span_is(sn, "all_gather")) {
    if ((st = collective(s, in, after, colon, "all-gather", "all_gather_dim"))) return st;
  } else if (sn.p != op.p && cf_span_is(sn, "all_to_all")) {
    /* several operands are each split, exchanged and concatenated on their
     * own (eval_alltoall: one AllToAll each) */
    if ((st = collective(s, in, after, colon, "all-to-all", NULL)) ||
        (st = dim_attrs(s, in, after, colon)))
      return st;
  } else if (sn.p != op.p && cf_span_is(sn, "collective_permute")) {
    cf_span v;
    if ((st = collective(s, in, after, colon, "collective-permute", NULL))) return st;
    if (!cf_sh_attr(s, after, colon, "source_target_pairs", &v))
      return cf_hlo_fail(r, line, "op '%%%s': collective_permute needs source_target_pairs", base);
    if ((st = cf_sh_pairs(s, in, v))) return st;
  } else if (sn.p != op.p && cf_span_is(sn, "collective_broadcast")) {
    if ((st = collective(s, in, after, colon, "collective-broadcast", NULL))) return st;
  } else if (sn.p != op.p && cf_span_is(sn, "async_start")) {
    /* its region run as a call (the future is the region's value); the
     * async_done that waits for it passes the value on */
    in->opcode = "call";
    if (!(in->spelled = str(s, op.p, op.n))) return cf_hlo_oom(r, line); /* its type checked */
    if ((st = reducer_region(s, in, oe, colon, e, line + cf_sh_count_nl(s, p, oe)))) return st;
    /* one region (the verifier: "op requires one region"); a second was left unread */
    for (const char *t = oe; t < colon; t = cf_sh_step(s, t, colon))
      if (*t == '(' && *cf_hlo_skip(t + 1, colon) == '{') {
        const char *past = cf_hlo_skip(cf_sh_past(s, cf_hlo_skip(t + 1, colon), colon), colon);
        if (past < colon && *past == ',')
          return cf_hlo_fail(r, line, "op '%%%s': stablehlo.async_start takes one region", base);
        break;
      }
  } else if (sn.p != op.p && cf_span_is(sn, "async_done")) {
    if (in->n_opnd != 1)
      return cf_hlo_fail(r, line, "op '%%%s': stablehlo.async_done takes one future, not %d operands",
                         base, in->n_opnd);
    /* it gives what its future holds (the verifier's inferred type) */
    hshape held = g.n_out == 1 ? g.out[0] : (hshape){.n = g.n_out, .elem = g.out};
    char a[64], b2[64];
    if (g.n_in == 1 && !cf_sh_type_equal(&g.in[0], &held))
      return cf_hlo_fail(r, line, "op '%%%s': stablehlo.async_done gives %s but its future holds %s",
                         base, cf_sh_type_text(&held, a, sizeof a),
                         cf_sh_type_text(&g.in[0], b2, sizeof b2));
    in->opcode = "-forward";
  } else if (cf_span_is(op, "func.call") || cf_span_is(op, "call")) {
    cf_span callee;
    const char *at = memchr(after, '@', (size_t)(colon - after));
    if (!at) return cf_hlo_fail(r, line, "value '%%%s': call needs a callee '@NAME'", base);
    const char *ce = at + 1;
    while (ce < colon &&
           (isalnum((unsigned char)*ce) || *ce == '_' || *ce == '.' || *ce == '$' || *ce == '-'))
      ce++;
    callee = (cf_span){at + 1, (size_t)(ce - at - 1)};
    const char *kv[] = {"to_apply", str(s, callee.p, callee.n)};
    if (!kv[1]) return cf_hlo_oom(r, line);
    in->opcode = "call";
    in->shape = (hshape){.n = n_res, .elem = g.out}; /* a call's value is its callee's */
    if (n_res == 1) in->shape = g.out[0];
    if ((st = set_attrs(s, in, 1, kv))) return st;
  } else if (cf_span_is(op, "sdy.sharding_constraint") || cf_span_is(op, "sdy.reshard")) {
    static const char *kv[] = {"custom_call_target", "\"Sharding\""}; /* identity per rank */
    in->opcode = "custom-call";
    if ((st = set_attrs(s, in, 1, kv))) return st;
  } else if (sn.p != op.p && cf_span_is(sn, "custom_call")) {
    cf_span t = {NULL, 0};
    const char *at = memchr(after, '@', (size_t)(colon - after));
    if (at && at + 1 < colon && at[1] == '"') { /* @"foo-not-id" */
      const char *te = cf_sh_past(s, at + 1, colon);
      t = (cf_span){at + 2, (size_t)(te - at - 3)};
    } else if (at) {
      const char *te = at + 1;
      while (te < colon && (isalnum((unsigned char)*te) || *te == '_' || *te == '.' || *te == '$'))
        te++;
      t = (cf_span){at + 1, (size_t)(te - at - 1)};
    } else if (cf_sh_attr(s, after, colon, "call_target_name", &t) && t.n >= 2 && *t.p == '"') {
      t = (cf_span){t.p + 1, t.n - 2};
    }
    char quoted[CF_MAX_NAME + 3];
    snprintf(quoted, sizeof quoted, "\"%.*s\"", (int)(t.n > CF_MAX_NAME ? CF_MAX_NAME : t.n), t.p);
    const char *kv[] = {"custom_call_target", str(s, quoted, strlen(quoted))};
    if (!kv[1]) return cf_hlo_oom(r, line);
    in->opcode = "custom-call";
    if ((st = set_attrs(s, in, 1, kv))) return st;
  } else if ((cf_span_is(op, "stablehlo.while") || cf_span_is(op, "stablehlo.if") ||
              cf_span_is(op, "stablehlo.case") || cf_span_is(op, "mhlo.while") ||
              cf_span_is(op, "mhlo.if") || cf_span_is(op, "mhlo.case"))) {
    /* (scf.while, scf.if and the like have other forms: Opaque below) */
    if ((st = control_op(s, in, op, sn, generic, p, after, colon, e, line))) return st;
  } else {
    /* everything else: Opaque named by its MLIR op, with region captures;
     * collectives in its regions (a while's body) are not run, never hidden */
    int inner = region_collectives(after, e);
    char type[CF_MAX_NAME + 64];
    snprintf(type, sizeof type, "%.*s", (int)(op.n > CF_MAX_NAME ? CF_MAX_NAME : op.n), op.p);
    if (inner)
      snprintf(type + strlen(type), sizeof type - strlen(type),
               " (%d collective%s inside, not run)", inner, inner == 1 ? "" : "s");
    if (!(in->opcode = str(s, type, strlen(type)))) return cf_hlo_oom(r, line);
    b->captures[k] = (cf_span){after, (size_t)(e - after)};
  }
  if (n_res > 1 || res_list) return split_results(s, b, base, &g, n_res, line, res_list);
  return CF_OK;
}

/* Region uses of values defined before the op become operands too (each
 * value once: mark[j] == k + 1 when instruction j is an operand of k). */
static cf_status add_captures(sh_reader *s, hcomp *c, ibuf *b) {
  int *mark = NULL;
  cf_status st = CF_OK;
  for (int k = 0; k < c->n_ins && !st; k++) {
    if (!b->captures[k].n) continue;
    if (!mark && !(mark = calloc((size_t)c->n_ins, sizeof *mark))) return cf_hlo_oom(s->r, 0);
    hinstr *in = &c->ins[k];
    const char **v = NULL;
    int n = 0, cap = 0, keep = 0;
    for (int m = 0; m < in->n_opnd; m++) {
      int j = cf_hlo_map_find(&c->map, in->opnd[m]);
      if (j >= 0) mark[j] = k + 1;
    }
    st = cf_sh_collect_uses(s, in->line, b->captures[k].p, b->captures[k].p + b->captures[k].n,
                            true, &v, &n, &cap);
    for (int i = 0; i < n && !st; i++) {
      int j = cf_hlo_map_find(&c->map, v[i]);
      if (j < 0 || j >= k || mark[j] == k + 1) continue;
      mark[j] = k + 1;
      v[keep++] = v[i];
    }
    if (!st && keep) {
      if (in->n_opnd + keep > CF_MAX_OPERANDS)
        st = cf_hlo_fail(s->r, in->line, "op with more than %d operands", CF_MAX_OPERANDS);
      const char **all =
          st ? NULL : cf_arena_array(&s->r->scratch, (size_t)(in->n_opnd + keep), sizeof *all);
      if (!st && !all) st = cf_hlo_oom(s->r, in->line);
      if (!st) {
        if (in->n_opnd) memcpy(all, in->opnd, (size_t)in->n_opnd * sizeof *all);
        memcpy(all + in->n_opnd, v, (size_t)keep * sizeof *all);
        in->opnd = all;
        in->n_opnd += keep;
      }
    }
    free(v);
  }
  free(mark);
  return st;
}

/* Function or region arguments `%a: T {attrs}, ...` as parameter instructions. */
static cf_status parse_args(sh_reader *s, ibuf *b, const char *p, const char *e, int line) {
  int k = 0;
  for (SKIP(p, e); p < e; k++) {
    const char *pe = cf_sh_find_top(s, p, e, ',');
    if (!pe) pe = e;
    cf_span nm;
    if (*p != '%') return cf_hlo_fail(s->r, line, "expected an argument '%%NAME: TYPE'");
    const char *q = cf_hlo_skip(cf_sh_read_use(p, pe, &nm), pe);
    if (!nm.n || nm.n > CF_MAX_NAME || q >= pe || *q != ':')
      return cf_hlo_fail(s->r, line, "expected an argument '%%NAME: TYPE'");
    hinstr *in = ibuf_add(s, b, line);
    if (!in) return CF_ERR_NO_MEMORY;
    char num[16];
    snprintf(num, sizeof num, "%d", k);
    const char *ns = str(s, num, strlen(num));
    in->opcode = "parameter";
    if (!(in->name = str(s, nm.p, nm.n)) || !ns) return cf_hlo_oom(s->r, line);
    in->args = (cf_span){ns, strlen(ns)};
    q = cf_hlo_skip(q + 1, pe);
    cf_status st = cf_sh_type(s, &q, pe, line, &in->shape);
    if (st) return st;
    p = pe < e ? cf_hlo_skip(pe + 1, e) : e;
  }
  return CF_OK;
}

static bool is_return(const char *p, const char *e) {
  if (p < e && *p == '"') p++;
  return cf_sh_word_at(p, e, "return") || cf_sh_word_at(p, e, "func.return") ||
         cf_sh_word_at(p, e, "stablehlo.return") || cf_sh_word_at(p, e, "mhlo.return") ||
         cf_sh_word_at(p, e, "sdy.return");
}

/* The ops of a body [bs, be) (and its arguments [args, args_e) when args)
 * as a new computation, its index in *out; ret (NULL: none) says what it
 * returns and checks that. */
static cf_status parse_body(sh_reader *s, const char *name, int line, const char *bs,
                            const char *be, int body_line, const char *args, const char *args_e,
                            body_ret *br, int *out) {
  hlo_reader *r = s->r;
  char who[CF_MAX_NAME + 32]; /* "function 'f'", or "region" */
  bool region = strstr(name, "-line-") != NULL, may_forward = region && s->forward_ok;
  if (region) /* a region, named where it is */
    snprintf(who, sizeof who, "region");
  else
    snprintf(who, sizeof who, "function '%s'", name);
  ibuf b = {0};
  cf_status st = CF_OK;
  hcomp c = {.name = name, .line = line, .root = -1};
  const char **ret = NULL;
  int n_ret = 0, ret_cap = 0, ret_line = 0;
  if (args) st = parse_args(s, &b, args, args_e, line);
  int ln = body_line;
  for (const char *p = bs; !st && p < be;) {
    const char *q = p;
    while (q < be && is_space(*q))
      ln += *q++ == '\n';
    if (q >= be) break;
    const char *qe = cf_sh_stmt_end(s, q, be);
    if (ret) {
      st = cf_hlo_fail(r, ln, "%s: an op after its return (line %d)", who, ret_line);
    } else if (is_return(q, qe)) {
      const char *colon = cf_sh_find_last_top(s, q, qe, ':');
      const char *w = *q == '"' ? q + 1 : q;
      ret_line = ln;
      st = cf_sh_collect_uses(s, ln, q, colon ? colon : qe, false, &ret, &n_ret, &ret_cap);
      if (!st && !ret && !(ret = malloc(sizeof *ret))) st = cf_hlo_oom(r, ln);
      /* MLIR checks a function's results against func.return only: a
       * function declared without results that ends in another dialect's
       * return (stablehlo's own tests write them) returns nothing */
      if (br && br->check && !br->n_want && !cf_sh_word_at(w, qe, "return") &&
          !cf_sh_word_at(w, qe, "func.return"))
        n_ret = 0;
    } else if (*q == '^') {
      st = cf_hlo_fail(r, ln,
                       "%s: several blocks (a control-flow graph) are not "
                       "supported",
                       who);
    } else if (*q == '%') {
      st = parse_op(s, &b, q, qe, ln);
    } else if (!isalpha((unsigned char)*q) && *q != '"') {
      st = cf_hlo_fail(r, ln, "%s: expected an op at '%s'", who,
                       CF_SPAN_QUOTE(((cf_span){q, (size_t)(qe - q)})));
    } else {
      /* an op without results (trace, outfeed, a side-effecting call):
       * nothing to import, but never lost without a word */
      const char *w = *q == '"' ? q + 1 : q, *we = w;
      while (we < qe && (isalnum((unsigned char)*we) || *we == '_' || *we == '.' || *we == '$'))
        we++;
      char op[CF_MAX_NAME + 1];
      snprintf(op, sizeof op, "%.*s", (int)(we - w), w);
      st = cf_graph_note_dropped(r->g, op, op, ln);
    }
    ln += cf_sh_count_nl(s, q, qe);
    p = qe;
  }
  if (!st && !ret) st = cf_hlo_fail(r, line, "%s has no return", who);
  /* a region may return a value of the code around it (an if's branch
   * `stablehlo.return %arg1`): an instruction forwards it */
  bool forward = !st && n_ret == 1 && may_forward;
  for (int i = 0; forward && i < b.n; i++)
    forward = strcmp(b.v[i].name, ret[0]) != 0;
  if (!st && (n_ret != 1 || forward)) { /* the results' tuple, or the value forwarded */
    hinstr *in = ibuf_add(s, &b, ret_line);
    if (!in) st = CF_ERR_NO_MEMORY;
    if (!st && n_ret && !(in->opnd = cf_arena_array(&r->scratch, (size_t)n_ret, sizeof *ret)))
      st = cf_hlo_oom(r, ret_line);
    if (!st) {
      in->name = "-results";
      in->opcode = forward ? "-forward" : "tuple";
      in->n_opnd = n_ret;
      in->shape = (hshape){.n = forward ? -1 : n_ret};
      if (n_ret) memcpy(in->opnd, ret, (size_t)n_ret * sizeof *ret);
    }
  }
  if (!st && !(c.ins = cf_arena_array(&r->scratch, (size_t)(b.n ? b.n : 1), sizeof *c.ins)))
    st = cf_hlo_oom(r, line);
  const char **keys =
      st ? NULL : cf_arena_array(&r->scratch, (size_t)(b.n ? b.n : 1), sizeof *keys);
  if (!st && !keys) st = cf_hlo_oom(r, line);
  if (!st) {
    if (b.n) memcpy(c.ins, b.v, (size_t)b.n * sizeof *c.ins);
    c.n_ins = b.n;
    for (int i = 0; i < b.n; i++)
      keys[i] = c.ins[i].name;
    int dup;
    if (!cf_hlo_map_build(&r->scratch, &c.map, keys, c.n_ins, &dup))
      st = cf_hlo_oom(r, line);
    else if (dup >= 0)
      st = cf_hlo_fail(r, c.ins[dup].line,
                       "%s: value '%%%s' defined twice (first at "
                       "line %d)",
                       who, keys[dup], c.ins[cf_hlo_map_find(&c.map, keys[dup])].line);
  }
  if (!st && n_ret == 1 && !forward) {
    c.root = cf_hlo_map_find(&c.map, ret[0]);
    if (c.root < 0)
      st = cf_hlo_fail(r, ret_line,
                       "%s returns '%%%s', which it does not "
                       "define",
                       who, ret[0]);
  } else if (!st) {
    c.root = c.n_ins - 1;
  }
  if (!st && br) {
    br->n = n_ret;
    br->line = ret_line;
    if (br->check) st = check_results(s, &c, n_ret, ret_line, who, br->want, br->n_want);
  }
  if (!st) st = add_captures(s, &c, &b);
  if (!st && s->n_comps == s->cap_comps) {
    int cap = s->cap_comps ? 2 * s->cap_comps : 8;
    hcomp *more = realloc(s->comps, (size_t)cap * sizeof *more);
    if (!more)
      st = cf_hlo_oom(r, line);
    else {
      s->comps = more;
      s->cap_comps = cap;
    }
  }
  if (!st) {
    *out = s->n_comps;
    s->comps[s->n_comps++] = c;
  }
  free(b.v);
  free(b.captures);
  free(ret);
  return st;
}

/* ------------------------------------------------------------------ */
/* module                                                             */

/* func.func [public|private] @NAME(ARGS) [-> RESULTS] [attributes {...}] { BODY } */
static cf_status parse_func(sh_reader *s, const char *p, const char *e, int line, bool *public,
                            int *idx) {
  hlo_reader *r = s->r;
  const char *at = memchr(p, '@', (size_t)(e - p));
  *public = !cf_sh_attr(s, p, at ? at : e, "private", &(cf_span){0});
  if (!at) return cf_hlo_fail(r, line, "func.func needs a name '@NAME'");
  const char *q = at + 1;
  cf_span nm;
  if (q < e && *q == '"') {
    const char *qe = cf_sh_past(s, q, e);
    nm = (cf_span){q + 1, (size_t)(qe - q - 2)};
    q = qe;
  } else {
    nm.p = q;
    while (q < e &&
           (isalnum((unsigned char)*q) || *q == '_' || *q == '.' || *q == '$' || *q == '-'))
      q++;
    nm.n = (size_t)(q - nm.p);
  }
  if (!nm.n || nm.n > CF_MAX_NAME) return cf_hlo_fail(r, line, "func.func: bad name");
  const char *name = str(s, nm.p, nm.n);
  if (!name) return cf_hlo_oom(r, line);
  q = cf_hlo_skip(q, e);
  if (q >= e || *q != '(')
    return cf_hlo_fail(r, line, "function '%s': expected '(' with its arguments", name);
  const char *ae = cf_sh_past(s, q, e);
  const char *body = NULL;
  for (const char *t = ae; t < e; t = cf_sh_step(s, t, e))
    if (*t == '{') body = t;
  *idx = -1;
  if (!body && !*public) return CF_OK; /* a private declaration (external): nothing to read */
  if (!body || cf_hlo_skip(cf_sh_past(s, body, e), e) != e)
    return cf_hlo_fail(r, line, "function '%s': expected a body '{ ... }'", name);
  /* -> T, or -> (T {attrs}, ...), then maybe `attributes {...}` */
  hshape *res = NULL;
  int n_res = 0;
  const char *t = cf_hlo_skip(ae, body);
  if (body - t >= 2 && t[0] == '-' && t[1] == '>') {
    t = cf_hlo_skip(t + 2, body);
    cf_status st = t < body && *t == '('
                       ? cf_sh_type_list(s, t + 1, cf_sh_past(s, t, body) - 1, line, &res, &n_res)
                       : cf_sh_type_list(s, t, cf_sh_types_end(s, t, body), line, &res, &n_res);
    if (st) return st;
  }
  body_ret br = {.want = res, .n_want = n_res, .check = true};
  return parse_body(s, name, line, body + 1, cf_sh_past(s, body, e) - 1,
                    line + cf_sh_count_nl(s, p, body + 1), q + 1, ae - 1, &br, idx);
}

static cf_status module_attrs(sh_reader *s, const char *p, const char *e, int line) {
  hlo_reader *r = s->r;
  static const char *keys[] = {"mhlo.num_partitions", "mhlo.num_replicas"};
  int64_t *dst[] = {&r->partitions, &r->replicas};
  for (int i = 0; i < 2; i++) {
    cf_span v;
    if (!cf_sh_attr(s, p, e, keys[i], &v)) continue;
    const char *q = v.p;
    if (!cf_hlo_read_int(&q, v.p + v.n, CF_MAX_WORLD, dst[i]) || !*dst[i])
      return cf_hlo_fail(r, line, "module: %s = '%s' must be an integer in 1..%d", keys[i],
                         CF_SPAN_QUOTE(v), CF_MAX_WORLD);
  }
  int64_t w;
  if (!cf_mul_i64(r->partitions ? r->partitions : 1, r->replicas ? r->replicas : 1, &w) ||
      w > CF_MAX_WORLD)
    return cf_hlo_fail(r, line, "module: num_partitions * num_replicas is above %d devices",
                       CF_MAX_WORLD);
  return CF_OK;
}

/* The statements of a module body (or of a file without `module`). */
static cf_status module_body(sh_reader *s, const char *p, const char *e, int line, bool meshes,
                             int *main_idx, int *public_idx, int *n_public, int *main_line) {
  hlo_reader *r = s->r;
  cf_status st = CF_OK;
  while (!st && p < e) {
    while (p < e && is_space(*p))
      line += *p++ == '\n';
    if (p >= e) break;
    const char *pe = cf_sh_stmt_end(s, p, e);
    if (cf_sh_word_at(p, e, "module")) {
      const char *open = NULL;
      for (const char *t = p; t < pe; t = cf_sh_step(s, t, pe))
        if (*t == '{') open = t;
      if (!open || cf_hlo_skip(cf_sh_past(s, open, pe), pe) != pe)
        return cf_hlo_fail(r, line, "module: expected a body '{ ... }'");
      cf_span nm;
      const char *at = memchr(p, '@', (size_t)(open - p));
      if (at && !r->module) {
        cf_hlo_read_name(at + 1, open, &nm);
        if (nm.n && nm.n <= CF_MAX_NAME && !(r->module = str(s, nm.p, nm.n)))
          return cf_hlo_oom(r, line);
      }
      const char *attrs = NULL;
      for (const char *t = p; t < open; t = cf_sh_step(s, t, open))
        if (*t == '{') attrs = t;
      if (meshes && attrs && (st = module_attrs(s, attrs, cf_sh_past(s, attrs, open), line)))
        return st;
      st = module_body(s, open + 1, cf_sh_past(s, open, pe) - 1,
                       line + cf_sh_count_nl(s, p, open + 1), meshes, main_idx, public_idx,
                       n_public, main_line);
    } else if (!meshes && cf_sh_word_at(p, e, "func.func")) {
      bool pub;
      int idx;
      if (!(st = parse_func(s, p, pe, line, &pub, &idx)) && idx >= 0) {
        if (!strcmp(s->comps[idx].name, "main")) {
          *main_idx = idx;
          *main_line = line;
        }
        if (pub) {
          *public_idx = idx;
          ++*n_public;
        }
      }
    } else if (meshes &&
               (cf_sh_word_at(p, e, "sdy.mesh") || cf_sh_word_at(p, e, "stablehlo.mesh") ||
                cf_sh_word_at(p, e, "\"sdy.mesh\""))) {
      st = cf_sh_mesh_decl(s, p, pe, line);
    } /* #alias = ..., other top-level ops: nothing to import */
    line += cf_sh_count_nl(s, p, pe);
    p = pe;
  }
  return st;
}

static cf_status parse_module(hlo_reader *r) {
  r->stablehlo = true;
  sh_reader s = {.r = r};
  cf_status st = cf_sh_clean(&s);
  int main_idx = -1, public_idx = -1, n_public = 0, main_line = 0;
  /* meshes first: a symbol may be used above its declaration */
  for (int pass = 0; pass < 2 && !st; pass++)
    st = module_body(&s, r->text, r->end, 1, pass == 0, &main_idx, &public_idx, &n_public,
                     &main_line);
  /* every sdy.mesh is in r->meshes, for the HLO evaluator's shard_map
   * entries too (hlo_sharding.c); cf_sh_mesh_decl refuses device_ids other
   * than the identity order */
  r->meshes_loaded = true;
  if (!st && !s.n_comps) st = cf_hlo_fail(r, 1, "not StableHLO text: no func.func in the module");
  if (!st && main_idx < 0 && n_public != 1)
    st = cf_hlo_fail(r, 1, "no entry function: %d public functions and none named @main", n_public);
  const char **keys = NULL;
  if (!st) {
    r->comps = cf_arena_array(&r->scratch, (size_t)s.n_comps, sizeof *r->comps);
    keys = cf_arena_array(&r->scratch, (size_t)s.n_comps, sizeof *keys);
    if (!r->comps || !keys) st = cf_hlo_oom(r, 0);
  }
  if (!st) {
    memcpy(r->comps, s.comps, (size_t)s.n_comps * sizeof *r->comps);
    r->n_comps = s.n_comps;
    for (int i = 0; i < s.n_comps; i++)
      keys[i] = r->comps[i].name;
    r->entry = &r->comps[main_idx >= 0 ? main_idx : public_idx];
    int dup;
    if (!cf_hlo_map_build(&r->scratch, &r->comp_map, keys, r->n_comps, &dup))
      st = cf_hlo_oom(r, 0);
    else if (dup >= 0)
      st = cf_hlo_fail(r, r->comps[dup].line, "function '@%s' defined twice (first at line %d)",
                       keys[dup], r->comps[cf_hlo_map_find(&r->comp_map, keys[dup])].line);
  }
  free(s.comps);
  free(s.groups);
  return st;
}

cf_status cf_stablehlo_read(cf_context *ctx, const char *name, const char *data, size_t size,
                            cf_graph **out) {
  return cf_hlo_run(ctx, name, data, size, parse_module, out);
}
