/* hlo.c - reader for XLA HLO text, as JAX and XLA print it.
 *
 * Three steps. (1) Split the text into statements: a statement ends at a
 * newline outside brackets, strings and comments, so a whole computation is
 * one top-level statement whose body {...} is split the same way, and an
 * attribute value of any grammar (metadata={...}, backend_config="...",
 * mesh['tp'=8] {'tp'}) is skipped by bracket balance alone. Top-level text
 * that is not a computation (FileNames, StackFrames tables) is skipped.
 * (2) Parse each instruction into name, shape, opcode, operand names and raw
 * attribute spans. (3) Evaluate the ENTRY computation symbolically: each
 * instruction yields a value, either one IR output or a tuple of values.
 * `call` is inlined by evaluating the callee with its parameters bound to the
 * arguments (XLA's CallInliner), `tuple` and `get-tuple-element` only move
 * values around, and every other instruction becomes IR nodes: the IR op
 * where the IR has the instruction's exact semantics, Opaque (shape, dtype
 * and operands kept) where it has not.
 *
 * replica_groups in every printed form become device ranks, then IR groups:
 * one per distinct set, partitioned into one part per replica group when
 * there are several ({{0,1},{2,3}}, iota [2,4]<=[8], one axis of a 2-D
 * mesh), so every rank runs the collective with the part that holds it, as
 * XLA does. Replica groups of different sizes (which only all-reduce
 * allows) cannot be an IR group: such a collective is imported as Opaque
 * and a warning goes to the log sink.
 */
#include "frontend.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
  HLO_MAX_NEST = 256,  /* brackets open at once in one statement */
  HLO_MAX_TUPLE = 32,  /* tuples nested in tuples (shapes and values) */
  HLO_MAX_CALLS = 64,  /* call instructions nested through computations */
  HLO_MAX_NAME = 1024, /* bytes of an instruction or computation name */
  HLO_MAX_AXES = 16,   /* axes of a mesh */
};
#define HLO_MAX_WORK 4000000 /* instructions and operands evaluated, inlined calls included */

typedef struct hshape {
  int n;               /* -1: an array; >= 0: a tuple of n elements */
  struct hshape *elem; /* tuple elements */
  cf_dtype dt;         /* array: the IR dtype (a same-size stand-in when !exact) */
  bool exact;          /* dt is the HLO element type itself */
  cf_shape s;          /* array dims */
} hshape;

typedef struct hattr {
  cf_span key, val;
} hattr;

typedef struct hgset hgset;

typedef struct hinstr {
  const char *name, *opcode;
  int line;
  hshape shape;
  cf_span args; /* the text between the opcode's parentheses */
  int n_opnd;
  const char **opnd; /* operand names, sigils removed */
  int n_attr;
  hattr *attr;
  const hgset *groups; /* collectives: replica groups, resolved on first use */
  int lit;             /* constants: LIT_* once classified, 0 before */
  double lit_value;
} hinstr;

typedef struct strmap {
  const char **keys;
  int *slot; /* open addressing: key index + 1, 0 when empty */
  size_t cap;
} strmap;

typedef struct hcomp {
  const char *name;
  int line;
  hinstr *ins;
  int n_ins, root;
  strmap map;
  bool active; /* being evaluated (a call back into it is recursion) */
} hcomp;

/* What an instruction evaluates to: one IR output, or a tuple of values. */
typedef struct hval {
  int n;              /* -1: an array; >= 0: a tuple of n values */
  int depth;          /* tuple nesting */
  cf_ref ref;         /* array: the IR output */
  const hshape *type; /* array: its HLO type */
  struct hval *elem;  /* tuple elements */
} hval;

/* A set of replica groups, as ranks, with the IR group that holds it. */
struct hgset {
  int n_sub; /* subgroups; 0 means every device */
  int *off;  /* n_sub + 1 offsets into ranks */
  int *ranks;
  const char *axes; /* mesh form: the axes' names joined by '_' */
  const char *name; /* its IR group (parts when n_sub > 1); NULL: sizes differ */
  int line;
  hgset *next;
};

typedef struct hlo_reader {
  cf_context *ctx;
  cf_graph *g;
  const char *file;
  cf_arena scratch;
  char *text; /* NUL-terminated copy of the input */
  const char *end;
  hcomp *comps;
  int n_comps;
  strmap comp_map;
  hcomp *entry;
  const char *module;
  int64_t partitions, replicas; /* from the HloModule line, 0 when absent */
  int64_t max_rank;             /* largest rank in any group, -1 when none */
  int64_t mesh_world;           /* largest mesh seen */
  int world_line;               /* first collective over every device */
  int64_t work;
  int depth;
  unsigned long long serial; /* suffix of names that were taken */
  cf_ref *refs;              /* operands of the node being built */
  size_t n_refs, cap_refs;
  hgset *sets;
  int n_anon;          /* replica_group_K */
  unsigned char *seen; /* CF_MAX_WORLD flags, all 0 between uses */
  bool oom;
} hlo_reader;

/* ------------------------------------------------------------------ */
/* errors, strings, maps                                              */

static cf_status fail(hlo_reader *r, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static cf_status fail(hlo_reader *r, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  cf_status st = cf_reader_verror(r->ctx, r->oom, r->file, line, fmt, ap);
  va_end(ap);
  return st;
}

static cf_status oom(hlo_reader *r, int line) {
  r->oom = true;
  return fail(r, line, "out of memory");
}

static const char *str(hlo_reader *r, const char *p, size_t n) {
  char *s = cf_arena_strndup(&r->scratch, p, n);
  if (!s) r->oom = true;
  return s;
}

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* Index keys[0..n); *dup gets the first key seen twice (-1 when none). */
static bool map_build(cf_arena *a, strmap *m, const char **keys, int n, int *dup) {
  size_t cap = 16;
  while (cap < (size_t)n * 2)
    cap *= 2;
  m->keys = keys;
  m->cap = cap;
  if (!(m->slot = cf_arena_array(a, cap, sizeof(int)))) return false;
  *dup = -1;
  for (int i = 0; i < n; i++) {
    size_t h = hash_str(keys[i]) & (cap - 1);
    bool seen = false;
    while (m->slot[h] && !seen) {
      seen = strcmp(keys[m->slot[h] - 1], keys[i]) == 0;
      h = (h + 1) & (cap - 1);
    }
    if (seen) {
      if (*dup < 0) *dup = i;
      continue;
    }
    m->slot[h] = i + 1;
  }
  return true;
}

static int map_find(const strmap *m, const char *k) {
  if (!m->cap) return -1;
  size_t h = hash_str(k) & (m->cap - 1);
  while (m->slot[h]) {
    if (strcmp(m->keys[m->slot[h] - 1], k) == 0) return m->slot[h] - 1;
    h = (h + 1) & (m->cap - 1);
  }
  return -1;
}

/* ------------------------------------------------------------------ */
/* scanning                                                           */

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
static bool is_name_char(char c) {
  return isalnum((unsigned char)c) || c == '_' || c == '.' || c == '-';
}
static bool is_open(char c) { return c == '(' || c == '[' || c == '{'; }
static bool is_close(char c) { return c == ')' || c == ']' || c == '}'; }
static bool at_comment(const char *p, const char *e) {
  return e - p >= 2 && p[0] == '/' && p[1] == '*';
}

/* Past spaces, newlines and comments, counting newlines into *line. An
 * unterminated comment is left for scan_stmt to report. */
static const char *skip_nl(const char *p, const char *e, int *line) {
  for (;;) {
    while (p < e && is_space(*p))
      *line += *p++ == '\n';
    if (!at_comment(p, e)) return p;
    const char *q = p + 2;
    int l = *line;
    while (e - q >= 2 && !(q[0] == '*' && q[1] == '/'))
      l += *q++ == '\n';
    if (e - q < 2) return p;
    *line = l;
    p = q + 2;
  }
}

static const char *skip(const char *p, const char *e) {
  int line = 0;
  return skip_nl(p, e, &line);
}

static const char *past_quoted(const char *p, const char *e) {
  char q = *p++;
  while (p < e && *p != q)
    p += (*p == '\\' && e - p >= 2) ? 2 : 1;
  return p < e ? p + 1 : e;
}

/* Just past the bracket group, string or comment that starts at p (inside a
 * statement scan_stmt has checked, so brackets pair up). */
static const char *past(const char *p, const char *e) {
  int depth = 0;
  while (p < e) {
    char c = *p;
    if (c == '"' || c == '\'')
      p = past_quoted(p, e);
    else if (at_comment(p, e)) {
      for (p += 2; e - p >= 2 && !(p[0] == '*' && p[1] == '/'); p++) {
      }
      p = e - p >= 2 ? p + 2 : e;
    } else {
      p++;
      depth += is_open(c) - is_close(c);
    }
    if (depth <= 0) return p;
  }
  return e;
}

static bool at_group(const char *p, const char *e) {
  return is_open(*p) || *p == '"' || *p == '\'' || at_comment(p, e);
}

/* The first ch outside brackets, strings and comments in [p, e), or NULL. */
static const char *find_top(const char *p, const char *e, char ch) {
  while (p < e) {
    if (*p == ch) return p;
    p = at_group(p, e) ? past(p, e) : p + 1;
  }
  return NULL;
}

/* Top-level occurrences of ch in [p, e). */
static int count_top(const char *p, const char *e, char ch) {
  int n = 0;
  while ((p = find_top(p, e, ch))) {
    n++;
    p++;
  }
  return n;
}

/* The end of the statement at p: the first newline outside brackets, strings
 * and comments, or e. *line advances over the newlines inside. */
static cf_status scan_stmt(hlo_reader *r, const char *p, const char *e, int *line,
                           const char **out) {
  char open[HLO_MAX_NEST];
  int open_line[HLO_MAX_NEST], depth = 0;
  for (; p < e; p++) {
    char c = *p;
    if (c == '\n') {
      if (!depth) break;
      ++*line;
    } else if (c == '"' || c == '\'') {
      const char *q = p + 1;
      while (q < e && *q != c && *q != '\n')
        q += (*q == '\\' && e - q >= 2 && q[1] != '\n') ? 2 : 1;
      if (q >= e || *q != c) return fail(r, *line, "unterminated string");
      p = q;
    } else if (at_comment(p, e)) {
      const char *q = p + 2;
      int l = *line;
      while (e - q >= 2 && !(q[0] == '*' && q[1] == '/'))
        l += *q++ == '\n';
      if (e - q < 2) return fail(r, *line, "unterminated comment");
      *line = l;
      p = q + 1;
    } else if (is_open(c)) {
      if (depth == HLO_MAX_NEST)
        return fail(r, *line, "brackets nested deeper than %d", HLO_MAX_NEST);
      open[depth] = c;
      open_line[depth++] = *line;
    } else if (is_close(c)) {
      char want = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (!depth || open[depth - 1] != want) return fail(r, *line, "unbalanced '%c'", c);
      depth--;
    } else if (c == 0) {
      return fail(r, *line, "NUL byte in HLO text");
    }
  }
  if (depth) return fail(r, open_line[depth - 1], "'%c' is never closed", open[depth - 1]);
  *out = p;
  return CF_OK;
}

/* A name at p (a leading % sigil dropped): its cf_span, empty when none. */
static const char *read_name(const char *p, const char *e, cf_span *out) {
  if (p < e && *p == '%') p++;
  out->p = p;
  while (p < e && is_name_char(*p))
    p++;
  out->n = (size_t)(p - out->p);
  return p;
}

static bool word_at(const char *p, const char *e, const char *w) {
  size_t n = strlen(w);
  return (size_t)(e - p) >= n && memcmp(p, w, n) == 0 &&
         ((size_t)(e - p) == n || !is_name_char(p[n]));
}

/* A non-negative decimal at *pp, at most max. */
static bool read_int(const char **pp, const char *e, int64_t max, int64_t *out) {
  const char *p = *pp;
  int64_t v = 0;
  if (p >= e || !isdigit((unsigned char)*p)) return false;
  for (; p < e && isdigit((unsigned char)*p); p++) {
    int d = *p - '0';
    if (d > max || v > (max - d) / 10) return false;
    v = v * 10 + d;
  }
  *pp = p;
  *out = v;
  return true;
}

/* A list of at most max integers in 0..hi between the bracket at p and
 * close ("[2,4]", "T(1,0)", "{0}"): the position past close, NULL when
 * malformed. */
static const char *int_list(const char *p, const char *e, char close, int64_t hi, int64_t *v,
                            int max, int *n) {
  *n = 0;
  p = skip(p + 1, e);
  if (p < e && *p == close) return p + 1;
  for (;;) {
    if (*n == max || !read_int(&p, e, hi, &v[*n])) return NULL;
    ++*n;
    p = skip(p, e);
    if (p < e && *p == close) return p + 1;
    if (p >= e || *p != ',') return NULL;
    p = skip(p + 1, e);
  }
}

static cf_span trim(const char *p, const char *e) {
  p = skip(p, e);
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
    /* no IR dtype: a stand-in of the same element size, only for Opaque data */
    {"pred", CF_DT_UINT8, false},
    {"u16", CF_DT_INT16, false},
    {"u32", CF_DT_INT32, false},
    {"u64", CF_DT_INT64, false},
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
  const char *p = skip(*pp, e);
  memset(sh, 0, sizeof *sh);
  if (p < e && *p == '(') {
    if (nest >= HLO_MAX_TUPLE)
      return fail(r, line, "tuple shapes nested deeper than %d", HLO_MAX_TUPLE);
    const char *close = past(p, e); /* just past ')' */
    cf_span in = trim(p + 1, close - 1);
    sh->n = in.n ? count_top(in.p, in.p + in.n, ',') + 1 : 0;
    if (sh->n && !(sh->elem = cf_arena_array(&r->scratch, (size_t)sh->n, sizeof *sh->elem)))
      return oom(r, line);
    p++;
    for (int i = 0; i < sh->n; i++) {
      cf_status st = parse_shape(r, &p, close - 1, line, nest + 1, &sh->elem[i], leaves);
      if (st) return st;
      p = skip(p, close - 1);
      if (p < close - 1 && *p == ',')
        p++;
      else if (p != close - 1)
        return fail(r, line, "malformed tuple shape at '%.*s'",
                    cf_span_excerpt((cf_span){p, (size_t)(e - p)}), p);
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
    return fail(r, line, "expected a shape at '%.*s'",
                cf_span_excerpt((cf_span){p, (size_t)(e - p)}), p);
  size_t k = 0, nt = sizeof hlo_types / sizeof hlo_types[0];
  while (k < nt && !cf_span_is(ty, hlo_types[k].name))
    k++;
  if (k < nt) {
    sh->dt = hlo_types[k].dt;
    sh->exact = hlo_types[k].exact;
  } else if (ty.n > 2 && (memcmp(ty.p, "f8", 2) == 0 || memcmp(ty.p, "f4", 2) == 0)) {
    sh->dt = CF_DT_UINT8; /* float8 / float4 variants */
  } else {
    return fail(r, line, "unknown element type '%.*s'", cf_span_excerpt(ty), ty.p);
  }
  if (p >= e || *p != '[')
    return fail(r, line, "expected '[' after element type '%.*s'", cf_span_excerpt(ty), ty.p);
  p = skip(p + 1, e);
  while (p < e && *p != ']') {
    if (e - p >= 2 && p[0] == '<' && p[1] == '=')
      p = skip(p + 2, e); /* bounded dynamic: the bound */
    int64_t d;
    if (p < e && *p == '?') return fail(r, line, "unbounded dynamic dimension '?' in a shape");
    if (!read_int(&p, e, INT64_MAX, &d))
      return fail(r, line, "bad dimension in shape '%.*s'", cf_span_excerpt(ty), ty.p);
    if (sh->s.rank == CF_MAX_RANK)
      return fail(r, line, "shape has more than %d dimensions", CF_MAX_RANK);
    sh->s.dims[sh->s.rank++] = d;
    p = skip(p, e);
    if (p < e && *p == ',')
      p = skip(p + 1, e);
    else if (p >= e || *p != ']')
      return fail(r, line, "bad dimension list in shape '%.*s'", cf_span_excerpt(ty), ty.p);
  }
  if (p >= e) return fail(r, line, "unterminated shape '%.*s'", cf_span_excerpt(ty), ty.p);
  p++;
  const char *q = skip(p, e);
  if (q < e && *q == '{') p = past(q, e);                /* layout */
  if (cf_span_is(ty, "c64") || cf_span_is(ty, "c128")) { /* (re, im) pairs */
    if (sh->s.rank == CF_MAX_RANK)
      return fail(r, line, "complex shape has more than %d dimensions", CF_MAX_RANK - 1);
    sh->s.dims[sh->s.rank++] = 2;
  } else if (cf_span_is(ty, "token") || cf_span_is(ty, "opaque")) {
    sh->s.rank = 1; /* no data */
    sh->s.dims[0] = 0;
  }
  if (++*leaves > CF_MAX_OPERANDS)
    return fail(r, line, "tuple shape with more than %d arrays", CF_MAX_OPERANDS);
  *pp = p;
  return CF_OK;
}

/* ------------------------------------------------------------------ */
/* instructions and computations                                      */

/* Parse ", key=value" pairs from p to e; values are raw spans. */
static cf_status parse_attrs(hlo_reader *r, const char *p, const char *e, int line,
                             const char *what, hattr **out, int *n_out) {
  int n = 0, cap = count_top(p, e, ',');
  hattr *a = cap ? cf_arena_array(&r->scratch, (size_t)cap, sizeof *a) : NULL;
  if (cap && !a) return oom(r, line);
  for (p = skip(p, e); p < e; p = skip(p, e)) {
    if (*p != ',' || n == cap)
      return fail(r, line, "%s: expected ', key=value' at '%.*s'", what,
                  cf_span_excerpt((cf_span){p, (size_t)(e - p)}), p);
    p = skip(p + 1, e);
    cf_span key;
    p = read_name(p, e, &key);
    p = skip(p, e);
    if (!key.n || p >= e || *p != '=')
      return fail(r, line, "%s: expected an attribute 'key=value' at '%.*s'", what,
                  cf_span_excerpt((cf_span){key.p, (size_t)(e - key.p)}), key.p);
    const char *ve = find_top(p + 1, e, ',');
    a[n].key = key;
    a[n++].val = trim(p + 1, ve ? ve : e);
    p = ve ? ve : e;
  }
  *out = a;
  *n_out = n;
  return CF_OK;
}

static const hattr *attr(const hinstr *in, const char *key) {
  for (int i = 0; i < in->n_attr; i++)
    if (cf_span_is(in->attr[i].key, key)) return &in->attr[i];
  return NULL;
}

/* A computation reference (to_apply=%name): the name without sigil. */
static hcomp *attr_comp(hlo_reader *r, const hinstr *in, const char *key) {
  const hattr *a = attr(in, key);
  if (!a) return NULL;
  cf_span nm;
  const char *p = read_name(a->val.p, a->val.p + a->val.n, &nm);
  if (!nm.n || p != a->val.p + a->val.n) return NULL;
  char buf[HLO_MAX_NAME + 1];
  if (nm.n > HLO_MAX_NAME) return NULL;
  memcpy(buf, nm.p, nm.n);
  buf[nm.n] = 0;
  int k = map_find(&r->comp_map, buf);
  return k < 0 ? NULL : &r->comps[k];
}

/* The operand name in one comma piece: its last token ("f32[8]{0} %a" -> a). */
static cf_status operand_name(hlo_reader *r, const hinstr *in, cf_span piece, const char **out) {
  const char *p = piece.p, *e = piece.p + piece.n, *ts = NULL, *te = NULL;
  for (p = skip(p, e); p < e; p = skip(p, e)) {
    ts = p;
    if (at_group(p, e))
      p = past(p, e);
    else
      while (p < e && !is_space(*p) && !at_group(p, e))
        p++;
    te = p;
  }
  cf_span nm = {NULL, 0};
  if (ts && read_name(ts, te, &nm) == te && nm.n && nm.n <= HLO_MAX_NAME) {
    *out = str(r, nm.p, nm.n);
    return *out ? CF_OK : oom(r, in->line);
  }
  return fail(r, in->line, "instruction '%s': bad operand '%.*s'", in->name, cf_span_excerpt(piece),
              piece.p);
}

static cf_status parse_instr(hlo_reader *r, const char *s, const char *e, int line, hinstr *in,
                             bool *root) {
  cf_status st;
  const char *p = skip(s, e);
  memset(in, 0, sizeof *in);
  in->line = line;
  *root = word_at(p, e, "ROOT");
  if (*root) p = skip(p + 4, e);
  cf_span nm;
  p = read_name(p, e, &nm);
  const char *eq = skip(p, e);
  if (!nm.n || eq >= e || *eq != '=')
    return fail(r, line, "expected an instruction 'NAME = SHAPE OPCODE(OPERANDS)', got '%.*s'",
                cf_span_excerpt((cf_span){s, (size_t)(e - s)}), s);
  if (nm.n > HLO_MAX_NAME)
    return fail(r, line, "instruction name longer than %d bytes", HLO_MAX_NAME);
  if (!(in->name = str(r, nm.p, nm.n))) return oom(r, line);
  p = eq + 1;
  int64_t leaves = 0;
  if ((st = parse_shape(r, &p, e, line, 0, &in->shape, &leaves))) return st;
  p = skip(p, e);
  cf_span op = {p, 0};
  while (p < e && is_name_char(*p))
    p++;
  op.n = (size_t)(p - op.p);
  if (!op.n) return fail(r, line, "instruction '%s': expected an opcode after the shape", in->name);
  if (!(in->opcode = str(r, op.p, op.n))) return oom(r, line);
  p = skip(p, e);
  if (p >= e || *p != '(')
    return fail(r, line, "instruction '%s': expected '(' after opcode '%s'", in->name, in->opcode);
  const char *close = past(p, e);
  in->args = trim(p + 1, close - 1);
  if (strcmp(in->opcode, "constant") && strcmp(in->opcode, "parameter") && in->args.n) {
    const char *a = in->args.p, *ae = a + in->args.n;
    in->n_opnd = count_top(a, ae, ',') + 1;
    if (in->n_opnd > CF_MAX_OPERANDS)
      return fail(r, line, "instruction '%s': more than %d operands", in->name, CF_MAX_OPERANDS);
    if (!(in->opnd = cf_arena_array(&r->scratch, (size_t)in->n_opnd, sizeof *in->opnd)))
      return oom(r, line);
    for (int i = 0; i < in->n_opnd; i++) {
      const char *ce = find_top(a, ae, ',');
      if (!ce) ce = ae;
      if ((st = operand_name(r, in, (cf_span){a, (size_t)(ce - a)}, &in->opnd[i]))) return st;
      a = ce + 1;
    }
  }
  char what[HLO_MAX_NAME + 32];
  snprintf(what, sizeof what, "instruction '%s'", in->name);
  return parse_attrs(r, close, e, line, what, &in->attr, &in->n_attr);
}

/* The body brace of a computation statement: the last top-level {...} that
 * ends the statement. NULL when the statement is not a computation. */
static const char *body_brace(const char *p, const char *e) {
  const char *cand = NULL;
  while (p < e) {
    if (*p == '{') cand = p;
    p = at_group(p, e) ? past(p, e) : p + 1;
  }
  return cand && skip(past(cand, e), e) == e ? cand : NULL;
}

static cf_status parse_comp(hlo_reader *r, const char *s, const char *e, int line, hcomp *c,
                            bool *is_comp, bool *is_entry) {
  cf_status st;
  const char *p = skip(s, e);
  *is_comp = false;
  *is_entry = word_at(p, e, "ENTRY");
  if (*is_entry) p = skip(p + 5, e);
  cf_span nm;
  if (p < e && isdigit((unsigned char)*p)) return CF_OK; /* FileLocations and the like */
  p = read_name(p, e, &nm);
  const char *open = nm.n ? body_brace(p, e) : NULL;
  if (!open) {
    if (*is_entry) return fail(r, line, "ENTRY must be followed by a computation 'NAME {...}'");
    return CF_OK;
  }
  *is_comp = true;
  if (nm.n > HLO_MAX_NAME)
    return fail(r, line, "computation name longer than %d bytes", HLO_MAX_NAME);
  memset(c, 0, sizeof *c);
  c->line = line;
  c->root = -1;
  if (!(c->name = str(r, nm.p, nm.n))) return oom(r, line);
  const char *bs = open + 1, *be = past(open, e) - 1;
  /* body: count statements, then parse them; line counting restarts at the brace */
  int body_line = line;
  for (const char *q = s; q < bs; q++)
    body_line += *q == '\n';
  int n = 0, ln = body_line;
  for (const char *q = skip_nl(bs, be, &ln); q < be; q = skip_nl(q, be, &ln)) {
    if ((st = scan_stmt(r, q, be, &ln, &q))) return st;
    n++;
  }
  if (!n) return fail(r, line, "computation '%s' has no instructions", c->name);
  c->ins = cf_arena_array(&r->scratch, (size_t)n, sizeof *c->ins);
  const char **keys = cf_arena_array(&r->scratch, (size_t)n, sizeof *keys);
  if (!c->ins || !keys) return oom(r, line);
  ln = body_line;
  for (const char *q = skip_nl(bs, be, &ln); q < be; q = skip_nl(q, be, &ln)) {
    const char *qe;
    int l0 = ln;
    bool root;
    if ((st = scan_stmt(r, q, be, &ln, &qe))) return st;
    hinstr *in = &c->ins[c->n_ins];
    if ((st = parse_instr(r, q, qe, l0, in, &root))) return st;
    if (root && c->root >= 0)
      return fail(r, l0, "computation '%s': a second ROOT (the first is '%s' at line %d)", c->name,
                  c->ins[c->root].name, c->ins[c->root].line);
    if (root) c->root = c->n_ins;
    keys[c->n_ins++] = in->name;
    q = qe;
  }
  if (c->root < 0) c->root = c->n_ins - 1; /* XLA: the last instruction */
  int dup;
  if (!map_build(&r->scratch, &c->map, keys, c->n_ins, &dup)) return oom(r, line);
  if (dup >= 0)
    return fail(r, c->ins[dup].line,
                "computation '%s': instruction '%s' defined twice (first at line %d)", c->name,
                keys[dup], c->ins[map_find(&c->map, keys[dup])].line);
  return CF_OK;
}

static cf_status parse_header(hlo_reader *r, const char *s, const char *e, int line) {
  const char *p = skip(s + strlen("HloModule"), e);
  cf_span nm;
  p = read_name(p, e, &nm);
  if (!nm.n) return fail(r, line, "HloModule needs a name");
  if (nm.n > HLO_MAX_NAME) return fail(r, line, "module name longer than %d bytes", HLO_MAX_NAME);
  if (!(r->module = str(r, nm.p, nm.n))) return oom(r, line);
  hattr *a;
  int n;
  cf_status st = parse_attrs(r, p, e, line, "HloModule", &a, &n);
  if (st) return st;
  for (int i = 0; i < n; i++) {
    int64_t *dst = cf_span_is(a[i].key, "num_partitions")  ? &r->partitions
                   : cf_span_is(a[i].key, "replica_count") ? &r->replicas
                                                           : NULL;
    const char *v = a[i].val.p;
    if (dst &&
        (!read_int(&v, v + a[i].val.n, CF_MAX_WORLD, dst) || v != a[i].val.p + a[i].val.n || !*dst))
      return fail(r, line, "HloModule: %.*s='%.*s' must be an integer in 1..%d",
                  cf_span_excerpt(a[i].key), a[i].key.p, cf_span_excerpt(a[i].val), a[i].val.p,
                  CF_MAX_WORLD);
  }
  int64_t w;
  if (!cf_mul_i64(r->partitions ? r->partitions : 1, r->replicas ? r->replicas : 1, &w) ||
      w > CF_MAX_WORLD)
    return fail(r, line, "HloModule: num_partitions * replica_count is above %d devices",
                CF_MAX_WORLD);
  return CF_OK;
}

static cf_status parse_module(hlo_reader *r) {
  cf_status st;
  const char *e = r->end;
  int line = 1, n = 0;
  const char *p = skip_nl(r->text, e, &line);
  if (!word_at(p, e, "HloModule"))
    return fail(r, line, "not HLO text: expected 'HloModule NAME' at the start");
  /* statements at the top level: an upper bound on the computations */
  for (const char *q = p; q < e; q = skip_nl(q, e, &line)) {
    if ((st = scan_stmt(r, q, e, &line, &q))) return st;
    n++;
  }
  if (!(r->comps = cf_arena_array(&r->scratch, (size_t)n, sizeof *r->comps))) return oom(r, 0);
  const char **keys = cf_arena_array(&r->scratch, (size_t)n, sizeof *keys);
  if (!keys) return oom(r, 0);
  line = 1;
  p = skip_nl(r->text, e, &line);
  int entry_line = 0;
  for (bool first = true; p < e; p = skip_nl(p, e, &line), first = false) {
    int l0 = line;
    const char *pe;
    bool is_comp, is_entry;
    if ((st = scan_stmt(r, p, e, &line, &pe))) return st;
    if (first)
      st = parse_header(r, p, pe, l0);
    else if (!(st = parse_comp(r, p, pe, l0, &r->comps[r->n_comps], &is_comp, &is_entry)) &&
             is_comp) {
      if (is_entry && r->entry)
        return fail(r, l0, "a second ENTRY computation (the first is at line %d)", entry_line);
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
  if (!r->n_comps) return fail(r, line, "no computations in the module");
  if (!r->entry) r->entry = &r->comps[r->n_comps - 1]; /* XLA: the last one */
  int dup;
  if (!map_build(&r->scratch, &r->comp_map, keys, r->n_comps, &dup)) return oom(r, 0);
  if (dup >= 0)
    return fail(r, r->comps[dup].line, "computation '%s' defined twice (first at line %d)",
                keys[dup], r->comps[map_find(&r->comp_map, keys[dup])].line);
  return CF_OK;
}

/* ------------------------------------------------------------------ */
/* replica groups                                                     */

/* Growable int list (malloc'd) for parsing. */
typedef struct ivec {
  int *v;
  size_t n, cap;
} ivec;

static bool ivec_push(ivec *a, int x) {
  if (a->n == a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 64;
    int *nv = realloc(a->v, cap * sizeof *nv);
    if (!nv) return false;
    a->v = nv;
    a->cap = cap;
  }
  a->v[a->n++] = x;
  return true;
}

/* Parsed replica groups before the mode is applied. */
typedef struct rgroups {
  bool all;      /* {}: every device */
  ivec ids, off; /* flattened ids, subgroup start offsets (off has n_sub + 1) */
  char axes[CF_MAX_GROUP_NAME + 1];
  int64_t mesh; /* devices of the mesh form */
} rgroups;

#define RG_FAIL(...) return fail(r, in->line, __VA_ARGS__)

/* {{0,1},{2,3}} or {} */
static cf_status rg_explicit(hlo_reader *r, const hinstr *in, const char *p, const char *e,
                             rgroups *g) {
  p = skip(p + 1, e);
  if (p < e && *p == '}') {
    g->all = true;
    return skip(p + 1, e) == e
               ? CF_OK
               : fail(r, in->line, "instruction '%s': junk after replica_groups={}", in->name);
  }
  for (;;) {
    if (p >= e || *p != '{')
      RG_FAIL("instruction '%s': replica_groups: expected '{' starting a group", in->name);
    p = skip(p + 1, e);
    if (p < e && *p == '}') RG_FAIL("instruction '%s': replica_groups: an empty group", in->name);
    for (;;) {
      int64_t id;
      if (!read_int(&p, e, CF_MAX_WORLD - 1, &id))
        RG_FAIL("instruction '%s': replica_groups: expected a device id in 0..%d", in->name,
                CF_MAX_WORLD - 1);
      if (g->ids.n >= CF_MAX_WORLD)
        RG_FAIL("instruction '%s': replica_groups list more than %d ids", in->name, CF_MAX_WORLD);
      if (!ivec_push(&g->ids, (int)id)) return oom(r, in->line);
      p = skip(p, e);
      if (p < e && *p == ',')
        p = skip(p + 1, e);
      else if (p < e && *p == '}')
        break;
      else
        RG_FAIL("instruction '%s': replica_groups: expected ',' or '}'", in->name);
    }
    if (!ivec_push(&g->off, (int)g->ids.n)) return oom(r, in->line);
    p = skip(p + 1, e);
    if (p < e && *p == ',')
      p = skip(p + 1, e);
    else if (p < e && *p == '}')
      break;
    else
      RG_FAIL("instruction '%s': replica_groups: expected ',' or '}' after a group", in->name);
  }
  if (skip(p + 1, e) != e) RG_FAIL("instruction '%s': junk after replica_groups", in->name);
  return CF_OK;
}

/* [G,S]<=[d0,d1,...] with an optional T(perm): iota over d, transposed,
 * flattened and cut into G groups of S. */
static cf_status rg_iota(hlo_reader *r, const hinstr *in, const char *p, const char *e,
                         rgroups *g) {
  int64_t gs[2], d[CF_MAX_RANK], perm[CF_MAX_RANK];
  int ng, nd, np;
  if (!(p = int_list(p, e, ']', CF_MAX_WORLD, gs, 2, &ng)) || ng != 2 || !gs[0] || !gs[1])
    RG_FAIL("instruction '%s': iota replica_groups: expected [groups,size]", in->name);
  p = skip(p, e);
  if (e - p < 2 || p[0] != '<' || p[1] != '=')
    RG_FAIL("instruction '%s': iota replica_groups: expected '<='", in->name);
  p = skip(p + 2, e);
  if (p >= e || *p != '[' || !(p = int_list(p, e, ']', CF_MAX_WORLD, d, CF_MAX_RANK, &nd)) || !nd)
    RG_FAIL("instruction '%s': iota replica_groups: bad reshape dims (1..%d dims of 1..%d)",
            in->name, CF_MAX_RANK, CF_MAX_WORLD);
  for (int i = 0; i < nd; i++)
    if (!d[i]) RG_FAIL("instruction '%s': iota replica_groups: a reshape dim of 0", in->name);
  p = skip(p, e);
  if (p < e && *p == 'T') {
    p = skip(p + 1, e);
    if (p >= e || *p != '(' || !(p = int_list(p, e, ')', nd - 1, perm, CF_MAX_RANK, &np)))
      RG_FAIL("instruction '%s': iota replica_groups: T() must permute 0..%d", in->name, nd - 1);
  } else {
    for (np = 0; np < nd; np++)
      perm[np] = np;
  }
  if (skip(p, e) != e) RG_FAIL("instruction '%s': junk after iota replica_groups", in->name);
  bool seen[CF_MAX_RANK] = {0};
  for (int i = 0; i < np; i++) {
    if (seen[perm[i]])
      RG_FAIL("instruction '%s': iota replica_groups: T() must permute 0..%d", in->name, nd - 1);
    seen[perm[i]] = true;
  }
  if (np != nd)
    RG_FAIL("instruction '%s': iota replica_groups: T() must permute 0..%d", in->name, nd - 1);
  int64_t total = 1, want;
  for (int i = 0; i < nd; i++)
    if (!cf_mul_i64(total, d[i], &total) || total > CF_MAX_WORLD)
      RG_FAIL("instruction '%s': iota replica_groups: more than %d devices", in->name,
              CF_MAX_WORLD);
  if (!cf_mul_i64(gs[0], gs[1], &want) || want != total)
    RG_FAIL("instruction '%s': iota replica_groups: %lld x %lld groups but %lld devices", in->name,
            (long long)gs[0], (long long)gs[1], (long long)total);
  /* element f of the transposed array: its multi-index j over dims d[perm[k]]
   * is index i over d with i[perm[k]] = j[k]; the value is i row-major. */
  int64_t stride[CF_MAX_RANK];
  for (int k = nd - 1, s = 1; k >= 0; k--) {
    stride[k] = s;
    s *= (int)d[k];
  }
  for (int64_t f = 0; f < total; f++) {
    int64_t rest = f, v = 0;
    for (int k = nd - 1; k >= 0; k--) {
      int64_t dk = d[perm[k]];
      v += (rest % dk) * stride[perm[k]];
      rest /= dk;
    }
    if (!ivec_push(&g->ids, (int)v)) return oom(r, in->line);
    if ((f + 1) % gs[1] == 0 && !ivec_push(&g->off, (int)(f + 1))) return oom(r, in->line);
  }
  return CF_OK;
}

/* An axis name, 'quoted' or bare. */
static const char *mesh_axis(const char *p, const char *e, cf_span *out) {
  if (p < e && (*p == '\'' || *p == '"')) {
    const char *q = past_quoted(p, e);
    out->p = p + 1;
    out->n = q > p + 1 && q[-1] == *p ? (size_t)(q - p - 2) : 0;
    return q;
  }
  return read_name(p, e, out);
}

/* mesh['a'=2,'b'=4] {'b'}: devices laid out row-major over the mesh; a group
 * is the devices that differ only along the listed axes (in listed order). */
static cf_status rg_mesh(hlo_reader *r, const hinstr *in, const char *p, const char *e,
                         rgroups *g) {
  cf_span name[HLO_MAX_AXES];
  int64_t size[HLO_MAX_AXES], stride[HLO_MAX_AXES], total = 1;
  int na = 0, sel[HLO_MAX_AXES], ns = 0;
  p = skip(p + 4, e);
  if (p >= e || *p != '[') RG_FAIL("instruction '%s': mesh replica_groups: expected '['", in->name);
  for (p = skip(p + 1, e);;) {
    if (na == HLO_MAX_AXES)
      RG_FAIL("instruction '%s': mesh with more than %d axes", in->name, HLO_MAX_AXES);
    p = skip(mesh_axis(p, e, &name[na]), e);
    if (!name[na].n || p >= e || *p != '=')
      RG_FAIL("instruction '%s': mesh replica_groups: expected 'axis'=size", in->name);
    p = skip(p + 1, e);
    if (!read_int(&p, e, CF_MAX_WORLD, &size[na]) || !size[na] ||
        !cf_mul_i64(total, size[na], &total) || total > CF_MAX_WORLD)
      RG_FAIL("instruction '%s': mesh replica_groups: axis sizes must be >= 1 and multiply to at "
              "most %d",
              in->name, CF_MAX_WORLD);
    for (int k = 0; k < na; k++)
      if (name[k].n == name[na].n && memcmp(name[k].p, name[na].p, name[k].n) == 0)
        RG_FAIL("instruction '%s': mesh axis '%.*s' given twice", in->name,
                cf_span_excerpt(name[na]), name[na].p);
    na++;
    p = skip(p, e);
    if (p < e && *p == ',')
      p = skip(p + 1, e);
    else if (p < e && *p == ']')
      break;
    else
      RG_FAIL("instruction '%s': mesh replica_groups: expected ',' or ']'", in->name);
  }
  p = skip(p + 1, e);
  if (p >= e || *p != '{')
    RG_FAIL("instruction '%s': mesh replica_groups: expected the axes {'axis',...}", in->name);
  for (p = skip(p + 1, e); p < e && *p != '}';) {
    cf_span ax;
    p = skip(mesh_axis(p, e, &ax), e);
    if (p < e && *p == ':')
      RG_FAIL("instruction '%s': mesh sub-axes ('axis':(k)n) are not supported", in->name);
    int k = 0;
    while (k < na && !(name[k].n == ax.n && memcmp(name[k].p, ax.p, ax.n) == 0))
      k++;
    if (!ax.n || k == na)
      RG_FAIL("instruction '%s': replica_groups name axis '%.*s', which the mesh does not have",
              in->name, cf_span_excerpt(ax), ax.p);
    for (int j = 0; j < ns; j++)
      if (sel[j] == k)
        RG_FAIL("instruction '%s': replica_groups list axis '%.*s' twice", in->name,
                cf_span_excerpt(ax), ax.p);
    sel[ns++] = k;
    if (p < e && *p == ',')
      p = skip(p + 1, e);
    else if (p >= e || *p != '}')
      RG_FAIL("instruction '%s': mesh replica_groups: expected ',' or '}'", in->name);
  }
  if (p >= e || skip(p + 1, e) != e)
    RG_FAIL("instruction '%s': junk after mesh replica_groups", in->name);
  for (int k = na - 1, s = 1; k >= 0; k--) {
    stride[k] = s;
    s *= (int)size[k];
  }
  int other[HLO_MAX_AXES], no = 0;
  int64_t gsize = 1, ngroups = 1;
  for (int k = 0; k < na; k++) {
    bool is_sel = false;
    for (int j = 0; j < ns; j++)
      is_sel |= sel[j] == k;
    if (!is_sel) {
      other[no++] = k;
      ngroups *= size[k];
    }
  }
  for (int j = 0; j < ns; j++)
    gsize *= size[sel[j]];
  for (int64_t gi = 0; gi < ngroups; gi++) {
    int64_t base = 0, rest = gi;
    for (int k = no - 1; k >= 0; k--) {
      base += (rest % size[other[k]]) * stride[other[k]];
      rest /= size[other[k]];
    }
    for (int64_t j = 0; j < gsize; j++) {
      int64_t id = base;
      rest = j;
      for (int k = ns - 1; k >= 0; k--) {
        id += (rest % size[sel[k]]) * stride[sel[k]];
        rest /= size[sel[k]];
      }
      if (!ivec_push(&g->ids, (int)id)) return oom(r, in->line);
    }
    if (!ivec_push(&g->off, (int)g->ids.n)) return oom(r, in->line);
  }
  g->mesh = total;
  size_t o = 0;
  for (int j = 0; j < ns && o < sizeof g->axes; j++) {
    int w = snprintf(g->axes + o, sizeof g->axes - o, "%s%.*s", j ? "_" : "", (int)name[sel[j]].n,
                     name[sel[j]].p);
    o = w < 0 ? sizeof g->axes : o + (size_t)w;
  }
  bool ok = o > 0 && o < sizeof g->axes;
  for (size_t i = 0; ok && g->axes[i]; i++)
    ok = is_name_char(g->axes[i]);
  if (!ok) g->axes[0] = 0; /* an unusable name: fall back to replica_group_K */
  return CF_OK;
}

/* Apply the collective's mode (XLA's CollectiveOpGroupMode) to turn ids into
 * ranks: flattened ids (channel_id + use_global_device_ids) are ranks; replica
 * ids of the other modes expand over the partitions. */
static cf_status rg_apply_mode(hlo_reader *r, const hinstr *in, rgroups *g) {
  const hattr *ugdi = attr(in, "use_global_device_ids");
  bool channel = attr(in, "channel_id") != NULL, global = ugdi && cf_span_is(ugdi->val, "true");
  int64_t P = r->partitions ? r->partitions : 1, R = r->replicas ? r->replicas : 1;
  if ((channel && global) || P == 1) return CF_OK;
  /* replica ids: cross-replica (no channel_id) groups replicas within each
   * partition; cross-replica-and-partition groups them across all partitions */
  /* ids below R, each once, expand to at most R * P ranks */
  if (!g->all && (int64_t)g->ids.n > R)
    return fail(r, in->line,
                "instruction '%s': replica_groups list %zu replica ids but replica_count=%lld",
                in->name, g->ids.n, (long long)R);
  ivec ids = {0}, off = {0};
  cf_status st = CF_OK;
  size_t nsub = g->all ? 1 : g->off.n - 1;
  for (int64_t part = 0; part < (channel ? 1 : P) && !st; part++)
    for (size_t s = 0; s < nsub && !st; s++) {
      size_t lo = g->all ? 0 : (size_t)g->off.v[s],
             hi = g->all ? (size_t)R : (size_t)g->off.v[s + 1];
      for (size_t i = lo; i < hi && !st; i++) {
        int64_t rep = g->all ? (int64_t)i : g->ids.v[i];
        if (rep >= R)
          st = fail(r, in->line, "instruction '%s': replica id %lld but replica_count=%lld",
                    in->name, (long long)rep, (long long)R);
        for (int64_t q = channel ? 0 : part; q < (channel ? P : part + 1) && !st; q++)
          if (!ivec_push(&ids, (int)(rep * P + q))) st = oom(r, in->line);
      }
      if (!st && !ivec_push(&off, (int)ids.n)) st = oom(r, in->line);
    }
  if (!st) {
    free(g->ids.v);
    free(g->off.v);
    g->ids = ids;
    g->off = (ivec){0};
    g->all = false;
    if (!ivec_push(&g->off, 0)) st = oom(r, in->line);
    for (size_t i = 0; i < off.n && !st; i++)
      if (!ivec_push(&g->off, off.v[i])) st = oom(r, in->line);
    free(off.v);
    return st;
  }
  free(ids.v);
  free(off.v);
  return st;
}

/* Replica groups in the order of their first device: the order of the
 * groups themselves means nothing ({{2,3},{0,1}} is {{0,1},{2,3}}), so
 * collectives that list them differently share one IR group and may fuse.
 * The order inside a group is kept: it orders AllGather's and
 * ReduceScatter's blocks. */
typedef struct rg_part {
  int first, start, len;
} rg_part;

static int rg_part_cmp(const void *a, const void *b) {
  const rg_part *x = a, *y = b;
  return (x->first > y->first) - (x->first < y->first);
}

static cf_status rg_canonical(hlo_reader *r, const hinstr *in, rgroups *g) {
  size_t n = g->off.n ? g->off.n - 1 : 0;
  if (g->all || n < 2) return CF_OK;
  bool sorted = true;
  for (size_t i = 0; i < n; i++) {
    if (g->off.v[i + 1] == g->off.v[i]) return CF_OK; /* an empty group: left as written */
    if (i && g->ids.v[g->off.v[i]] < g->ids.v[g->off.v[i - 1]]) sorted = false;
  }
  if (sorted) return CF_OK;
  rg_part *parts = malloc(n * sizeof *parts);
  int *ids = malloc(g->ids.n * sizeof *ids);
  if (!parts || !ids) {
    free(parts);
    free(ids);
    return oom(r, in->line);
  }
  for (size_t i = 0; i < n; i++)
    parts[i] = (rg_part){g->ids.v[g->off.v[i]], g->off.v[i], g->off.v[i + 1] - g->off.v[i]};
  qsort(parts, n, sizeof *parts, rg_part_cmp);
  int k = 0;
  for (size_t i = 0; i < n; i++) {
    g->off.v[i] = k;
    memcpy(ids + k, g->ids.v + parts[i].start, (size_t)parts[i].len * sizeof *ids);
    k += parts[i].len;
  }
  g->off.v[n] = k;
  memcpy(g->ids.v, ids, (size_t)k * sizeof *ids);
  free(parts);
  free(ids);
  return CF_OK;
}

static bool gset_equal(const hgset *a, int n_sub, const int *off, const int *ranks) {
  if (a->n_sub != n_sub) return false;
  if (!n_sub) return true;
  return memcmp(a->off, off, (size_t)(n_sub + 1) * sizeof *off) == 0 &&
         memcmp(a->ranks, ranks, (size_t)off[n_sub] * sizeof *ranks) == 0;
}

/* Name the set's IR group and declare it: one rank list, or one part per
 * replica group when there are several (each part is a communicator); a
 * name already taken gets _2, _3, ... Replica groups of different sizes
 * cannot be one IR group: the set gets no name and its collectives stay
 * Opaque. */
static cf_status gset_declare(hlo_reader *r, hgset *s, const char *axes) {
  cf_graph *g = r->g;
  for (int i = 1; i < s->n_sub; i++)
    if (s->off[i + 1] - s->off[i] != s->off[1] - s->off[0]) return CF_OK;
  char base[CF_MAX_GROUP_NAME + 1], cand[CF_MAX_GROUP_NAME + 16];
  if (axes && *axes)
    snprintf(base, sizeof base, "%s", axes);
  else
    snprintf(base, sizeof base, "replica_group_%d", r->n_anon++);
  size_t bl = strlen(base);
  for (int k = 1;; k++) {
    if (k == 1)
      snprintf(cand, sizeof cand, "%s", base);
    else
      snprintf(cand, sizeof cand, "%.*s_%d", (int)(bl > 100 ? 100 : bl), base, k);
    if (strlen(cand) <= CF_MAX_GROUP_NAME && !cf_graph_group(g, cand) &&
        strcmp(cand, CF_WORLD_GROUP))
      break;
  }
  if (!(s->name = str(r, cand, strlen(cand)))) return oom(r, s->line);
  return cf_graph_add_group_parts(g, s->name, s->ranks, s->off, s->n_sub, s->line);
}

/* The collective's replica groups as ranks, declared as IR groups (cached on
 * the instruction, shared by every instruction with the same groups). */
static cf_status coll_groups(hlo_reader *r, hinstr *in, const hgset **out) {
  if (in->groups) {
    *out = in->groups;
    return CF_OK;
  }
  rgroups g = {0};
  cf_status st = CF_OK;
  const hattr *a = attr(in, "replica_groups");
  const char *p = a ? a->val.p : "{}", *e = a ? a->val.p + a->val.n : p + 2;
  if (!ivec_push(&g.off, 0)) return oom(r, in->line);
  if (*p == '{')
    st = rg_explicit(r, in, p, e, &g);
  else if (*p == '[')
    st = rg_iota(r, in, p, e, &g);
  else if (word_at(p, e, "mesh"))
    st = rg_mesh(r, in, p, e, &g);
  else
    st = fail(r, in->line, "instruction '%s': unsupported replica_groups '%.*s'", in->name,
              cf_span_excerpt(a->val), a->val.p);
  if (!st) st = rg_apply_mode(r, in, &g);
  if (!st) st = rg_canonical(r, in, &g);
  int n_sub = g.all ? 0 : (int)g.off.n - 1;
  /* ranks: each once, inside the module's devices when it says how many */
  int64_t world = r->partitions || r->replicas
                      ? (r->partitions ? r->partitions : 1) * (r->replicas ? r->replicas : 1)
                      : 0;
  if (!st && !r->seen && !(r->seen = calloc(CF_MAX_WORLD, 1))) st = oom(r, in->line);
  unsigned char *seen = r->seen;
  for (size_t i = 0; !st && i < g.ids.n; i++) {
    int id = g.ids.v[i];
    if (world && id >= world)
      st = fail(r, in->line,
                "instruction '%s': replica_groups name device %d but the module has %lld", in->name,
                id, (long long)world);
    else if (seen[id]++)
      st = fail(r, in->line, "instruction '%s': replica_groups list device %d twice", in->name, id);
    else if (id > r->max_rank)
      r->max_rank = id;
  }
  for (size_t i = 0; seen && i < g.ids.n; i++)
    seen[g.ids.v[i]] = 0;
  if (!st && g.mesh > r->mesh_world) r->mesh_world = g.mesh;
  if (!st && g.all && !r->world_line) r->world_line = in->line;
  hgset *s = NULL;
  for (hgset *c = r->sets; !st && c && !s; c = c->next)
    if (gset_equal(c, n_sub, g.off.v, g.ids.v)) s = c;
  if (!st && !s) {
    if (!(s = cf_arena_alloc(&r->scratch, sizeof *s))) st = oom(r, in->line);
    if (!st && n_sub) {
      s->off = cf_arena_array(&r->scratch, (size_t)n_sub + 1, sizeof(int));
      s->ranks = g.ids.n ? cf_arena_array(&r->scratch, g.ids.n, sizeof(int)) : NULL;
      if (!s->off || (g.ids.n && !s->ranks)) st = oom(r, in->line);
    }
    if (!st) {
      s->n_sub = n_sub;
      s->line = in->line;
      if (n_sub) {
        memcpy(s->off, g.off.v, ((size_t)n_sub + 1) * sizeof(int));
        if (g.ids.n) memcpy(s->ranks, g.ids.v, g.ids.n * sizeof(int));
        st = gset_declare(r, s, g.axes);
      }
      s->next = r->sets;
      r->sets = s;
    }
  }
  free(g.ids.v);
  free(g.off.v);
  if (!st) *out = in->groups = s;
  return st;
}

/* ------------------------------------------------------------------ */
/* building IR nodes                                                  */

/* A fresh node name: base (+ suffix) unless taken; taken names get /N. An
 * inlined instruction leaves the names of ENTRY's instructions to them. */
static cf_status add_node(hlo_reader *r, const char *base, const char *suffix, bool at_entry,
                          cf_op op, int line, int *idx) {
  size_t n = strlen(base) + strlen(suffix) + 24;
  char *nm = cf_arena_alloc(&r->scratch, n);
  if (!nm) return oom(r, line);
  snprintf(nm, n, "%s%s", base, suffix);
  bool taken = cf_graph_find(r->g, nm) >= 0 || (!at_entry && map_find(&r->entry->map, nm) >= 0);
  while (taken) { /* '/' never occurs in an HLO name, so the second try is free */
    snprintf(nm, n, "%s%s/%llu", base, suffix, ++r->serial);
    taken = cf_graph_find(r->g, nm) >= 0;
  }
  return cf_graph_add_node(r->g, nm, op, line, idx);
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
    if (!nr) return oom(r, line);
    r->refs = nr;
    r->cap_refs = cap;
  }
  r->refs[r->n_refs++] = ref;
  return CF_OK;
}

/* Append the arrays of v to r->refs (leaves in order). */
static cf_status push_leaves(hlo_reader *r, const hval *v, int line) {
  if (v->n < 0) return push_ref(r, v->ref, line);
  if ((r->work -= v->n) < 0)
    return fail(r, line, "the module expands to more than %d instructions and operands",
                HLO_MAX_WORK);
  for (int i = 0; i < v->n; i++) {
    cf_status st = push_leaves(r, &v->elem[i], line);
    if (st) return st;
  }
  return CF_OK;
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
    return oom(r, line);
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

/* An Opaque node for in: operands are every array of ops, outputs every
 * array of in's shape, type the opcode (or note). */
static cf_status emit_opaque(hlo_reader *r, const hinstr *in, bool at_entry, const hval *const *ops,
                             const char *type, hval *out) {
  cf_status st;
  int leaves = count_leaves(&in->shape);
  if (!leaves)
    return shape_value(r, &in->shape, -1, &leaves, out, in->line); /* () carries nothing */
  r->n_refs = 0;
  for (int i = 0; i < in->n_opnd; i++)
    if ((st = push_leaves(r, ops[i], in->line))) return st;
  if (r->n_refs > CF_MAX_OPERANDS)
    return fail(r, in->line, "instruction '%s': more than %d operand arrays", in->name,
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
      return oom(r, in->line);
    collect_types(&in->shape, n->decl, &n->n_decl);
  }
  return shape_value(r, &in->shape, idx, &port, out, in->line);
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
  return p < e && *p == '{' && (p = int_list(p, e, '}', INT32_MAX, v, max, n)) && skip(p, e) == e;
}

/* dot as MatMul: lhs (m,k) . rhs (k,n), no batch dims, the IR's result type. */
static bool dot_is_matmul(const hinstr *in, const hval *a, const hval *b) {
  int64_t lc[2], rc[2], bd[1];
  int nl, nr, nb;
  const hshape *t = &in->shape;
  if (!exact_array(a) || !exact_array(b) || t->n >= 0 || !t->exact) return false;
  const cf_shape *x = &a->type->s, *y = &b->type->s;
  if (x->rank != 2 || y->rank != 2 || a->type->dt != b->type->dt) return false;
  if (!int_set(attr(in, "lhs_contracting_dims"), lc, 2, &nl) || nl != 1 || lc[0] != 1) return false;
  if (!int_set(attr(in, "rhs_contracting_dims"), rc, 2, &nr) || nr != 1 || rc[0] != 0) return false;
  if (!int_set(attr(in, "lhs_batch_dims"), bd, 1, &nb) || nb) return false;
  if (!int_set(attr(in, "rhs_batch_dims"), bd, 1, &nb) || nb) return false;
  cf_dtype dt = a->type->dt;
  cf_dtype want = dt == CF_DT_INT8 || dt == CF_DT_UINT8 || dt == CF_DT_INT16 ? CF_DT_INT32 : dt;
  return t->dt == want && t->s.rank == 2 && x->dims[1] == y->dims[0] &&
         t->s.dims[0] == x->dims[0] && t->s.dims[1] == y->dims[1];
}

enum { LIT_OTHER = 1, LIT_SPLAT, LIT_IOTA };

/* What a constant's literal holds, for count elements: one repeated value,
 * 0, 1, 2, ... (iota), or anything else (Opaque data). */
static int classify_literal(cf_span lit, int64_t count, double *value) {
  const char *p = lit.p, *e = lit.p + lit.n;
  int64_t n = 0;
  bool splat = true, iota = true;
  double first = 0;
  for (;;) {
    while (p < e && (is_space(*p) || *p == '{' || *p == '}' || *p == ','))
      p++;
    if (p < e && at_comment(p, e)) {
      p = past(p, e);
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
  if (in->lit == LIT_OTHER) return emit_opaque(r, in, at_entry, NULL, "constant", out);
  int idx;
  cf_status st = emit_op(r, in, at_entry, CF_OP_CONSTANT, NULL, 0, &idx, out);
  if (st) return st;
  if (in->lit == LIT_IOTA) return set_str(r, idx, CF_A_INIT, "iota", in->line);
  cf_attr a = {.id = CF_A_VALUE, .v.f = in->lit_value};
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
  if (!read_int(&p, in->args.p + in->args.n, INT32_MAX, &k) || p != in->args.p + in->args.n)
    return fail(r, in->line, "instruction '%s': parameter(N) needs a parameter number", in->name);
  if (!at_entry) {
    if (k >= n_args)
      return fail(r, in->line, "instruction '%s': parameter(%lld) but the call passes %d operands",
                  in->name, (long long)k, n_args);
    if (args[k].n != in->shape.n)
      return fail(r, in->line, "instruction '%s': parameter(%lld) is %s but the call passes %s",
                  in->name, (long long)k, in->shape.n < 0 ? "an array" : "a tuple",
                  args[k].n < 0 ? "an array" : "a tuple");
    *out = args[k];
    return CF_OK;
  }
  /* ENTRY: an Input per array (NAME#i for the arrays of a tuple) */
  int port = 0, seen = 0;
  cf_status st = shape_value(r, &in->shape, -1, &port, out, in->line);
  return st ? st : make_inputs(r, in, out, &seen);
}

static int reducer(hlo_reader *r, const hinstr *in, const char **why) {
  hcomp *c = attr_comp(r, in, "to_apply");
  *why = "to_apply names no computation of the module";
  if (!c) return -1;
  const char *op = c->ins[c->root].opcode;
  *why = op;
  return !strcmp(op, "add")        ? CF_RED_SUM
         : !strcmp(op, "multiply") ? CF_RED_PROD
         : !strcmp(op, "maximum")  ? CF_RED_MAX
         : !strcmp(op, "minimum")  ? CF_RED_MIN
                                   : -1;
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
  /* all-gather-start's shape is (operands, results) */
  const hshape *res = &in->shape;
  if (start && kind == 1) {
    if (res->n != 2) return emit_opaque(r, in, at_entry, ops, opc, out);
    res = &res->elem[1];
  }
  int n = in->n_opnd;
  bool tuple = res->n >= 0;
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
  if (kind != 1) {
    const char *why;
    if ((red = reducer(r, in, &why)) < 0) {
      if (!attr_comp(r, in, "to_apply"))
        return fail(r, in->line, "instruction '%s': %s needs to_apply=COMPUTATION of the module",
                    in->name, opc);
      snprintf(note, sizeof note, "%s (reducer '%.40s')", opc, why);
      return emit_opaque(r, in, at_entry, ops, note, out);
    }
  }
  if (kind != 0) {
    int64_t dims[2];
    int nd;
    if (!int_set(attr(in, "dimensions"), dims, 2, &nd) || nd != 1 || dims[0] != 0) {
      snprintf(note, sizeof note, "%s (not along dimension 0)", opc);
      return emit_opaque(r, in, at_entry, ops, note, out);
    }
  }
  const hgset *gs = NULL;
  if ((st = coll_groups(r, in, &gs))) return st;
  if (gs->n_sub && !gs->name) {
    snprintf(note, sizeof note, "%s over %d replica groups of different sizes", opc, gs->n_sub);
    cf_log(r->ctx, CF_LOG_WARN,
           "%s:%d: warning: instruction '%s': %s runs in %d replica groups of different sizes; "
           "the parts of an IR group are communicators of one size, so it is imported as Opaque",
           r->file, in->line, in->name, opc, gs->n_sub);
    return emit_opaque(r, in, at_entry, ops, note, out);
  }
  bool same_dt = true;
  for (int i = 1; i < n; i++)
    same_dt &= ops[i]->type->dt == ops[0]->type->dt;
  /* one node: a plain collective, or a fused one for a tuple of one dtype */
  int nodes = tuple && !same_dt ? n : 1;
  hval v = {.n = tuple ? n : -1};
  if (tuple && !(v.elem = cf_arena_array(&r->scratch, (size_t)n, sizeof *v.elem)))
    return oom(r, in->line);
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
    if (fuse) {
      size_t len = (strlen(in->name) + 12) * (size_t)n + 1;
      if (len > ((size_t)1 << 24))
        return fail(r, in->line,
                    "instruction '%s': %d operands with this name make a members list above 16 MiB",
                    in->name, n);
      char *members = cf_arena_alloc(&r->scratch, len);
      if (!members) return oom(r, in->line);
      for (int i = 0, o = 0; i < n; i++)
        o += snprintf(members + o, len - (size_t)o, "%s%s#%d", i ? "," : "", in->name, i);
      if ((st = set_str(r, idx, CF_A_MEMBERS, members, in->line)) ||
          (st = set_str(r, idx, CF_A_REASON, "HLO tuple collective", in->line)))
        return st;
    } else if ((st = set_type(r, idx, tuple ? &res->elem[k] : res, in->line))) {
      return st;
    }
    for (int i = 0; i < m; i++) {
      hval *dst = tuple ? &v.elem[fuse ? i : k] : &v;
      *dst = (hval){
          .n = -1, .ref = {idx, fuse ? i : 0}, .type = tuple ? &res->elem[fuse ? i : k] : res};
    }
  }
  if (!start || kind != 1) {
    *out = v;
    return CF_OK;
  }
  /* all-gather-start: (operands, results) for all-gather-done */
  hval *pair = cf_arena_array(&r->scratch, 2, sizeof *pair);
  if (!pair) return oom(r, in->line);
  if (n == 1) {
    pair[0] = *ops[0];
  } else {
    pair[0] =
        (hval){.n = n, .depth = 1, .elem = cf_arena_array(&r->scratch, (size_t)n, sizeof(hval))};
    if (!pair[0].elem) return oom(r, in->line);
    for (int i = 0; i < n; i++)
      pair[0].elem[i] = *ops[i];
  }
  pair[1] = v;
  *out = (hval){.n = 2, .depth = 2, .elem = pair};
  return CF_OK;
}

static cf_status eval_comp(hlo_reader *r, hcomp *c, const hval *args, int n_args, hval *out);

/* The tuple of in's operands. */
static cf_status emit_tuple(hlo_reader *r, const hinstr *in, const hval *const *ops, hval *out) {
  *out = (hval){.n = in->n_opnd};
  if (in->n_opnd &&
      !(out->elem = cf_arena_array(&r->scratch, (size_t)in->n_opnd, sizeof *out->elem)))
    return oom(r, in->line);
  for (int i = 0; i < in->n_opnd; i++) {
    out->elem[i] = *ops[i];
    if (ops[i]->depth + 1 > out->depth) out->depth = ops[i]->depth + 1;
  }
  return CF_OK;
}

/* Custom calls that are the identity in the per-rank program collfuse runs:
 * sharding annotations, and the shard_map exits (local -> global shape),
 * whose per-rank value is the rank's local shard, as in XLA's partitioned
 * module. The entries (GlobalToLocalShape) stay Opaque: each rank's shard of
 * a global input is deterministic data of the local shape. */
static bool forwards_operands(const hinstr *in) {
  static const char *targets[] = {"\"Sharding\"", "\"xla.sdy.FuncResultSharding\"",
                                  "\"xla.sdy.LocalToGlobalShape\"", "\"SPMDShardToFullShape\""};
  const hattr *t = attr(in, "custom_call_target");
  for (size_t i = 0; t && i < sizeof targets / sizeof targets[0]; i++)
    if (cf_span_is(t->val, targets[i])) return true;
  return false;
}

static cf_status eval_instr(hlo_reader *r, hcomp *c, int k, hval *vals, const hval *args,
                            int n_args) {
  hinstr *in = &c->ins[k];
  hval *out = &vals[k];
  bool at_entry = c == r->entry;
  const char *op = in->opcode;
  if ((r->work -= 1 + in->n_opnd) < 0)
    return fail(r, in->line, "the module expands to more than %d instructions and operands",
                HLO_MAX_WORK);
  const hval *small[8], **ops = small;
  if (in->n_opnd > 8 && !(ops = malloc((size_t)in->n_opnd * sizeof *ops))) return oom(r, in->line);
  cf_status st = CF_OK;
  for (int i = 0; i < in->n_opnd && !st; i++) {
    int j = map_find(&c->map, in->opnd[i]);
    if (j < 0)
      st = fail(r, in->line, "instruction '%s': operand '%s' is not defined in computation '%s'",
                in->name, in->opnd[i], c->name);
    else if (j >= k)
      st = fail(r, in->line, "instruction '%s': operand '%s' is defined after it (line %d)",
                in->name, in->opnd[i], c->ins[j].line);
    else
      ops[i] = &vals[j];
  }
  if (st) goto done;
  bool binary = !strcmp(op, "add") || !strcmp(op, "subtract") || !strcmp(op, "multiply");
  const hshape *t = &in->shape;
  if (!strcmp(op, "parameter")) {
    st = eval_parameter(r, in, at_entry, args, n_args, out);
  } else if (!strcmp(op, "constant")) {
    st = eval_constant(r, in, at_entry, out);
  } else if (!strcmp(op, "tuple")) {
    st = emit_tuple(r, in, ops, out);
    if (!st && out->depth > HLO_MAX_TUPLE)
      st = fail(r, in->line, "instruction '%s': tuples nested deeper than %d", in->name,
                HLO_MAX_TUPLE);
  } else if (!strcmp(op, "get-tuple-element")) {
    const hattr *ia = attr(in, "index");
    int64_t idx = -1;
    const char *p = ia ? ia->val.p : NULL;
    if (!ia || !read_int(&p, ia->val.p + ia->val.n, INT32_MAX, &idx) || p != ia->val.p + ia->val.n)
      st = fail(r, in->line, "instruction '%s': get-tuple-element needs index=N", in->name);
    else if (in->n_opnd != 1 || ops[0]->n < 0 || idx >= ops[0]->n)
      st = fail(r, in->line, "instruction '%s': get-tuple-element index=%lld of %s", in->name,
                (long long)idx,
                in->n_opnd != 1 ? "other than one operand"
                : ops[0]->n < 0 ? "an array"
                                : "a shorter tuple");
    else
      *out = ops[0]->elem[idx];
  } else if (!strcmp(op, "call")) {
    hcomp *callee = attr_comp(r, in, "to_apply");
    if (!callee) callee = attr_comp(r, in, "calls");
    hval *argv = in->n_opnd ? malloc((size_t)in->n_opnd * sizeof *argv) : NULL;
    if (!callee)
      st = fail(r, in->line, "instruction '%s': call needs to_apply=COMPUTATION of the module",
                in->name);
    else if (in->n_opnd && !argv)
      st = oom(r, in->line);
    for (int i = 0; i < in->n_opnd && !st; i++)
      argv[i] = *ops[i];
    if (!st) st = eval_comp(r, callee, argv, in->n_opnd, out);
    free(argv);
  } else if (!strcmp(op, "all-reduce") || !strcmp(op, "all-reduce-start") ||
             !strcmp(op, "all-gather") || !strcmp(op, "all-gather-start") ||
             !strcmp(op, "reduce-scatter")) {
    st = eval_collective(r, in, at_entry, ops, out);
  } else if (!strcmp(op, "all-reduce-done") && in->n_opnd == 1) {
    *out = *ops[0];
  } else if (!strcmp(op, "all-gather-done") && in->n_opnd == 1 && ops[0]->n == 2) {
    *out = ops[0]->elem[1];
  } else if (binary && in->n_opnd == 2 && exact_array(ops[0]) && exact_array(ops[1]) && t->n < 0 &&
             ops[0]->type->dt == t->dt && ops[1]->type->dt == t->dt &&
             cf_shape_equal(&ops[0]->type->s, &t->s) && cf_shape_equal(&ops[1]->type->s, &t->s)) {
    cf_op ir = op[0] == 'a' ? CF_OP_ADD : op[0] == 's' ? CF_OP_SUB : CF_OP_MUL;
    st = emit_op(r, in, at_entry, ir, ops, 2, NULL, out);
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
  } else if (!strcmp(op, "custom-call") && in->n_opnd && forwards_operands(in)) {
    /* per-rank, a value's local shard is the value: see forwards_operands */
    if (in->n_opnd == 1) {
      *out = *ops[0];
    } else if (!(st = emit_tuple(r, in, ops, out))) {
      if (out->depth > HLO_MAX_TUPLE)
        st = fail(r, in->line, "instruction '%s': tuples nested deeper than %d", in->name,
                  HLO_MAX_TUPLE);
    }
  } else {
    /* everything else keeps shape, dtype and dependencies */
    char type[200];
    const hattr *target = attr(in, "custom_call_target");
    const hattr *kind = attr(in, "kind");
    cf_span extra = target ? target->val : kind ? kind->val : (cf_span){"", 0};
    if (extra.n >= 2 && extra.p[0] == '"') extra = (cf_span){extra.p + 1, extra.n - 2};
    bool printable = true;
    for (size_t i = 0; i < extra.n; i++)
      printable &= extra.p[i] > ' ' && extra.p[i] < 127;
    if (extra.n && printable)
      snprintf(type, sizeof type, "%s:%.*s", op, (int)(extra.n > 120 ? 120 : extra.n), extra.p);
    else
      snprintf(type, sizeof type, "%s", op);
    st = emit_opaque(r, in, at_entry, ops, type, out);
  }
done:
  if (ops != small) free(ops);
  return st;
}

static cf_status eval_comp(hlo_reader *r, hcomp *c, const hval *args, int n_args, hval *out) {
  if (c->active) return fail(r, c->line, "computation '%s' calls itself", c->name);
  if (r->depth >= HLO_MAX_CALLS)
    return fail(r, c->line, "calls nested deeper than %d", HLO_MAX_CALLS);
  hval *vals = calloc((size_t)c->n_ins, sizeof *vals);
  if (!vals) return oom(r, c->line);
  c->active = true;
  r->depth++;
  cf_status st = CF_OK;
  for (int k = 0; k < c->n_ins && !st; k++)
    st = eval_instr(r, c, k, vals, args, n_args);
  if (!st) *out = vals[c->root];
  c->active = false;
  r->depth--;
  free(vals);
  return st;
}

/* Outputs for the arrays of the ENTRY result: output, or output.0, output.1, ... */
static cf_status emit_outputs(hlo_reader *r, const hval *v, bool many, int *k) {
  if (v->n >= 0) {
    for (int i = 0; i < v->n; i++) {
      cf_status st = emit_outputs(r, &v->elem[i], true, k);
      if (st) return st;
    }
    return CF_OK;
  }
  char name[32];
  int line = r->entry->ins[r->entry->root].line, idx;
  if (many)
    snprintf(name, sizeof name, "output.%d", (*k)++);
  else
    snprintf(name, sizeof name, "output");
  cf_status st = add_node(r, name, "", true, CF_OP_OUTPUT, line, &idx);
  return st ? st : cf_node_set_inputs(r->g, idx, 1, &v->ref);
}

static cf_status build(hlo_reader *r) {
  hval root;
  cf_status st = eval_comp(r, r->entry, NULL, -1, &root);
  int k = 0;
  if (!st) st = emit_outputs(r, &root, root.n >= 0, &k);
  if (st) return st;
  int64_t world = r->partitions || r->replicas
                      ? (r->partitions ? r->partitions : 1) * (r->replicas ? r->replicas : 1)
                      : (r->max_rank + 1 > r->mesh_world ? r->max_rank + 1 : r->mesh_world);
  if (!world && r->world_line)
    return fail(r, r->world_line,
                "replica_groups={} spans every device, but the module does not say how many: give "
                "num_partitions= (or replica_count=) on the HloModule line");
  r->g->world_size = world;
  if (r->module && !(r->g->name = cf_arena_strdup(&r->g->arena, r->module))) return oom(r, 0);
  return CF_OK;
}

cf_status cf_hlo_read(cf_context *ctx, const char *name, const char *data, size_t size,
                      cf_graph **out) {
  *out = NULL;
  hlo_reader r = {.ctx = ctx, .file = name, .max_rank = -1, .work = HLO_MAX_WORK};
  cf_status st = cf_graph_new(ctx, name, &r.g);
  if (st) return st;
  r.file = r.g->file;
  if (!(r.text = malloc(size + 1))) {
    st = oom(&r, 0);
    goto fail;
  }
  if (size) memcpy(r.text, data, size);
  r.text[size] = 0;
  r.end = r.text + size;
  if ((st = parse_module(&r)) || (st = build(&r)) || (st = cf_frontend_finish(r.g))) goto fail;
  free(r.text);
  free(r.refs);
  free(r.seen);
  cf_arena_free(&r.scratch);
  *out = r.g;
  return CF_OK;
fail:
  free(r.text);
  free(r.refs);
  free(r.seen);
  cf_arena_free(&r.scratch);
  cf_graph_destroy(r.g);
  return st;
}
