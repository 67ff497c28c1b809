/* hlo.c - reader for XLA HLO text, as JAX and XLA print it: parsing, and
 * the entry point cf_hlo_read.
 *
 * Three steps. (1) Split the text into statements: a statement ends at a
 * newline outside brackets, strings and comments, so a whole computation is
 * one top-level statement whose body {...} is split the same way, and an
 * attribute value of any grammar (metadata={...}, backend_config="...",
 * mesh['tp'=8] {'tp'}) is skipped by bracket balance alone. Top-level text
 * that is not a computation (FileNames, StackFrames tables) is skipped.
 * (2) Parse each instruction into name, shape, opcode, operand names and raw
 * attribute spans. Both are done here, over the scanner of hlo_scan.c.
 * (3) Evaluate the ENTRY computation symbolically into IR nodes
 * (hlo_eval.c), turning replica_groups into IR groups on the way
 * (hlo_groups.c). hlo_reader.h holds what they share.
 */
#include "hlo_reader.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cf_span trim(const char *p, const char *e) {
  p = cf_hlo_skip(p, e);
  while (e > p && is_space(e[-1]))
    e--;
  return (cf_span){p, (size_t)(e - p)};
}

/* ------------------------------------------------------------------ */
/* shapes                                                             */

static const struct {
  const char *name;
  cf_dtype dt;
  bool exact;
} hlo_types[] = {
    {"s8", CF_DT_INT8, true},
    {"u8", CF_DT_UINT8, true},
    {"s16", CF_DT_INT16, true},
    {"s32", CF_DT_INT32, true},
    {"s64", CF_DT_INT64, true},
    {"f16", CF_DT_FLOAT16, true},
    {"bf16", CF_DT_BFLOAT16, true},
    {"f32", CF_DT_FLOAT32, true},
    {"f64", CF_DT_FLOAT64, true},
    {"pred", CF_DT_BOOL, true},
    {"u16", CF_DT_UINT16, true},
    {"u32", CF_DT_UINT32, true},
    {"u64", CF_DT_UINT64, true},
    /* no IR dtype: a stand-in of the same element size, only for Opaque data */
    {"s4", CF_DT_INT8, false},
    {"u4", CF_DT_UINT8, false},
    {"s2", CF_DT_INT8, false},
    {"u2", CF_DT_UINT8, false},
    {"c64", CF_DT_FLOAT32, false},
    {"c128", CF_DT_FLOAT64, false},
    {"token", CF_DT_UINT8, false},
    {"opaque", CF_DT_UINT8, false},
};

static cf_status parse_shape(hlo_reader *r, const char **pp, const char *e, int line, int nest,
                             hshape *sh, int64_t *leaves) {
  const char *p = cf_hlo_skip(*pp, e);
  memset(sh, 0, sizeof *sh);
  if (p < e && *p == '(') {
    if (nest >= HLO_MAX_TUPLE)
      return cf_hlo_fail(r, line, "tuple shapes nested deeper than %d", HLO_MAX_TUPLE);
    const char *close = cf_hlo_past(p, e); /* just past ')' */
    cf_span in = trim(p + 1, close - 1);
    sh->n = in.n ? cf_hlo_count_top(in.p, in.p + in.n, ',') + 1 : 0;
    if (sh->n && !(sh->elem = cf_arena_array(&r->scratch, (size_t)sh->n, sizeof *sh->elem)))
      return cf_hlo_oom(r, line);
    p++;
    for (int i = 0; i < sh->n; i++) {
      cf_status st = parse_shape(r, &p, close - 1, line, nest + 1, &sh->elem[i], leaves);
      if (st) return st;
      p = cf_hlo_skip(p, close - 1);
      if (p < close - 1 && *p == ',')
        p++;
      else if (p != close - 1)
        return cf_hlo_fail(r, line, "malformed tuple shape at '%s'",
                           CF_SPAN_QUOTE(((cf_span){p, (size_t)(e - p)})));
    }
    *pp = close;
    return CF_OK;
  }
  sh->n = -1;
  cf_span ty = {p, 0};
  while (p < e && isalnum((unsigned char)*p))
    p++;
  ty.n = (size_t)(p - ty.p);
  if (!ty.n)
    return cf_hlo_fail(r, line, "expected a shape at '%s'",
                       CF_SPAN_QUOTE(((cf_span){p, (size_t)(e - p)})));
  size_t k = 0, nt = sizeof hlo_types / sizeof hlo_types[0];
  while (k < nt && !cf_span_is(ty, hlo_types[k].name))
    k++;
  if (k < nt) {
    sh->dt = hlo_types[k].dt;
    sh->exact = hlo_types[k].exact;
  } else if (ty.n > 2 && (memcmp(ty.p, "f8", 2) == 0 || memcmp(ty.p, "f4", 2) == 0)) {
    sh->dt = CF_DT_UINT8; /* float8 / float4 variants */
  } else {
    return cf_hlo_fail(r, line, "unknown element type '%s'", CF_SPAN_QUOTE(ty));
  }
  if (p >= e || *p != '[')
    return cf_hlo_fail(r, line, "expected '[' after element type '%s'", CF_SPAN_QUOTE(ty));
  p = cf_hlo_skip(p + 1, e);
  while (p < e && *p != ']') {
    if (e - p >= 2 && p[0] == '<' && p[1] == '=')
      p = cf_hlo_skip(p + 2, e); /* bounded dynamic: the bound */
    int64_t d;
    if (p < e && *p == '?')
      return cf_hlo_fail(r, line, "unbounded dynamic dimension '?' in a shape");
    if (!cf_hlo_read_int(&p, e, INT64_MAX, &d))
      return cf_hlo_fail(r, line, "bad dimension in shape '%s'", CF_SPAN_QUOTE(ty));
    if (sh->s.rank == CF_MAX_RANK)
      return cf_hlo_fail(r, line, "shape has more than %d dimensions", CF_MAX_RANK);
    sh->s.dims[sh->s.rank++] = d;
    p = cf_hlo_skip(p, e);
    if (p < e && *p == ',')
      p = cf_hlo_skip(p + 1, e);
    else if (p >= e || *p != ']')
      return cf_hlo_fail(r, line, "bad dimension list in shape '%s'", CF_SPAN_QUOTE(ty));
  }
  if (p >= e) return cf_hlo_fail(r, line, "unterminated shape '%s'", CF_SPAN_QUOTE(ty));
  p++;
  const char *q = cf_hlo_skip(p, e);
  if (q < e && *q == '{') p = cf_hlo_past(q, e);         /* layout */
  if (cf_span_is(ty, "c64") || cf_span_is(ty, "c128")) { /* (re, im) pairs */
    if (sh->s.rank == CF_MAX_RANK)
      return cf_hlo_fail(r, line, "complex shape has more than %d dimensions", CF_MAX_RANK - 1);
    sh->s.dims[sh->s.rank++] = 2;
  } else if (cf_span_is(ty, "token") || cf_span_is(ty, "opaque")) {
    sh->s.rank = 1; /* no data */
    sh->s.dims[0] = 0;
  }
  if (++*leaves > CF_MAX_OPERANDS)
    return cf_hlo_fail(r, line, "tuple shape with more than %d arrays", CF_MAX_OPERANDS);
  *pp = p;
  return CF_OK;
}

/* ------------------------------------------------------------------ */
/* instructions and computations                                      */

/* Parse ", key=value" pairs from p to e; values are raw spans. */
static cf_status parse_attrs(hlo_reader *r, const char *p, const char *e, int line,
                             const char *what, hattr **out, int *n_out) {
  int n = 0, cap = cf_hlo_count_top(p, e, ',');
  hattr *a = cap ? cf_arena_array(&r->scratch, (size_t)cap, sizeof *a) : NULL;
  if (cap && !a) return cf_hlo_oom(r, line);
  for (p = cf_hlo_skip(p, e); p < e; p = cf_hlo_skip(p, e)) {
    if (*p != ',' || n == cap)
      return cf_hlo_fail(r, line, "%s: expected ', key=value' at '%s'", what,
                         CF_SPAN_QUOTE(((cf_span){p, (size_t)(e - p)})));
    p = cf_hlo_skip(p + 1, e);
    cf_span key;
    p = cf_hlo_read_name(p, e, &key);
    p = cf_hlo_skip(p, e);
    if (!key.n || p >= e || *p != '=')
      return cf_hlo_fail(r, line, "%s: expected an attribute 'key=value' at '%s'", what,
                         CF_SPAN_QUOTE(((cf_span){key.p, (size_t)(e - key.p)})));
    const char *ve = cf_hlo_find_top(p + 1, e, ',');
    a[n].key = key;
    a[n++].val = trim(p + 1, ve ? ve : e);
    p = ve ? ve : e;
  }
  *out = a;
  *n_out = n;
  return CF_OK;
}

/* The operand name in one comma piece: its last token ("f32[8]{0} %a" -> a). */
static cf_status operand_name(hlo_reader *r, const hinstr *in, cf_span piece, const char **out) {
  const char *p = piece.p, *e = piece.p + piece.n, *ts = NULL, *te = NULL;
  for (p = cf_hlo_skip(p, e); p < e; p = cf_hlo_skip(p, e)) {
    ts = p;
    if (cf_hlo_at_group(p, e))
      p = cf_hlo_past(p, e);
    else
      while (p < e && !is_space(*p) && !cf_hlo_at_group(p, e))
        p++;
    te = p;
  }
  cf_span nm = {NULL, 0};
  if (ts && cf_hlo_read_name(ts, te, &nm) == te && nm.n && nm.n <= CF_MAX_NAME) {
    *out = cf_hlo_str(r, nm.p, nm.n);
    return *out ? CF_OK : cf_hlo_oom(r, in->line);
  }
  return cf_hlo_fail(r, in->line, "instruction '%s': bad operand '%s'", in->name,
                     CF_SPAN_QUOTE(piece));
}

static cf_status parse_instr(hlo_reader *r, const char *s, const char *e, int line, hinstr *in,
                             bool *root) {
  cf_status st;
  const char *p = cf_hlo_skip(s, e);
  memset(in, 0, sizeof *in);
  in->line = line;
  *root = cf_hlo_word_at(p, e, "ROOT");
  if (*root) p = cf_hlo_skip(p + 4, e);
  cf_span nm;
  p = cf_hlo_read_name(p, e, &nm);
  const char *eq = cf_hlo_skip(p, e);
  if (!nm.n || eq >= e || *eq != '=')
    return cf_hlo_fail(r, line, "expected an instruction 'NAME = SHAPE OPCODE(OPERANDS)', got '%s'",
                       CF_SPAN_QUOTE(((cf_span){s, (size_t)(e - s)})));
  if (nm.n > CF_MAX_NAME)
    return cf_hlo_fail(r, line, "instruction '%.40s...': name longer than %d bytes", nm.p,
                       CF_MAX_NAME);
  if (!(in->name = cf_hlo_str(r, nm.p, nm.n))) return cf_hlo_oom(r, line);
  p = cf_hlo_skip(eq + 1, e);
  int64_t leaves = 0;
  const char *w = p;
  while (w < e && is_name_char(*w))
    w++;
  in->no_shape = w > p && *cf_hlo_skip(w, e) == '(' && *w != '['; /* 'tuple(a, b)' */
  if (!in->no_shape && (st = parse_shape(r, &p, e, line, 0, &in->shape, &leaves))) return st;
  p = cf_hlo_skip(p, e);
  cf_span op = {p, 0};
  while (p < e && is_name_char(*p))
    p++;
  op.n = (size_t)(p - op.p);
  if (!op.n)
    return cf_hlo_fail(r, line, "instruction '%s': expected an opcode after the shape", in->name);
  if (!(in->opcode = cf_hlo_str(r, op.p, op.n))) return cf_hlo_oom(r, line);
  p = cf_hlo_skip(p, e);
  if (p >= e || *p != '(')
    return cf_hlo_fail(r, line, "instruction '%s': expected '(' after opcode '%s'", in->name,
                       in->opcode);
  const char *close = cf_hlo_past(p, e);
  in->args = trim(p + 1, close - 1);
  if (strcmp(in->opcode, "constant") && strcmp(in->opcode, "parameter") && in->args.n) {
    const char *a = in->args.p, *ae = a + in->args.n;
    in->n_opnd = cf_hlo_count_top(a, ae, ',') + 1;
    if (in->n_opnd > CF_MAX_OPERANDS)
      return cf_hlo_fail(r, line, "instruction '%s': more than %d operands", in->name,
                         CF_MAX_OPERANDS);
    if (!(in->opnd = cf_arena_array(&r->scratch, (size_t)in->n_opnd, sizeof *in->opnd)))
      return cf_hlo_oom(r, line);
    for (int i = 0; i < in->n_opnd; i++) {
      const char *ce = cf_hlo_find_top(a, ae, ',');
      if (!ce) ce = ae;
      if ((st = operand_name(r, in, (cf_span){a, (size_t)(ce - a)}, &in->opnd[i]))) return st;
      a = ce + 1;
    }
  }
  char what[CF_MAX_NAME + 32];
  snprintf(what, sizeof what, "instruction '%s'", in->name);
  return parse_attrs(r, close, e, line, what, &in->attr, &in->n_attr);
}

/* ------------------------------------------------------------------ */
/* shapes left out                                                    */

/* Opcodes whose result has the shape of one operand (XLA's shape
 * inference, for the forms the parser lets go without a shape): elementwise
 * ops, and those that pass a value on. The operand is the first unless
 * the name says otherwise (select and clamp: the second). */
static const char *const same_shape_ops[] = {
    "abs", "add", "add-dependency", "and", "atan2", "cbrt", "ceil", "clz", "copy", "cosine",
    "divide", "domain", "erf", "exponential", "exponential-minus-one", "floor", "log",
    "log-plus-one", "logistic", "maximum", "minimum", "multiply", "negate", "not",
    "opt-barrier", "or", "popcnt", "power", "remainder", "round-nearest-afz",
    "round-nearest-even", "rsqrt", "shift-left", "shift-right-arithmetic",
    "shift-right-logical", "sign", "sine", "sqrt", "subtract", "tan", "tanh", "while", "xor",
    "select", "clamp",
};

static int count_leaves(const hshape *t, int64_t max) {
  if (t->n < 0) return 1;
  int64_t n = 0;
  for (int i = 0; i < t->n && n <= max; i++)
    n += count_leaves(&t->elem[i], max);
  return n > max ? (int)max + 1 : (int)n;
}

/* The shape of in (of computation c), which the text leaves out, from its
 * operands' shapes as XLA infers it; an error naming the opcode where
 * collfuse does not infer it. */
static cf_status infer_shape(hlo_reader *r, const hcomp *c, int k, hinstr *in) {
  const hshape *opnd[3] = {NULL, NULL, NULL};
  for (int i = 0; i < in->n_opnd && i < 3; i++) {
    int j = cf_hlo_map_find(&c->map, in->opnd[i]);
    if (j < 0 || j >= k)
      return cf_hlo_fail(r, in->line,
                         "instruction '%s': its shape is left out, and operand '%s' is %s", in->name,
                         in->opnd[i], j < 0 ? "not defined" : "defined after it");
    opnd[i] = &c->ins[j].shape;
  }
  const char *op = in->opcode, *literal = NULL;
  if (!strcmp(op, "tuple")) {
    in->shape = (hshape){.n = in->n_opnd};
    if (in->n_opnd &&
        !(in->shape.elem = cf_arena_array(&r->scratch, (size_t)in->n_opnd, sizeof(hshape))))
      return cf_hlo_oom(r, in->line);
    for (int i = 0; i < in->n_opnd; i++) { /* every operand, not only the first three */
      int j = cf_hlo_map_find(&c->map, in->opnd[i]);
      if (j < 0 || j >= k)
        return cf_hlo_fail(r, in->line,
                           "instruction '%s': its shape is left out, and operand '%s' is %s",
                           in->name, in->opnd[i], j < 0 ? "not defined" : "defined after it");
      in->shape.elem[i] = c->ins[j].shape;
    }
    if (count_leaves(&in->shape, CF_MAX_OPERANDS) > CF_MAX_OPERANDS)
      return cf_hlo_fail(r, in->line, "instruction '%s': tuple of more than %d arrays", in->name,
                         CF_MAX_OPERANDS);
    return CF_OK;
  }
  if (!strcmp(op, "get-tuple-element") && in->n_opnd == 1) {
    const hattr *ia = cf_hlo_attr(in, "index");
    int64_t idx;
    const char *v = ia ? ia->val.p : NULL;
    if (ia && cf_hlo_read_int(&v, ia->val.p + ia->val.n, INT32_MAX, &idx) &&
        v == ia->val.p + ia->val.n && opnd[0]->n > idx) {
      in->shape = opnd[0]->elem[idx];
      return CF_OK;
    }
    return cf_hlo_fail(r, in->line, "instruction '%s': get-tuple-element needs index=N of a tuple",
                       in->name);
  }
  if (!strcmp(op, "compare") || !strcmp(op, "is-finite")) {
    if (!in->n_opnd || opnd[0]->n >= 0)
      return cf_hlo_fail(r, in->line, "instruction '%s': %s of other than an array", in->name, op);
    in->shape = *opnd[0];
    literal = "pred[]"; /* the dims of the operand, the type pred */
  } else if (!strcmp(op, "partition-id") || !strcmp(op, "replica-id")) {
    literal = "u32[]";
  } else if (!strcmp(op, "after-all")) {
    literal = "token[]";
  }
  if (literal) {
    hshape t;
    int64_t leaves = 0;
    cf_status st = parse_shape(r, &literal, literal + strlen(literal), in->line, 0, &t, &leaves);
    if (st) return st;
    if (in->shape.n < 0 && in->shape.s.rank) t.s = in->shape.s;
    in->shape = t;
    return CF_OK;
  }
  size_t n = sizeof same_shape_ops / sizeof same_shape_ops[0];
  for (size_t i = 0; i < n; i++)
    if (!strcmp(op, same_shape_ops[i])) {
      int from = !strcmp(op, "select") || !strcmp(op, "clamp");
      if (in->n_opnd <= from)
        return cf_hlo_fail(r, in->line, "instruction '%s': %s needs %d operand%s", in->name, op,
                           from + 1, from ? "s" : "");
      in->shape = *opnd[from];
      return CF_OK;
    }
  return cf_hlo_fail(r, in->line,
                     "instruction '%s': the shape of '%s' is left out; collfuse infers it only for "
                     "tuple, get-tuple-element, compare and elementwise ops: write it "
                     "('NAME = SHAPE %s(...)')",
                     in->name, op, op);
}

/* The body brace of a computation statement: the last top-level {...} that
 * ends the statement, or that only XLA's `, execution_thread="T"` follows
 * (how it prints a computation of another thread). NULL when the statement
 * is not a computation. */
static const char *body_brace(const char *p, const char *e) {
  const char *cand = NULL;
  while (p < e) {
    if (*p == '{') cand = p;
    p = cf_hlo_at_group(p, e) ? cf_hlo_past(p, e) : p + 1;
  }
  if (!cand) return NULL;
  const char *q = cf_hlo_skip(cf_hlo_past(cand, e), e);
  if (q < e && *q == ',') {
    q = cf_hlo_skip(q + 1, e);
    if (!cf_hlo_word_at(q, e, "execution_thread")) return NULL;
    q = cf_hlo_skip(q + strlen("execution_thread"), e);
    if (q >= e || *q != '=') return NULL;
    q = cf_hlo_skip(q + 1, e);
    if (q >= e || *q != '"') return NULL;
    q = cf_hlo_skip(cf_hlo_past_quoted(q, e), e);
  }
  return q == e ? cand : NULL;
}

static cf_status parse_comp(hlo_reader *r, const char *s, const char *e, int line, hcomp *c,
                            bool *is_comp, bool *is_entry) {
  cf_status st;
  const char *p = cf_hlo_skip(s, e);
  *is_comp = false;
  *is_entry = cf_hlo_word_at(p, e, "ENTRY");
  if (*is_entry) p = cf_hlo_skip(p + 5, e);
  cf_span nm;
  if (p < e && isdigit((unsigned char)*p)) return CF_OK; /* FileLocations and the like */
  p = cf_hlo_read_name(p, e, &nm);
  const char *open = nm.n ? body_brace(p, e) : NULL;
  if (!open && nm.n) { /* `NAME {...}, more`: a computation with what XLA does not print */
    const char *cand = NULL;
    for (const char *q = p; q < e; q = cf_hlo_at_group(q, e) ? cf_hlo_past(q, e) : q + 1)
      if (*q == '{') cand = q;
    const char *after = cand ? cf_hlo_skip(cf_hlo_past(cand, e), e) : e;
    if (after < e && *after == ',')
      return cf_hlo_fail(r, line,
                         "computation '%.*s': only execution_thread=\"NAME\" may follow its body",
                         (int)(nm.n > 64 ? 64 : nm.n), nm.p);
  }
  if (!open) {
    if (*is_entry)
      return cf_hlo_fail(r, line, "ENTRY must be followed by a computation 'NAME {...}'");
    return CF_OK;
  }
  *is_comp = true;
  if (nm.n > CF_MAX_NAME)
    return cf_hlo_fail(r, line, "computation '%.40s...': name longer than %d bytes", nm.p,
                       CF_MAX_NAME);
  memset(c, 0, sizeof *c);
  c->line = line;
  c->root = -1;
  if (!(c->name = cf_hlo_str(r, nm.p, nm.n))) return cf_hlo_oom(r, line);
  const char *bs = open + 1, *be = cf_hlo_past(open, e) - 1;
  /* body: count statements, then parse them; line counting restarts at the brace */
  int body_line = line;
  for (const char *q = s; q < bs; q++)
    body_line += *q == '\n';
  int n = 0, ln = body_line;
  for (const char *q = cf_hlo_skip_nl(bs, be, &ln); q < be; q = cf_hlo_skip_nl(q, be, &ln)) {
    if ((st = cf_hlo_scan_stmt(r, q, be, true, &ln, &q))) return st;
    n++;
  }
  if (!n) return cf_hlo_fail(r, line, "computation '%s' has no instructions", c->name);
  c->ins = cf_arena_array(&r->scratch, (size_t)n, sizeof *c->ins);
  const char **keys = cf_arena_array(&r->scratch, (size_t)n, sizeof *keys);
  if (!c->ins || !keys) return cf_hlo_oom(r, line);
  ln = body_line;
  for (const char *q = cf_hlo_skip_nl(bs, be, &ln); q < be; q = cf_hlo_skip_nl(q, be, &ln)) {
    const char *qe;
    int l0 = ln;
    bool root;
    if ((st = cf_hlo_scan_stmt(r, q, be, true, &ln, &qe))) return st;
    hinstr *in = &c->ins[c->n_ins];
    if ((st = parse_instr(r, q, qe, l0, in, &root))) return st;
    if (root && c->root >= 0)
      return cf_hlo_fail(r, l0, "computation '%s': a second ROOT (the first is '%s' at line %d)",
                         c->name, c->ins[c->root].name, c->ins[c->root].line);
    if (root) c->root = c->n_ins;
    keys[c->n_ins++] = in->name;
    q = qe;
  }
  if (c->root < 0) c->root = c->n_ins - 1; /* XLA: the last instruction */
  int dup;
  if (!cf_hlo_map_build(&r->scratch, &c->map, keys, c->n_ins, &dup)) return cf_hlo_oom(r, line);
  if (dup >= 0)
    return cf_hlo_fail(r, c->ins[dup].line,
                       "computation '%s': instruction '%s' defined twice (first at line %d)",
                       c->name, keys[dup], c->ins[cf_hlo_map_find(&c->map, keys[dup])].line);
  for (int k = 0; k < c->n_ins; k++)
    if (c->ins[k].no_shape && (st = infer_shape(r, c, k, &c->ins[k]))) return st;
  return CF_OK;
}

static cf_status parse_header(hlo_reader *r, const char *s, const char *e, int line) {
  const char *p = cf_hlo_skip(s + strlen("HloModule"), e);
  cf_span nm;
  p = cf_hlo_read_name(p, e, &nm);
  if (!nm.n) return cf_hlo_fail(r, line, "HloModule needs a name");
  if (nm.n > CF_MAX_NAME)
    return cf_hlo_fail(r, line, "module '%.40s...': name longer than %d bytes", nm.p, CF_MAX_NAME);
  if (!(r->module = cf_hlo_str(r, nm.p, nm.n))) return cf_hlo_oom(r, line);
  hattr *a;
  int n;
  cf_status st = parse_attrs(r, p, e, line, "HloModule", &a, &n);
  if (st) return st;
  for (int i = 0; i < n; i++) {
    if (cf_span_is(a[i].key, "frontend_attributes")) r->module_attrs = a[i].val;
    int64_t *dst = cf_span_is(a[i].key, "num_partitions")  ? &r->partitions
                   : cf_span_is(a[i].key, "replica_count") ? &r->replicas
                                                           : NULL;
    const char *v = a[i].val.p;
    if (dst && (!cf_hlo_read_int(&v, v + a[i].val.n, CF_MAX_WORLD, dst) ||
                v != a[i].val.p + a[i].val.n || !*dst))
      return cf_hlo_fail(r, line, "HloModule: %s='%s' must be an integer in 1..%d",
                         CF_SPAN_QUOTE(a[i].key), CF_SPAN_QUOTE(a[i].val), CF_MAX_WORLD);
  }
  int64_t w;
  if (!cf_mul_i64(r->partitions ? r->partitions : 1, r->replicas ? r->replicas : 1, &w) ||
      w > CF_MAX_WORLD)
    return cf_hlo_fail(r, line, "HloModule: num_partitions * replica_count is above %d devices",
                       CF_MAX_WORLD);
  return CF_OK;
}

/* Whether p starts like a computation: `ENTRY`, or a name followed by its
 * body or its signature (`%name (p: f32[]) -> f32[] {`). */
static bool comp_head(const char *p, const char *e) {
  if (cf_hlo_word_at(p, e, "ENTRY")) return true;
  cf_span nm;
  p = cf_hlo_skip(cf_hlo_read_name(p, e, &nm), e);
  return nm.n && p < e && (*p == '{' || *p == '(');
}

static cf_status parse_module(hlo_reader *r) {
  cf_status st;
  const char *e = r->end;
  int line = 1, n = 0;
  const char *p = cf_hlo_skip_nl(r->text, e, &line);
  /* XLA's parser also takes a module without its header, from its first
   * computation (`ENTRY e {...}` or `NAME {...}`), as XLA's tests write
   * them (RunAndFilecheckHloRewrite): no name, XLA's default config */
  bool header = cf_hlo_word_at(p, e, "HloModule");
  if (!header && !comp_head(p, e))
    return cf_hlo_fail(r, line,
                       "not HLO text: expected 'HloModule NAME' or a computation at the start");
  /* statements at the top level: an upper bound on the computations */
  for (const char *q = p; q < e; q = cf_hlo_skip_nl(q, e, &line)) {
    if ((st = cf_hlo_scan_stmt(r, q, e, false, &line, &q))) return st;
    n++;
  }
  if (!(r->comps = cf_arena_array(&r->scratch, (size_t)n, sizeof *r->comps)))
    return cf_hlo_oom(r, 0);
  const char **keys = cf_arena_array(&r->scratch, (size_t)n, sizeof *keys);
  if (!keys) return cf_hlo_oom(r, 0);
  line = 1;
  p = cf_hlo_skip_nl(r->text, e, &line);
  int entry_line = 0;
  for (bool first = true; p < e; p = cf_hlo_skip_nl(p, e, &line), first = false) {
    int l0 = line;
    const char *pe;
    bool is_comp, is_entry;
    if ((st = cf_hlo_scan_stmt(r, p, e, false, &line, &pe))) return st;
    if (first && header)
      st = parse_header(r, p, pe, l0);
    else if (!(st = parse_comp(r, p, pe, l0, &r->comps[r->n_comps], &is_comp, &is_entry)) &&
             is_comp) {
      if (is_entry && r->entry)
        return cf_hlo_fail(r, l0, "a second ENTRY computation (the first is at line %d)",
                           entry_line);
      if (is_entry) {
        r->entry = &r->comps[r->n_comps];
        entry_line = l0;
      }
      keys[r->n_comps] = r->comps[r->n_comps].name;
      r->n_comps++;
    }
    if (st) return st;
    p = pe;
  }
  if (!r->n_comps) return cf_hlo_fail(r, line, "no computations in the module");
  if (!r->entry) r->entry = &r->comps[r->n_comps - 1]; /* XLA: the last one */
  int dup;
  if (!cf_hlo_map_build(&r->scratch, &r->comp_map, keys, r->n_comps, &dup)) return cf_hlo_oom(r, 0);
  if (dup >= 0)
    return cf_hlo_fail(r, r->comps[dup].line, "computation '%s' defined twice (first at line %d)",
                       keys[dup], r->comps[cf_hlo_map_find(&r->comp_map, keys[dup])].line);
  return CF_OK;
}

cf_status cf_hlo_run(cf_context *ctx, const char *name, const char *data, size_t size,
                     cf_status (*parse)(hlo_reader *r), cf_graph **out) {
  *out = NULL;
  hlo_reader r = {.ctx = ctx, .file = name, .max_rank = -1};
  r.work_limit = size < (HLO_MAX_WORK - HLO_MIN_WORK) / HLO_WORK_PER_BYTE
                     ? HLO_MIN_WORK + (int64_t)size * HLO_WORK_PER_BYTE
                     : HLO_MAX_WORK;
  r.work = r.work_limit;
  cf_status st = cf_graph_new(ctx, name, &r.g);
  if (st) return st;
  r.file = r.g->file;
  if (!(r.text = malloc(size + 1))) {
    st = cf_hlo_oom(&r, 0);
    goto done;
  }
  if (size) memcpy(r.text, data, size);
  r.text[size] = 0;
  r.end = r.text + size;
  if ((st = parse(&r)) || (st = cf_hlo_build(&r))) goto done;
  *out = r.g;
  r.g = NULL; /* the caller's now */
done:
  free(r.text);
  free(r.refs);
  free(r.seen);
  free(r.meshes);
  free(r.mesh_slots);
  cf_arena_free(&r.scratch);
  cf_graph_release(r.g);
  return st;
}

cf_status cf_hlo_read(cf_context *ctx, const char *name, const char *data, size_t size,
                      cf_graph **out) {
  return cf_hlo_run(ctx, name, data, size, parse_module, out);
}
