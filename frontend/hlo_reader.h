/* hlo_reader.h - what the files of the XLA HLO text reader share.
 *
 * The reader is four files, each calling only those below it: hlo.c splits
 * the text into statements and parses them into computations of
 * instructions (and holds cf_hlo_read), hlo_eval.c evaluates the ENTRY
 * computation into IR nodes, hlo_groups.c turns a collective's
 * replica_groups into IR groups, and hlo_scan.c at the bottom holds the
 * errors, maps and scanner they all use. This header holds the parsed
 * module, the reader's state and the helpers that cross files.
 * Private to frontend/: nothing outside the HLO reader includes it.
 */
#ifndef COLLFUSE_HLO_READER_H
#define COLLFUSE_HLO_READER_H

#include "frontend.h"

#include <ctype.h>

enum {
  HLO_MAX_NEST = 256, /* brackets open at once in one statement */
  HLO_MAX_TUPLE = 32, /* tuples nested in tuples (shapes and values) */
  HLO_MAX_CALLS = 64, /* call instructions nested through computations */
  HLO_MAX_AXES = 16,  /* axes of a mesh */
};
/* Instructions and operands evaluated, inlined calls and result tuples
 * included: HLO_WORK_PER_BYTE per byte of the module, at least
 * HLO_MIN_WORK and at most HLO_MAX_WORK, so that a few calls that call each
 * other (or tuples of tuples) cannot make a small text cost seconds and
 * hundreds of megabytes: what a module costs stays linear in its size. */
#define HLO_WORK_PER_BYTE 8
#define HLO_MIN_WORK 65536
#define HLO_MAX_WORK 4000000

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

/* Replica groups another reader has already parsed (StableHLO's dense<...>
 * and mesh-axes forms): device ids before the collective's mode is applied. */
typedef struct hrg {
  bool all;         /* every device */
  int n_sub;        /* groups (0 with all) */
  const int *off;   /* n_sub + 1 offsets into ids */
  const int *ids;   /* device ids, group after group */
  const char *axes; /* mesh form: the axes' names joined by '_', else NULL */
  int64_t mesh;     /* mesh form: its devices, else 0 */
} hrg;

/* What a constant's literal holds: one repeated value, 0, 1, 2, ... (iota),
 * or anything else (Opaque data). */
enum { LIT_OTHER = 1, LIT_SPLAT, LIT_IOTA };

typedef struct hinstr {
  const char *name, *opcode;
  int line;
  hshape shape;
  bool no_shape; /* the text leaves the shape out (tuple(a, b)): inferred from the operands */
  const char *spelled; /* the op as its format names it (stablehlo.while), NULL: opcode */
  cf_span args;  /* the text between the opcode's parentheses */
  int n_opnd;
  const char **opnd; /* operand names, sigils removed */
  int n_attr;
  hattr *attr;
  const hgset *groups; /* collectives: replica groups, resolved on first use */
  const hrg *rg;       /* replica groups parsed already (StableHLO), else NULL */
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
  bool nested; /* a region of an op (StableHLO): uses values of the computation around it */
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
  const char *base; /* name is base or base_K: base is the axes, or replica_group_N */
  int suffix;       /* that K, 1 for base itself */
  uint64_t hash;    /* of n_sub, off and ranks */
  int line;
  hgset *next;
};

/* A computation being evaluated: the values of its instructions before k,
 * which a nested computation (hcomp.nested) evaluated within it may use. */
typedef struct hscope {
  const hcomp *c;
  const hval *vals;
  int k;
  struct hscope *up; /* the computation that evaluates this one, NULL at ENTRY */
} hscope;

/* A tuple-shaped all-reduce, all-gather or reduce-scatter read as one fused
 * node, whose IR node declares no result types: its results are checked
 * against its operands once the module's devices are known (cf_hlo_build). */
typedef struct hfused {
  const hinstr *in;
  const hshape *res;         /* the results: a tuple of n arrays */
  const hshape *const *opnd; /* the n operands' types */
  int kind;                  /* 0 all-reduce, 1 all-gather, 2 reduce-scatter */
  int64_t dim;
  const hgset *gs;
  struct hfused *next;
} hfused;

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
  cf_span module_attrs;         /* the HloModule line's frontend_attributes (xla.sdy.meshes) */
  /* the module's meshes (hlo_sharding.c): HLO's xla.sdy.meshes, read on
   * first use, or StableHLO's sdy.mesh declarations */
  struct hmesh *meshes; /* malloc'd */
  int n_meshes, cap_meshes;
  int *mesh_slots; /* meshes by name (util.h's cf_name_slot, malloc'd) */
  size_t mesh_slots_cap;
  bool meshes_loaded;
  int world_line;     /* first collective over every device */
  int64_t work;       /* what is left of the budget above */
  int64_t work_limit; /* the budget */
  int depth;
  int region;                /* the graph region nodes are made in now (cf_region), 0 at top */
  hscope *scope;             /* the innermost computation being evaluated */
  unsigned long long serial; /* suffix of names that were taken */
  cf_ref *refs;              /* operands of the node being built */
  size_t n_refs, cap_refs;
  hgset *sets;      /* newest first */
  hgset **by_ranks; /* sets hashed by their ranks, open addressing (scratch) */
  hgset **by_base;  /* the set that took each base's last suffix, by base */
  size_t sets_cap, n_sets;
  int n_anon;          /* replica_group_K */
  unsigned char *seen; /* CF_MAX_WORLD flags, all 0 between uses */
  hfused *fused;       /* newest first (scratch) */
  bool oom;
  bool stablehlo; /* read from StableHLO text: its verifier's rules apply too */
} hlo_reader;

/* ---- hlo_scan.c: errors, strings, maps, scanning, attributes ---- */

/* Report "FILE:LINE: error: ..." through the context; returns the status. */
cf_status cf_hlo_fail(hlo_reader *r, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
cf_status cf_hlo_oom(hlo_reader *r, int line);
/* A NUL-terminated copy of p[0..n) in the scratch arena; NULL (r->oom set) on failure. */
const char *cf_hlo_str(hlo_reader *r, const char *p, size_t n);
/* Index keys[0..n) into m (slots from a); *dup gets the first key seen
 * twice (-1 when none). false when out of memory. */
bool cf_hlo_map_build(cf_arena *a, strmap *m, const char **keys, int n, int *dup);
/* The index of key k in m, -1 when absent. */
int cf_hlo_map_find(const strmap *m, const char *k);
/* Run a reader built on hlo_reader: parse (which fills the computations and
 * r->entry from r->text), then evaluate the entry into a graph. */
cf_status cf_hlo_run(cf_context *ctx, const char *name, const char *data, size_t size,
                     cf_status (*parse)(hlo_reader *r), cf_graph **out);

static inline bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
static inline bool is_name_char(char c) {
  return isalnum((unsigned char)c) || c == '_' || c == '.' || c == '-';
}
/* Whether p starts a comment: '/' '*' ... '*' '/' or '//' to the end of the line. */
static inline bool at_comment(const char *p, const char *e) {
  return e - p >= 2 && p[0] == '/' && (p[1] == '*' || p[1] == '/');
}
/* Just past the comment at p (a line comment ends before its newline),
 * counting newlines into *line; NULL when a block comment is never closed. */
const char *cf_hlo_comment_end(const char *p, const char *e, int *line);
/* Past spaces, newlines and comments, counting newlines into *line. An
 * unterminated comment is left for cf_hlo_scan_stmt to report. */
const char *cf_hlo_skip_nl(const char *p, const char *e, int *line);
/* Past spaces, newlines and comments. */
const char *cf_hlo_skip(const char *p, const char *e);
/* Past the quoted string that starts at p. */
const char *cf_hlo_past_quoted(const char *p, const char *e);
/* Past the bracket group, string or comment that starts at p. */
const char *cf_hlo_past(const char *p, const char *e);
/* Whether p starts a bracket group, a string or a comment. */
bool cf_hlo_at_group(const char *p, const char *e);
/* The first ch outside brackets, strings and comments in [p, e), or NULL. */
const char *cf_hlo_find_top(const char *p, const char *e, char ch);
/* Top-level occurrences of ch in [p, e). */
int cf_hlo_count_top(const char *p, const char *e, char ch);
/* The end of the statement at p into *out, found by tokens as XLA's parser
 * does, not by lines: the first newline outside brackets, strings and
 * comments after which a new statement starts, or e. A line that ends in
 * ',' or '=' (or '->') goes on, and so does one followed by ',', '{' or
 * '->'; in a computation's body (body) a new instruction starts only at
 * 'ROOT' or 'NAME =', so 'ROOT t = (f32[2], f32[2])' may put its opcode on
 * the next line. *line advances over the newlines inside; unbalanced
 * brackets, unterminated strings and comments are errors. */
cf_status cf_hlo_scan_stmt(hlo_reader *r, const char *p, const char *e, bool body, int *line,
                           const char **out);
const char *cf_hlo_read_name(const char *p, const char *e, cf_span *out);
bool cf_hlo_word_at(const char *p, const char *e, const char *w);
bool cf_hlo_read_int(const char **pp, const char *e, int64_t max, int64_t *out);
/* The number at p as written (digits, maybe after '-'), for messages; empty
 * when p holds none. */
cf_span cf_hlo_number_at(const char *p, const char *e);
const char *cf_hlo_int_list(const char *p, const char *e, char close, int64_t hi, int64_t *v,
                            int max, int *n);
/* The instruction's attribute key, NULL when absent. */
const hattr *cf_hlo_attr(const hinstr *in, const char *key);
/* The computation an attribute names (to_apply=%name), NULL when none. */
hcomp *cf_hlo_attr_comp(hlo_reader *r, const hinstr *in, const char *key);

/* ---- hlo_groups.c: replica groups ---- */

/* The collective's replica groups as ranks, declared as IR groups. */
cf_status cf_hlo_coll_groups(hlo_reader *r, hinstr *in, const hgset **out);
/* The groups of a mesh of na axes (size[], devices row-major) along the
 * axes sel[0..ns) (in that order): the devices that differ only along them.
 * out's arrays are in r's scratch arena; line is for errors. */
cf_status cf_hlo_mesh_groups(hlo_reader *r, int line, const int64_t *size, int na, const int *sel,
                             int ns, hrg *out);

/* ---- hlo_sharding.c: how a sharding cuts an array across the devices ---- */

/* A Shardy mesh: its axes and their sizes (device_ids: an explicit order). */
typedef struct hmesh {
  const char *name; /* NUL-terminated, at most CF_MAX_NAME bytes (scratch arena) */
  int n;            /* axes, at most HLO_MAX_AXES */
  cf_span *axis;    /* n axis names (scratch arena) */
  int64_t *size;    /* n axis sizes, each >= 1 (scratch arena) */
  int64_t total;    /* devices: the product of the sizes; 0 when above CF_MAX_WORLD */
  bool device_ids;
} hmesh;

/* A new mesh named name (of at most CF_MAX_NAME bytes) at the end of r's
 * meshes, its fields zero but the name; NULL when out of memory (r->oom
 * set). Indexed by name unless a mesh of that name exists (the first one
 * keeps it). The pointer is good until the next call. */
hmesh *cf_hlo_mesh_add(hlo_reader *r, const char *name);
/* The mesh of r named name, NULL when none. */
const hmesh *cf_hlo_mesh_find(const hlo_reader *r, cf_span name);
/* Axis sizes size[0..n) (read from the text: each in 1..CF_MAX_WORLD) into
 * m's arena arrays, with axis names axis[0..n) and their checked product
 * as m->total. false when out of memory (r->oom set). */
bool cf_hlo_mesh_set_axes(hlo_reader *r, hmesh *m, const cf_span *axis, const int64_t *size, int n);

/* Blocks per dim and the device holding each block (row-major blocks,
 * replicas consecutive): a Shard node's tiles and devices. n_dev 0: no cut. */
typedef struct hcut {
  int rank;
  int64_t tiles[CF_MAX_RANK];
  int n_dev;
  int dev[CF_MAX_WORLD];
} hcut;

/* An HLO sharding ({devices=[2,1]<=[2]}, {replicated}, ...) of an array of
 * rank dims; false with why when it is not a form collfuse runs. */
bool cf_hlo_sharding_cut(cf_span text, int rank, hcut *out, char *why, size_t why_len);
/* The value of key in an attribute `{k1="v1",k2="v2"}` or `{k={...}}`, with
 * \" escapes removed, in the scratch arena; NULL span when absent. */
cf_span cf_hlo_sub_value(hlo_reader *r, cf_span attrs, const char *key);
/* The cuts of in's xla.sdy.in_shardings, one per operand (of ranks[i]
 * dims), against the module's xla.sdy.meshes; false with why. */
bool cf_hlo_sdy_cuts(hlo_reader *r, const hinstr *in, const int *ranks, int n, hcut *out, char *why,
                     size_t why_len);

/* ---- hlo_eval.c: instructions to IR nodes ---- */

/* Evaluate ENTRY into r->g: nodes, outputs, world size and name. */
cf_status cf_hlo_build(hlo_reader *r);

#endif /* COLLFUSE_HLO_READER_H */
