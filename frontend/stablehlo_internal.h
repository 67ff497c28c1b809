/* stablehlo_internal.h - what the two files of the StableHLO reader share.
 *
 * The reader turns StableHLO MLIR text into the HLO reader's parsed module
 * (hlo_reader.h): every func.func and every region it needs becomes a
 * computation, every op an instruction with the HLO opcode of the same
 * semantics (or its MLIR name when collfuse has none), so that the HLO
 * reader's evaluator inlines calls, fuses variadic collectives and resolves
 * replica groups for both formats alike. stablehlo_scan.c scans the text,
 * stablehlo_attr.c reads types, dense literals, replica groups, meshes and
 * shardings, and stablehlo.c builds the computations. Private to frontend/.
 */
#ifndef COLLFUSE_STABLEHLO_INTERNAL_H
#define COLLFUSE_STABLEHLO_INTERNAL_H

#include "hlo_reader.h"

/* A bracket group of at least SH_BIG_GROUP bytes (stablehlo_scan.c). */
typedef struct sh_group {
  size_t open; /* offset of its open bracket in r->text */
  size_t past; /* offset just past its close (0 while open) */
  int nl;      /* newlines inside */
} sh_group;

typedef struct sh_reader {
  hlo_reader *r;
  hcomp *comps; /* malloc'd; moved to r->comps at the end */
  int n_comps, cap_comps;
  int n_regions; /* regions made so far: their computations' names */
  bool forward_ok; /* the region being read may return a value around it (a branch's) */
  sh_group *groups; /* the large bracket groups by offset, from cf_sh_clean (malloc'd) */
  size_t n_groups;
} sh_reader;

/* ---- stablehlo_scan.c: cleaning, statements, top-level searches, uses ---- */

/* Blank `// ...` and loc(...) in r->text (outside strings), check that
 * brackets pair up and strings end on their line, and record the large
 * bracket groups into s->groups. r->text is not changed after. */
cf_status cf_sh_clean(sh_reader *s);
/* Just past the bracket group or string at p (cf_hlo_past), a large
 * group in O(log n). */
const char *cf_sh_past(const sh_reader *s, const char *p, const char *e);
/* The newlines in [p, e), large groups in O(log n). */
int cf_sh_count_nl(const sh_reader *s, const char *p, const char *e);
/* Past a bracket group or string at p, else one character. */
const char *cf_sh_step(const sh_reader *s, const char *p, const char *e);
/* The first ch in [p, e) outside brackets, strings and <...>, or NULL. */
const char *cf_sh_find_top(const sh_reader *s, const char *p, const char *e, char ch);
/* The last such ch, or NULL. */
const char *cf_sh_find_last_top(const sh_reader *s, const char *p, const char *e, char ch);
/* The end of the statement at p: the first newline outside brackets that
 * no region line (`cond {`, `do {`) continues. */
const char *cf_sh_stmt_end(const sh_reader *s, const char *p, const char *e);
/* The word w at p, ending where a name cannot go on. */
bool cf_sh_word_at(const char *p, const char *e, const char *w);
/* The value of `key = VALUE` (or a unit attribute `key`) in [p, e): *val
 * spans VALUE (a bracketed value up to its bracket, else up to the next
 * top-level ','); false when absent. */
bool cf_sh_attr(const sh_reader *s, const char *p, const char *e, const char *key, cf_span *val);
/* An SSA use at p (%name or %name#k): *out is the name without '%'. */
const char *cf_sh_read_use(const char *p, const char *e, cf_span *out);
/* Append the %uses in [p, e) to *out (malloc'd, *n of *cap): top level and
 * inside (...) / [...]; brace groups (regions, attribute dicts) only when
 * deep. Definitions (`%a: T`, `%x = ...`) are no uses. */
cf_status cf_sh_collect_uses(sh_reader *s, int line, const char *p, const char *e, bool deep,
                             const char ***out, int *n, int *cap);
/* The end of the types at p: the end, or a region or keyword after them
 * (stablehlo.while's `cond {...} do {...}`). */
const char *cf_sh_types_end(const sh_reader *s, const char *p, const char *e);

/* ---- stablehlo_attr.c: types, literals, groups, meshes, shardings ---- */

/* A type at *pp: tensor<...>, tuple<...>, !stablehlo.token or a bare
 * element type; *pp moves past it. */
cf_status cf_sh_type(sh_reader *s, const char **pp, const char *e, int line, hshape *out);
/* Whether a and b are one type (tuples element by element). */
bool cf_sh_type_equal(const hshape *a, const hshape *b);
/* t as text for messages (tensor<4x8xf32>, "a tuple of 2") in buf. */
const char *cf_sh_type_text(const hshape *t, char *buf, size_t len);
/* A comma list of types (a function type's side, without parentheses). */
cf_status cf_sh_type_list(sh_reader *s, const char *p, const char *e, int line, hshape **out,
                          int *n);
/* Classify the dense<...> literal at p for a constant of type t into
 * in->lit and in->lit_value (LIT_*). */
void cf_sh_dense(const sh_reader *s, const char *p, const char *e, const hshape *t, hinstr *in);
/* replica_groups = dense<[[...]]> or #stablehlo.replica_group_mesh_axes<...>
 * in [p, e) (the value span) into in->rg. */
cf_status cf_sh_groups(sh_reader *s, hinstr *in, cf_span val);
/* source_target_pairs = dense<[[0, 1], [1, 2]]> in val as the attribute
 * source_target_pairs="{0,1},{1,2}" of in (the IR's text of pairs). */
cf_status cf_sh_pairs(sh_reader *s, hinstr *in, cf_span val);
/* `sdy.mesh @NAME = <[...]>` (or stablehlo.mesh) at [p, e). */
cf_status cf_sh_mesh_decl(sh_reader *s, const char *p, const char *e, int line);
/* The local shape of global under sharding <@mesh, [{"a"}, {}]> in [p, e):
 * each dimension divided by the sizes of its axes that are in manual (all
 * of them when manual is empty). */
cf_status cf_sh_local_shape(sh_reader *s, cf_span sharding, cf_span manual, const cf_shape *global,
                            int line, cf_shape *out);

#endif /* COLLFUSE_STABLEHLO_INTERNAL_H */
