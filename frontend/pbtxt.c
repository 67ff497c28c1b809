/* pbtxt.c - reader for TensorFlow / Ascend GE GraphDefs in protobuf text
 * format: node { name op input attr { key value { s i f b type shape list
 * tensor } } }.
 *
 * Two steps. First prototext.c parses the text into a generic tree of
 * fields (protobuf text needs no schema to be parsed), so the GraphDef
 * reading here only looks fields up by name and ignores what it does not
 * know (device, versions, library, _class ...). Then every node becomes an
 * IR node in file order, its operands are resolved by name (a GraphDef may
 * use a node before it defines it), and Identity-like nodes are looked
 * through. Hcom* collectives, MatMul, Add/Sub/Mul, Cast, Reshape, Const,
 * _Arg/Placeholder and _Retval map onto IR ops; every other op becomes
 * Opaque with the types its _output_shapes and dtype attributes give.
 */
#include "prototext.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct pin {
  const char *name;
  int port;
  bool control; /* ^name */
  int line;
} pin;

/* A node attribute: its key decoded once, its AttrValue. */
typedef struct pattr {
  const char *key;
  size_t len;
  const pf *value;
} pattr;

/* A GraphDef node and what it became. */
typedef struct pnode {
  const pf *msg;
  pattr *attrs; /* in file order; lookups compare decoded keys, never re-decode */
  int n_attrs;
  const char *name, *op;
  int line;
  int n_in;
  pin *in;
  int ir;                     /* IR node, -1 when none (alias, NoOp, skipped) */
  int state;                  /* 0 not read yet, 1 read */
  int alias;                  /* Identity-like: the input it forwards (index into in), else -1 */
  int resolving;              /* alias: 0 not yet, 1 on the walk now, 2 done (res holds it) */
  cf_ref res;                 /* alias: the IR output it forwards, once resolving == 2 */
  bool referenced;            /* some node uses one of its outputs as data */
  bool reshape;               /* Reshape, HcomAllToAllV: only input 0 is an IR operand */
  int64_t ivals[CF_MAX_RANK]; /* a small integer Const (Reshape's shape), n_ivals >= 0 */
  int n_ivals;
  int ctl_seen;               /* control_edges: 1 + the IR node whose walk last met it */
} pnode;

typedef struct pb_reader {
  pb_text pb; /* context, file, scratch arena and oom flag, shared with the parser */
  cf_graph *g;
  char *text;
  pf root;
  pnode *nodes;
  int n_nodes;
  int *index; /* name -> node + 1, open addressing */
  size_t index_cap;
  int64_t world;
} pb_reader;

static cf_status fail(pb_reader *r, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static cf_status fail(pb_reader *r, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  cf_status st = cf_reader_verror(r->pb.ctx, r->pb.oom, r->pb.file, line, fmt, ap);
  va_end(ap);
  return st;
}

static cf_status oom(pb_reader *r, int line) {
  r->pb.oom = true;
  return fail(r, line, "out of memory");
}

/* ------------------------------------------------------------------ */
/* TensorFlow types                                                   */

typedef struct tf_type {
  const char *name;
  int code;
  cf_dtype dt; /* CF_DT_INVALID: none */
  bool exact;  /* dt is the TF type itself */
  int size;
} tf_type;

static const tf_type tf_types[] = {
    {"DT_FLOAT", 1, CF_DT_FLOAT32, true, 4},      {"DT_DOUBLE", 2, CF_DT_FLOAT64, true, 8},
    {"DT_INT32", 3, CF_DT_INT32, true, 4},        {"DT_UINT8", 4, CF_DT_UINT8, true, 1},
    {"DT_INT16", 5, CF_DT_INT16, true, 2},        {"DT_INT8", 6, CF_DT_INT8, true, 1},
    {"DT_STRING", 7, CF_DT_INVALID, false, 0},    {"DT_COMPLEX64", 8, CF_DT_INVALID, false, 8},
    {"DT_INT64", 9, CF_DT_INT64, true, 8},        {"DT_BOOL", 10, CF_DT_BOOL, true, 1},
    {"DT_BFLOAT16", 14, CF_DT_BFLOAT16, true, 2}, {"DT_UINT16", 17, CF_DT_UINT16, true, 2},
    {"DT_HALF", 19, CF_DT_FLOAT16, true, 2},      {"DT_UINT32", 22, CF_DT_UINT32, true, 4},
    {"DT_UINT64", 23, CF_DT_UINT64, true, 8},
};

/* type: DT_FLOAT (or its number; _REF types count as their base type) */
static const tf_type *field_type(pb_reader *r, const pf *f) {
  if (!f || f->msg) return NULL;
  int64_t code = -1;
  size_t n = f->text.n;
  if (n > 4 && memcmp(f->text.p + n - 4, "_REF", 4) == 0) n -= 4;
  if (!cf_pb_int(&r->pb, f, &code))
    for (size_t i = 0; i < sizeof tf_types / sizeof tf_types[0]; i++)
      if (strlen(tf_types[i].name) == n && memcmp(tf_types[i].name, f->text.p, n) == 0)
        return &tf_types[i];
  if (code > 100) code -= 100;
  for (size_t i = 0; i < sizeof tf_types / sizeof tf_types[0]; i++)
    if (tf_types[i].code == code) return &tf_types[i];
  return NULL;
}

/* Decode every attr { key value } of n once (keys that are no string are
 * skipped, as TensorFlow would reject them anyway): lookups then cost a
 * compare per attribute, not a decode, however many keys a node has. */
static cf_status read_attrs(pb_reader *r, pnode *n) {
  int cnt = 0;
  for (const pf *a = cf_pb_get(n->msg, "attr"); a; a = cf_pb_next(a, "attr"))
    cnt++;
  if (!cnt) return CF_OK;
  if (!(n->attrs = cf_arena_array(&r->pb.scratch, (size_t)cnt, sizeof *n->attrs)))
    return oom(r, n->line);
  for (const pf *a = cf_pb_get(n->msg, "attr"); a; a = cf_pb_next(a, "attr")) {
    const pf *k = cf_pb_get(a, "key");
    pattr *x = &n->attrs[n->n_attrs];
    char *s;
    if (!k || cf_pb_string(&r->pb, k, &s, &x->len)) {
      if (r->pb.oom) return CF_ERR_NO_MEMORY;
      cf_clear_error(r->pb.ctx);
      continue;
    }
    x->key = s;
    x->value = cf_pb_get(a, "value");
    n->n_attrs++;
  }
  return CF_OK;
}

/* The AttrValue of node attribute key (the first of that key), or NULL. */
static const pf *node_attr(const pnode *n, const char *key) {
  size_t len = strlen(key);
  for (int i = 0; i < n->n_attrs; i++)
    if (n->attrs[i].len == len && memcmp(n->attrs[i].key, key, len) == 0) return n->attrs[i].value;
  return NULL;
}

/* TensorShapeProto: dims, all known. */
static cf_status shape_of(pb_reader *r, const pnode *n, const pf *sh, cf_shape *out) {
  memset(out, 0, sizeof *out);
  const pf *ur = cf_pb_get(sh, "unknown_rank");
  if (!sh->msg || (ur && cf_span_is(ur->text, "true")))
    return fail(r, sh->line, "node '%s': a shape of unknown rank", n->name);
  for (const pf *d = cf_pb_get(sh, "dim"); d; d = cf_pb_next(d, "dim")) {
    int64_t v = 0;
    const pf *size = cf_pb_get(d, "size");
    if (size && !cf_pb_int(&r->pb, size, &v))
      return fail(r, d->line, "node '%s': bad dim size", n->name);
    if (v < 0)
      return fail(r, d->line,
                  "node '%s': unknown dimension (size %lld): collfuse needs static shapes", n->name,
                  (long long)v);
    if (out->rank == CF_MAX_RANK)
      return fail(r, d->line, "node '%s': shape has more than %d dimensions", n->name, CF_MAX_RANK);
    out->dims[out->rank++] = v;
  }
  return CF_OK;
}

/* ------------------------------------------------------------------ */
/* IR helpers                                                         */

static cf_status set_type(pb_reader *r, int idx, cf_dtype dt, const cf_shape *s, int line) {
  char buf[CF_MAX_RANK * 24];
  cf_status st = CF_OK;
  if (dt != CF_DT_INVALID) st = cf_node_parse_attr(r->g, idx, CF_A_DTYPE, cf_dtype_name(dt), line);
  if (!st && s)
    st = cf_node_parse_attr(r->g, idx, CF_A_SHAPE, cf_shape_format(s, buf, sizeof buf), line);
  return st;
}

/* Element i of little-endian tensor_content. */
static double content_elem(const tf_type *t, const unsigned char *b, int64_t i) {
  uint64_t u = 0;
  for (int k = t->size - 1; k >= 0; k--)
    u = u << 8 | b[i * t->size + k];
  switch (t->code) {
  case 1: {
    uint32_t x = (uint32_t)u;
    float f;
    memcpy(&f, &x, 4);
    return f;
  }
  case 2: {
    double d;
    memcpy(&d, &u, 8);
    return d;
  }
  case 14: return cf_bf16_to_f32((uint16_t)u);
  case 19: return cf_f16_to_f32((uint16_t)u);
  default: { /* integers and bool, as their dtype reads the bits */
    int64_t x = cf_dtype_wrap(t->dt, u);
    return cf_dtype_is_unsigned(t->dt) ? (double)(uint64_t)x : (double)x;
  }
  }
}

/* Element i of little-endian tensor_content of an integer type t, exact
 * (content_elem's double cannot hold every int64). */
static int64_t content_int(const tf_type *t, const unsigned char *b, int64_t i) {
  uint64_t u = 0;
  for (int k = t->size - 1; k >= 0; k--)
    u = u << 8 | b[i * t->size + k];
  return cf_dtype_wrap(t->dt, u); /* uint64: its bits, as int64 */
}

/* The typed value list of a TensorProto for t (float_val, int_val, ...). */
static const char *val_field(const tf_type *t) {
  switch (t->code) {
  case 1: return "float_val";
  case 2: return "double_val";
  case 9: return "int64_val";
  case 10: return "bool_val";
  case 14:
  case 19: return "half_val";
  case 22: return "uint32_val";
  case 23: return "uint64_val";
  default: return "int_val";
  }
}

/* Const: one repeated value -> Constant value=, 0, 1, 2, ... -> init=iota,
 * anything else -> Opaque (the IR keeps no tensor data). A Constant's value
 * is a double: an integer tensor with a value beyond +-2^53 stays Opaque
 * rather than being rounded, and the small integer tensors a Reshape reads
 * its shape from are kept as integers, never through a double. */
static cf_status read_const(pb_reader *r, pnode *n) {
  const pf *v = node_attr(n, "value"), *ten = v ? cf_pb_get(v, "tensor") : NULL;
  if (!ten || !ten->msg)
    return fail(r, n->line, "node '%s': Const needs attr value { tensor { ... } }", n->name);
  const tf_type *t = field_type(r, cf_pb_get(ten, "dtype"));
  if (!t) return fail(r, ten->line, "node '%s': tensor without a dtype collfuse knows", n->name);
  if (t->dt == CF_DT_INVALID)
    return fail(r, ten->line, "node '%s': %s has no IR dtype", n->name, t->name);
  cf_shape s = {0};
  const pf *ts = cf_pb_get(ten, "tensor_shape");
  cf_status st = ts ? shape_of(r, n, ts, &s) : CF_OK;
  int64_t count;
  if (st) return st;
  if (!cf_shape_elements(&s, &count))
    return fail(r, ten->line, "node '%s': tensor of more than %lld elements", n->name,
                (long long)CF_MAX_ELEMENTS);
  const pf *content = cf_pb_get(ten, "tensor_content");
  double first = 0, x = 0;
  bool integer = t->exact && !cf_dtype_is_float(t->dt), splat = true, iota = true,
       small = integer && count <= CF_MAX_RANK, fits = true;
  const int64_t exact = (int64_t)1 << 53; /* integers a double holds exactly */
  n->n_ivals = -1;
  if (content) {
    char *b;
    size_t len;
    if ((st = cf_pb_string(&r->pb, content, &b, &len))) return st;
    int64_t want;
    if (!cf_mul_i64(count, t->size, &want) || (int64_t)len != want)
      return fail(r, content->line,
                  "node '%s': tensor_content has %zu bytes, %lld elements of %s need %lld", n->name,
                  len, (long long)count, t->name, (long long)want);
    for (int64_t i = 0; i < count && (splat || iota || small); i++) {
      x = content_elem(t, (const unsigned char *)b, i);
      if (integer) {
        int64_t iv = content_int(t, (const unsigned char *)b, i);
        fits &= iv >= -exact && iv <= exact;
        if (small) n->ivals[i] = iv;
      }
      if (!i) first = x;
      splat &= memcmp(b, b + i * t->size, (size_t)t->size) == 0;
      iota &= x == (double)i;
    }
  } else {
    const char *vf = val_field(t);
    int64_t m = 0;
    for (const pf *f = cf_pb_get(ten, vf); f; f = cf_pb_next(f, vf), m++) {
      if (m >= count)
        return fail(r, f->line, "node '%s': more %s values than the %lld elements", n->name, vf,
                    (long long)count);
      int64_t iv;
      if (t->code == 10)
        x = cf_span_is(f->text, "true") || cf_span_is(f->text, "1");
      else if (t->code == 14 || t->code == 19) {
        if (!cf_pb_int(&r->pb, f, &iv)) return fail(r, f->line, "node '%s': bad %s", n->name, vf);
        x = t->code == 14 ? cf_bf16_to_f32((uint16_t)iv) : cf_f16_to_f32((uint16_t)iv);
      } else if (cf_dtype_is_float(t->dt)) {
        if (!cf_pb_double(f, &x))
          return fail(r, f->line, "node '%s': bad %s '%s'", n->name, vf, CF_SPAN_QUOTE(f->text));
      } else {
        if (!cf_pb_int(&r->pb, f, &iv))
          return fail(r, f->line, "node '%s': bad %s '%s'", n->name, vf, CF_SPAN_QUOTE(f->text));
        x = (double)iv;
        fits &= iv >= -exact && iv <= exact;
        if (small) n->ivals[m] = iv;
      }
      if (!m) first = x;
      splat &= x == first;
      iota &= x == (double)m;
    }
    /* TensorFlow repeats the last value over the remaining elements */
    if (m < count && m > 0) iota = false;
    if (small)
      for (int64_t i = m; i < count; i++)
        n->ivals[i] = m ? n->ivals[m - 1] : 0;
  }
  if (small) n->n_ivals = (int)count;
  bool finite = isfinite(first);
  int idx;
  bool opaque = !t->exact || !finite || !fits || (!splat && !(iota && count > 1));
  if ((st = cf_graph_add_node(r->g, n->name, opaque ? CF_OP_OPAQUE : CF_OP_CONSTANT, n->line,
                              &idx)) ||
      (st = set_type(r, idx, t->dt, &s, n->line)))
    return st;
  n->ir = idx;
  if (opaque) return cf_node_parse_attr(r->g, idx, CF_A_TYPE, "Const", n->line);
  if (!splat) return cf_node_parse_attr(r->g, idx, CF_A_INIT, "iota", n->line);
  cf_attr a = {.id = CF_A_VALUE, .v.f = first};
  return cf_node_set_attr(r->g, idx, &a);
}

/* Where a node's output dtypes come from, walked port by port: the first
 * list attribute (Tout, output_types, T, out_types) long enough for the
 * port, else the scalar one (T, dtype, out_type, DstT, output_type, type).
 * One cursor per list, so typing k outputs reads each list once. */
typedef struct type_walk {
  const pf *cur[4]; /* the port's type field of each list, NULL past its end */
  const pf *scalar; /* the scalar type field, or NULL */
} type_walk;

static void types_begin(pb_reader *r, const pnode *n, type_walk *w) {
  static const char *scalar[] = {"T", "dtype", "out_type", "DstT", "output_type", "type"};
  static const char *lists[] = {"Tout", "output_types", "T", "out_types"};
  memset(w, 0, sizeof *w);
  for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
    const pf *v = node_attr(n, lists[i]), *l = v ? cf_pb_get(v, "list") : NULL;
    w->cur[i] = l ? cf_pb_get(l, "type") : NULL;
  }
  for (size_t i = 0; i < sizeof scalar / sizeof scalar[0] && !w->scalar; i++) {
    const pf *v = node_attr(n, scalar[i]);
    w->scalar = v ? cf_pb_get(v, "type") : NULL;
  }
}

/* The dtype of the next port, NULL when none is given. */
static const tf_type *types_next(pb_reader *r, type_walk *w) {
  const pf *f = NULL;
  for (size_t i = 0; i < sizeof w->cur / sizeof w->cur[0]; i++)
    if (w->cur[i]) {
      if (!f) f = w->cur[i];
      w->cur[i] = cf_pb_next(w->cur[i], "type");
    }
  return field_type(r, f ? f : w->scalar);
}

/* dtype of a node's output 0. */
static const tf_type *out_type(pb_reader *r, const pnode *n) {
  type_walk w;
  types_begin(r, n, &w);
  return types_next(r, &w);
}

/* _output_shapes { list { shape {...} ... } }: the count, and shape k. */
static int output_shapes(pb_reader *r, const pnode *n, const pf **first) {
  const pf *v = node_attr(n, "_output_shapes"), *l = v ? cf_pb_get(v, "list") : NULL;
  int k = 0;
  *first = l ? cf_pb_get(l, "shape") : NULL;
  for (const pf *f = *first; f; f = cf_pb_next(f, "shape"))
    k++;
  return k;
}

/* An Opaque node typed by _output_shapes and the dtype attributes. Nodes
 * nothing uses as data are skipped when they cannot be typed. */
static cf_status read_opaque(pb_reader *r, pnode *n, bool *skipped) {
  const pf *sh;
  int k = output_shapes(r, n, &sh);
  *skipped = false;
  const char *why = NULL;
  type_walk w;
  types_begin(r, n, &w);
  if (!k) why = "it has no _output_shapes";
  for (int i = 0; i < k && !why; i++) {
    const tf_type *t = types_next(r, &w);
    if (!t || t->dt == CF_DT_INVALID) why = "its dtype attribute is missing or has no IR dtype";
  }
  if (why && !n->referenced) {
    *skipped = true;
    cf_log(r->pb.ctx, CF_LOG_INFO, "%s:%d: note: node '%s' (op %s) skipped: nothing uses it and %s",
           r->pb.file, n->line, n->name, n->op, why);
    /* reported with the Opaque ones (check warns, --strict refuses) */
    return cf_graph_note_dropped(r->g, n->op, n->name, n->line);
  }
  if (why) return fail(r, n->line, "node '%s': cannot import op '%s': %s", n->name, n->op, why);
  int idx;
  cf_status st = cf_graph_add_node(r->g, n->name, CF_OP_OPAQUE, n->line, &idx);
  if (!st) st = cf_node_parse_attr(r->g, idx, CF_A_TYPE, n->op, n->line);
  if (st) return st;
  n->ir = idx;
  cf_node *nd = &r->g->nodes[idx];
  if (!(nd->decl = cf_arena_array(&r->g->arena, (size_t)k, sizeof *nd->decl)))
    return oom(r, n->line);
  types_begin(r, n, &w);
  for (int i = 0; i < k; i++, sh = cf_pb_next(sh, "shape")) {
    cf_decl *d = &nd->decl[i];
    if ((st = shape_of(r, n, sh, &d->v.shape))) return st;
    d->v.dtype = types_next(r, &w)->dt;
    d->has_dtype = d->has_shape = true;
    nd->n_decl++;
  }
  return CF_OK;
}

/* ------------------------------------------------------------------ */
/* nodes                                                              */

static cf_status set_int_attr(pb_reader *r, pnode *n, int idx, const char *key, cf_attr_id id) {
  const pf *v = node_attr(n, key);
  if (!v) return CF_OK;
  int64_t x;
  const pf *f = cf_pb_get(v, "i") ? cf_pb_get(v, "i") : cf_pb_get(v, "s");
  if (!cf_pb_int(&r->pb, f, &x))
    return fail(r, v->line, "node '%s': attr %s must be an integer", n->name, key);
  cf_attr a = {.id = id, .v.i = x};
  return cf_node_set_attr(r->g, idx, &a);
}

static cf_status read_collective(pb_reader *r, pnode *n, cf_op op, int layout) {
  int idx;
  cf_status st = cf_graph_add_node(r->g, n->name, op, n->line, &idx);
  if (st) return st;
  n->ir = idx;
  const pf *v;
  if ((v = node_attr(n, "reduction")) && cf_op_table[op].allowed & (1u << CF_A_REDUCTION)) {
    const char *s;
    if (!cf_pb_get(v, "s") || (st = cf_pb_name(&r->pb, cf_pb_get(v, "s"), &s)))
      return st ? st : fail(r, v->line, "node '%s': reduction must be a string", n->name);
    if ((st = cf_node_parse_attr(r->g, idx, CF_A_REDUCTION, s, v->line))) return st;
  }
  const char *group = CF_WORLD_GROUP;
  if ((v = node_attr(n, "group"))) {
    if (!cf_pb_get(v, "s") || (st = cf_pb_name(&r->pb, cf_pb_get(v, "s"), &group)))
      return st ? st : fail(r, v->line, "node '%s': group must be a string", n->name);
    if ((st = cf_node_parse_attr(r->g, idx, CF_A_GROUP, group, v->line))) return st;
  }
  if ((op == CF_OP_ALLREDUCE || op == CF_OP_REDUCE || op == CF_OP_ALLGATHER ||
       op == CF_OP_REDUCESCATTER) &&
      ((st = set_int_attr(r, n, idx, "fusion", CF_A_FUSION)) ||
       (st = set_int_attr(r, n, idx, "fusion_id", CF_A_FUSION_ID))))
    return st;
  if ((st = set_int_attr(r, n, idx, "rank_size", CF_A_RANK_SIZE))) return st;
  if (op == CF_OP_BROADCAST || op == CF_OP_REDUCE) {
    if (!node_attr(n, "root_rank"))
      return fail(r, n->line, "node '%s': %s needs attr root_rank (HCCL has no default root)",
                  n->name, n->op);
    if ((st = set_int_attr(r, n, idx, "root_rank", CF_A_ROOT))) return st;
  }
  if (layout >= 0) {
    cf_attr a = {.id = CF_A_LAYOUT, .v.i = layout};
    if ((st = cf_node_set_attr(r->g, idx, &a))) return st;
  }
  const tf_type *t = out_type(r, n);
  if (t && t->dt != CF_DT_INVALID && (st = set_type(r, idx, t->dt, NULL, n->line))) return st;
  /* the group's size: the world from hccl_world_group, else a declared group */
  int64_t rs = cf_node_int(&r->g->nodes[idx], CF_A_RANK_SIZE, 0);
  if (rs > CF_MAX_WORLD || rs < 0)
    return fail(r, n->line, "node '%s': rank_size=%lld must be in 1..%d", n->name, (long long)rs,
                CF_MAX_WORLD);
  if (rs > r->world) r->world = rs;
  if (strcmp(group, CF_WORLD_GROUP) && !cf_graph_group(r->g, group)) {
    /* a GraphDef does not carry group membership: the first rank_size ranks */
    if (!rs)
      return fail(
          r, n->line,
          "node '%s': group '%s' needs attr rank_size (a GraphDef does not say which ranks it has)",
          n->name, group);
    int *ranks = malloc((size_t)rs * sizeof *ranks);
    if (!ranks) return oom(r, n->line);
    for (int i = 0; i < rs; i++)
      ranks[i] = i;
    st = cf_graph_add_group(r->g, group, ranks, (int)rs, n->line);
    free(ranks);
  }
  return st;
}

static int find_node(const pb_reader *r, const char *name);
static cf_status read_node(pb_reader *r, pnode *n);

/* HcomAllToAllV (send_data, send_counts, send_displacements, recv_counts,
 * recv_displacements): an AllToAll of send_data when the four lists are
 * small Consts (at most CF_MAX_RANK ranks) that say every rank sends and
 * receives c elements at i * c, in whole rows of send_data; else Opaque,
 * its type saying why. */
static cf_status read_alltoallv(pb_reader *r, pnode *n) {
  const int64_t *lists[4];
  int m = -1;
  const char *why = NULL;
  cf_status st;
  for (int i = 0; i < 4 && !why; i++) {
    int k = i + 1 < n->n_in && !n->in[i + 1].control ? find_node(r, n->in[i + 1].name) : -1;
    pnode *c = k >= 0 ? &r->nodes[k] : NULL;
    if (c && !c->state && !strcmp(c->op, "Const") && (st = read_node(r, c))) return st;
    if (!c || strcmp(c->op, "Const") || c->n_ivals < 1 || (m >= 0 && c->n_ivals != m))
      why = "counts that are not constants of one length up to 8";
    else
      lists[i] = c->ivals, m = c->n_ivals;
  }
  int64_t cnt = why ? 0 : lists[0][0], disp, total;
  for (int j = 0; j < m && !why; j++)
    if (lists[0][j] != cnt || lists[2][j] != cnt || !cf_mul_i64(j, cnt, &disp) ||
        lists[1][j] != disp || lists[3][j] != disp)
      why = "counts or displacements that differ between ranks";
  const pf *sh;
  cf_shape s;
  if (!why && output_shapes(r, n, &sh) == 1 && !shape_of(r, n, sh, &s)) {
    int64_t e = 0, row = 1;
    bool sized = cf_shape_elements(&s, &e);
    for (int d = 1; d < s.rank && sized; d++)
      sized = cf_mul_i64(row, s.dims[d], &row);
    if (!sized || s.rank < 1 || !cf_mul_i64(m, cnt, &total) || e != total || (row && cnt % row))
      why = "counts that do not cut send_data into whole rows";
  }
  cf_clear_error(r->pb.ctx);
  if (why) {
    bool skipped;
    char type[96];
    snprintf(type, sizeof type, "HcomAllToAllV (%s)", why);
    if ((st = read_opaque(r, n, &skipped)) || skipped) return st;
    return cf_node_parse_attr(r->g, n->ir, CF_A_TYPE, type, n->line);
  }
  if ((st = read_collective(r, n, CF_OP_ALLTOALL, -1))) return st;
  n->reshape = true; /* the counts are not operands */
  cf_attr a = {.id = CF_A_RANK_SIZE, .v.i = m};
  if (m > r->world) r->world = m;
  return cf_node_attr(&r->g->nodes[n->ir], CF_A_RANK_SIZE) ? CF_OK
                                                           : cf_node_set_attr(r->g, n->ir, &a);
}

static cf_status read_node(pb_reader *r, pnode *n) {
  const char *op = n->op;
  cf_status st = CF_OK;
  int idx, layout;
  const pf *v;
  n->ir = -1;
  n->state = 1;
  if (!strcmp(op, "Identity") || !strcmp(op, "Snapshot") || !strcmp(op, "StopGradient") ||
      !strcmp(op, "PreventGradient")) {
    for (int i = 0; i < n->n_in && n->alias < 0; i++)
      if (!n->in[i].control) n->alias = i;
    return n->alias < 0 ? fail(r, n->line, "node '%s': %s needs an input", n->name, op) : CF_OK;
  }
  if (!strcmp(op, "NoOp")) return CF_OK;
  if (!strcmp(op, "Const")) return read_const(r, n);
  if (!strcmp(op, "_Arg") || !strcmp(op, "Placeholder")) {
    const tf_type *t = out_type(r, n);
    cf_shape s;
    const pf *sh = (v = node_attr(n, "shape")) ? cf_pb_get(v, "shape") : NULL;
    if (!sh) output_shapes(r, n, &sh);
    if (!t || t->dt == CF_DT_INVALID)
      return fail(r, n->line, "node '%s': %s needs a dtype (attr T or dtype) with an IR dtype",
                  n->name, op);
    if (!sh)
      return fail(r, n->line, "node '%s': %s needs a shape (attr shape or _output_shapes)", n->name,
                  op);
    if ((st = shape_of(r, n, sh, &s)) ||
        (st = cf_graph_add_node(r->g, n->name, CF_OP_INPUT, n->line, &idx)))
      return st;
    n->ir = idx;
    return set_type(r, idx, t->dt, &s, n->line);
  }
  if (!strcmp(op, "_Retval")) {
    if ((st = cf_graph_add_node(r->g, n->name, CF_OP_OUTPUT, n->line, &idx))) return st;
    n->ir = idx;
    return CF_OK;
  }
  if (!strcmp(op, "HcomAllToAllV")) return read_alltoallv(r, n);
  cf_op ir = cf_op_lookup(op, &layout);
  if (!strncmp(op, "Hcom", 4) && ir != CF_OP_INVALID) return read_collective(r, n, ir, layout);
  static const struct {
    const char *tf;
    cf_op op;
  } simple[] = {{"Add", CF_OP_ADD},
                {"AddV2", CF_OP_ADD},
                {"Sub", CF_OP_SUB},
                {"Mul", CF_OP_MUL},
                {"Cast", CF_OP_CAST},
                {"MatMul", CF_OP_MATMUL},
                {"BatchMatMul", CF_OP_MATMUL},
                {"BatchMatMulV2", CF_OP_MATMUL},
                {"Reshape", CF_OP_RESHAPE}};
  ir = CF_OP_INVALID;
  for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++)
    if (!strcmp(op, simple[i].tf)) ir = simple[i].op;
  const pf *sh;
  int n_sh = output_shapes(r, n, &sh);
  cf_shape s;
  if (ir == CF_OP_MATMUL) { /* transposed or batched products are not the IR's MatMul */
    static const char *flags[] = {"transpose_a", "transpose_b", "adj_x", "adj_y"};
    for (size_t i = 0; i < 4; i++)
      if ((v = node_attr(n, flags[i])) && cf_pb_get(v, "b") &&
          cf_span_is(cf_pb_get(v, "b")->text, "true"))
        ir = CF_OP_INVALID;
    if (n_sh == 1 && !shape_of(r, n, sh, &s) && s.rank != 2) ir = CF_OP_INVALID;
    cf_clear_error(r->pb.ctx);
  }
  if (ir == CF_OP_RESHAPE) { /* the target shape: _output_shapes, else a small Const operand */
    if (n_sh == 1) {
      if ((st = shape_of(r, n, sh, &s))) return st;
    } else {
      s.rank = -1;
      if (n->n_in >= 2 && !n->in[1].control) {
        int k = find_node(r, n->in[1].name);
        pnode *c = k >= 0 ? &r->nodes[k] : NULL;
        if (c && !c->state && !strcmp(c->op, "Const") && (st = read_node(r, c))) return st;
        if (c && c->n_ivals >= 0 && c->ir >= 0 && (s.rank = c->n_ivals) >= 0)
          for (int i = 0; i < s.rank; i++)
            s.dims[i] = c->ivals[i];
      }
      for (int i = 0; i < s.rank; i++)
        if (s.dims[i] < 0) s.rank = -1; /* -1: inferred dims need the input's shape */
      if (s.rank < 0) ir = CF_OP_INVALID;
    }
  }
  if (ir == CF_OP_INVALID) {
    bool skipped;
    return read_opaque(r, n, &skipped);
  }
  if ((st = cf_graph_add_node(r->g, n->name, ir, n->line, &idx))) return st;
  n->ir = idx;
  n->reshape = ir == CF_OP_RESHAPE;
  const tf_type *t = ir == CF_OP_CAST
                         ? (v = node_attr(n, "DstT")) ? field_type(r, cf_pb_get(v, "type")) : NULL
                         : out_type(r, n);
  if (ir == CF_OP_CAST && (!t || t->dt == CF_DT_INVALID))
    return fail(r, n->line, "node '%s': Cast needs attr DstT with an IR dtype", n->name);
  if (t && t->dt != CF_DT_INVALID && ir != CF_OP_MATMUL &&
      (st = set_type(r, idx, t->dt, NULL, n->line)))
    return st;
  if (ir == CF_OP_RESHAPE) return set_type(r, idx, CF_DT_INVALID, &s, n->line);
  return CF_OK;
}

/* ------------------------------------------------------------------ */
/* operands                                                           */

static int find_node(const pb_reader *r, const char *name) {
  return cf_name_find(r->index, r->index_cap, r->nodes, offsetof(pnode, name), sizeof(pnode), name);
}

static cf_status build_index(pb_reader *r) {
  size_t cap = 16;
  while (cap < (size_t)r->n_nodes * 2)
    cap *= 2;
  if (!(r->index = cf_arena_array(&r->pb.scratch, cap, sizeof(int)))) return oom(r, 0);
  r->index_cap = cap;
  for (int k = 0; k < r->n_nodes; k++) {
    int *slot = cf_name_slot(r->index, cap, r->nodes, offsetof(pnode, name), sizeof(pnode),
                             r->nodes[k].name);
    if (*slot)
      return fail(r, r->nodes[k].line, "node '%s': duplicate node name (first defined at line %d)",
                  r->nodes[k].name, r->nodes[*slot - 1].line);
    *slot = k + 1;
  }
  return CF_OK;
}

/* The IR output that input x of node n names, looking through aliases.
 * Each alias is resolved once: the walk marks the aliases it passes, and a
 * second walk over the same chain stores the result in every one of them, so
 * N readers of an N-long Identity chain cost O(N), not O(N^2). */
static cf_status resolve(pb_reader *r, const pnode *n, const pin *x, cf_ref *out) {
  const pin *cur = x;
  cf_ref res;
  for (;;) {
    int k = find_node(r, cur->name);
    if (k < 0)
      return fail(r, x->line, "node '%s': input '%s' names no node of the graph", n->name,
                  cur->name);
    pnode *src = &r->nodes[k];
    if (src->alias >= 0) {
      if (cur->port != 0)
        return fail(r, x->line, "node '%s': input '%s:%d': %s has one output", n->name, cur->name,
                    cur->port, src->op);
      if (src->resolving == 2) {
        res = src->res;
        break;
      }
      if (src->resolving == 1)
        return fail(r, x->line, "node '%s': a cycle of Identity nodes through '%s'", n->name,
                    src->name);
      src->resolving = 1;
      cur = &src->in[src->alias];
      continue;
    }
    if (src->ir < 0)
      return fail(r, x->line, "node '%s': input '%s' is a %s node, which has no outputs", n->name,
                  cur->name, src->op);
    res = (cf_ref){src->ir, cur->port};
    break;
  }
  for (cur = x;;) { /* the aliases marked above, in the same order */
    pnode *src = &r->nodes[find_node(r, cur->name)];
    if (src->alias < 0 || src->resolving == 2) break;
    src->resolving = 2;
    src->res = res;
    cur = &src->in[src->alias];
  }
  *out = res;
  return CF_OK;
}

/* ^name on a node the IR runs: control edges (n runs after name). A node
 * the IR leaves out (a NoOp, TensorFlow's way to gather control inputs)
 * passes on what it ran after, so the order through it stays. */
static cf_status control_edges(pb_reader *r, pnode *n) {
  int *stack = NULL, top = 0;
  cf_status st = CF_OK;
  for (int i = 0; i < n->n_in && !st; i++) {
    const pin *x = &n->in[i];
    if (!x->control) continue;
    int s = find_node(r, x->name);
    if (s < 0)
      return fail(r, x->line, "node '%s': control input '^%s' names no node of the graph", n->name,
                  x->name);
    if (!stack && !(stack = malloc((size_t)r->n_nodes * sizeof *stack))) return oom(r, x->line);
    if (r->nodes[s].ctl_seen != n->ir + 1) r->nodes[s].ctl_seen = n->ir + 1, stack[top++] = s;
    while (top && !st) {
      pnode *p = &r->nodes[stack[--top]];
      if (p->ir >= 0 || p->alias >= 0) {
        pin via = {.name = p->name, .line = x->line};
        cf_ref pred;
        if (!(st = resolve(r, n, &via, &pred))) st = cf_node_add_control(r->g, n->ir, pred.node);
        continue;
      }
      for (int j = 0; j < p->n_in; j++) {
        int u = find_node(r, p->in[j].name);
        if (u >= 0 && r->nodes[u].ctl_seen != n->ir + 1)
          r->nodes[u].ctl_seen = n->ir + 1, stack[top++] = u;
      }
    }
  }
  free(stack);
  return st;
}

static cf_status set_operands(pb_reader *r, pnode *n) {
  cf_node *nd = &r->g->nodes[n->ir];
  bool opaque = nd->op == CF_OP_OPAQUE;
  cf_ref *refs = n->n_in ? cf_arena_array(&r->pb.scratch, (size_t)n->n_in, sizeof *refs) : NULL;
  if (n->n_in && !refs) return oom(r, n->line);
  int k = 0;
  for (int i = 0; i < n->n_in; i++) {
    const pin *x = &n->in[i];
    if ((x->control && !opaque) || (n->reshape && k == 1)) continue;
    if (x->control) { /* dependencies of Opaque nodes stay operands */
      int s = find_node(r, x->name);
      if (s < 0)
        return fail(r, x->line, "node '%s': control input '^%s' names no node of the graph",
                    n->name, x->name);
      if (r->nodes[s].ir < 0 && r->nodes[s].alias < 0) continue;
    }
    cf_status st = resolve(r, n, x, &refs[k]);
    if (st) return st;
    k++;
  }
  cf_status st = cf_node_set_inputs(r->g, n->ir, k, refs);
  return st ? st : opaque ? CF_OK : control_edges(r, n);
}

/* ------------------------------------------------------------------ */
/* the GraphDef                                                       */

static cf_status read_inputs(pb_reader *r, pnode *n) {
  int cnt = 0;
  for (const pf *f = cf_pb_get(n->msg, "input"); f; f = cf_pb_next(f, "input"))
    cnt++;
  if (cnt > CF_MAX_OPERANDS)
    return fail(r, n->line, "node '%s': more than %d inputs", n->name, CF_MAX_OPERANDS);
  n->in = cnt ? cf_arena_array(&r->pb.scratch, (size_t)cnt, sizeof *n->in) : NULL;
  if (cnt && !n->in) return oom(r, n->line);
  for (const pf *f = cf_pb_get(n->msg, "input"); f; f = cf_pb_next(f, "input")) {
    const char *s;
    cf_status st = cf_pb_name(&r->pb, f, &s);
    if (st) return st;
    pin *x = &n->in[n->n_in++];
    x->line = f->line;
    x->control = *s == '^';
    if (x->control) s++;
    const char *colon = strrchr(s, ':');
    int64_t port = 0;
    if (colon && !x->control) {
      if (!cf_pb_i64(colon + 1, &port) || port < 0 || port >= CF_MAX_OPERANDS ||
          !isdigit((unsigned char)colon[1]))
        return fail(r, f->line, "node '%s': input '%s': bad output port", n->name, s);
      char *nm = cf_arena_strndup(&r->pb.scratch, s, (size_t)(colon - s));
      if (!nm) return oom(r, f->line);
      s = nm;
    }
    if (!*s) return fail(r, f->line, "node '%s': an empty input name", n->name);
    x->name = s;
    x->port = (int)port;
  }
  return CF_OK;
}

static cf_status read_graph(pb_reader *r) {
  cf_status st;
  int count = 0;
  for (const pf *f = cf_pb_get(&r->root, "node"); f; f = cf_pb_next(f, "node"))
    count++;
  if (!count) return fail(r, 1, "no node { ... } in the GraphDef");
  if (count > CF_MAX_NODES) return fail(r, 1, "more than %d nodes", CF_MAX_NODES);
  if (!(r->nodes = cf_arena_array(&r->pb.scratch, (size_t)count, sizeof *r->nodes)))
    return oom(r, 0);
  for (const pf *f = cf_pb_get(&r->root, "node"); f; f = cf_pb_next(f, "node")) {
    pnode *n = &r->nodes[r->n_nodes++];
    n->msg = f;
    n->line = f->line;
    n->alias = -1;
    n->ir = -1;
    n->n_ivals = -1;
    const pf *nm = cf_pb_get(f, "name"), *op = cf_pb_get(f, "op");
    if (!f->msg || !nm || !op)
      return fail(r, f->line, "node without %s", !f->msg ? "a body" : !nm ? "a name" : "an op");
    if ((st = cf_pb_name(&r->pb, nm, &n->name)) || (st = cf_pb_name(&r->pb, op, &n->op)) ||
        (st = read_attrs(r, n)))
      return st;
    if (!*n->name) return fail(r, nm->line, "node with an empty name");
    if (strlen(n->name) > CF_MAX_NAME)
      return fail(r, nm->line, "node '%.40s...': name longer than %d bytes", n->name, CF_MAX_NAME);
    if (!*n->op) return fail(r, op->line, "node '%s': empty op", n->name);
    if ((st = read_inputs(r, n))) return st;
  }
  if ((st = build_index(r))) return st;
  for (int k = 0; k < r->n_nodes; k++)
    for (int i = 0; i < r->nodes[k].n_in; i++) {
      int s = r->nodes[k].in[i].control ? -1 : find_node(r, r->nodes[k].in[i].name);
      if (s >= 0) r->nodes[s].referenced = true;
    }
  for (int k = 0; k < r->n_nodes; k++)
    if (!r->nodes[k].state && (st = read_node(r, &r->nodes[k]))) return st;
  bool any_output = false;
  for (int k = 0; k < r->n_nodes; k++) {
    pnode *n = &r->nodes[k];
    if (n->ir >= 0 && (st = set_operands(r, n))) return st;
    any_output |= n->ir >= 0 && r->g->nodes[n->ir].op == CF_OP_OUTPUT;
  }
  if (!any_output) { /* no _Retval: every collective whose result nothing uses is an output */
    int n0 = r->g->n_nodes;
    bool *used = calloc((size_t)n0 + 1, 1);
    if (!used) return oom(r, 0);
    for (int i = 0; i < n0; i++)
      for (int j = 0; j < r->g->nodes[i].n_in; j++)
        used[r->g->nodes[i].in[j].node] = true;
    for (int i = 0; i < n0 && !st; i++) {
      const cf_node *nd = &r->g->nodes[i];
      if (used[i] || !cf_op_is_collective(nd->op) ||
          cf_op_table[nd->op].cat == CF_CAT_FUSED_COLLECTIVE)
        continue;
      /* "NAME:output", NAME cut to keep it within CF_MAX_NAME, numbered
       * when the name is taken */
      char tail[32] = ":output";
      int idx, line = nd->line;
      cf_ref ref = {i, 0};
      char *nm = cf_arena_name(&r->pb.scratch, nd->name, tail);
      for (int k = 1; nm && cf_graph_find(r->g, nm) >= 0; k++) {
        snprintf(tail, sizeof tail, ":output%d", k);
        nm = cf_arena_name(&r->pb.scratch, nd->name, tail);
      }
      if (!nm) st = oom(r, line);
      if (!st) st = cf_graph_add_node(r->g, nm, CF_OP_OUTPUT, line, &idx);
      if (!st) st = cf_node_set_inputs(r->g, idx, 1, &ref);
    }
    free(used);
    if (st) return st;
  }
  r->g->world_size = r->world;
  return CF_OK;
}

cf_status cf_pbtxt_read(cf_context *ctx, const char *name, const char *data, size_t size,
                        cf_graph **out) {
  *out = NULL;
  pb_reader r = {.pb = {.ctx = ctx, .file = name}};
  cf_status st = cf_graph_new(ctx, name, &r.g);
  if (st) return st;
  r.pb.file = r.g->file;
  if (!(r.text = malloc(size + 1))) {
    st = oom(&r, 0);
    goto fail;
  }
  if (size) memcpy(r.text, data, size);
  r.text[size] = 0;
  if ((st = cf_pb_parse(&r.pb, r.text, size, &r.root)) || (st = read_graph(&r))) goto fail;
  free(r.text);
  cf_arena_free(&r.pb.scratch);
  *out = r.g;
  return CF_OK;
fail:
  free(r.text);
  cf_arena_free(&r.pb.scratch);
  cf_graph_release(r.g);
  return st;
}
