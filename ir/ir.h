/* ir.h - collfuse's internal graph IR (one header for the ir/ module).
 *
 * The IR is a plain-struct graph (ggml/QBE style): a graph owns an array of
 * nodes, every node has operands (node index + output port), typed outputs,
 * an optional declared type and a short list of attributes whose ids come
 * from ops.def. All strings and arrays live in the graph's arena. ir/ depends
 * on nothing else of collfuse; everything else depends on it.
 */
#ifndef COLLFUSE_IR_H
#define COLLFUSE_IR_H

#include "collfuse/collfuse.h"
#include "util.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* ---- limits (checked with overflow-safe arithmetic) ---- */
#define CF_MAX_RANK CF_MAX_DIMS              /* dims of a shape (the public header's) */
#define CF_MAX_ELEMENTS ((int64_t)1 << 36)   /* elements of one tensor */
#define CF_MAX_BYTES ((int64_t)1 << 38)      /* bytes of one tensor */
#define CF_MAX_NODES 1000000                 /* nodes of one graph */
#define CF_MAX_OPERANDS 65536                /* operands of one node */
#define CF_MAX_FILE_BYTES ((size_t)256 << 20) /* input file size */
#define CF_MAX_XML_ELEMENTS 4000000          /* elements in one XML document */
#define CF_MAX_GROUP_NAME 127                /* HCCL: 128 bytes with the NUL */
/* Bytes of a node name, whichever reader or builder makes the node: the
 * native XML format's name type (docs/collfuse-graph.xsd, whose maxLength
 * the build checks against this) allows as many characters, so every graph
 * collfuse accepts can be written and read back. */
#define CF_MAX_NAME 4096
/* Ranks of a graph and of a run: what the executor can run. The threads
 * transport keeps a 1.7 KiB channel for every ordered pair of ranks (108 MiB
 * at 256, growing with the square) and one thread per rank, and --verify's
 * reference holds every rank's data in one process; the MPI backend runs
 * the same plans. Readers, the verifier, `run --ranks` and the executor all
 * check this one limit (docs/format.md, "Limits"). */
#define CF_MAX_WORLD 256
#define CF_MAX_MEMORY ((int64_t)1 << 50) /* a memory budget (--max-memory): 1 PiB */
/* Bytes the executor aligns its buffers to and the combiner a bucket's
 * members (their `offsets`): a cache line, a multiple of every dtype. */
#define CF_BUFFER_ALIGN 64

/* The plural ending of a count in a message: "" for 1, else "s" ("1 rank",
 * "2 ranks"). */
static inline const char *cf_s(long long n) { return n == 1 ? "" : "s"; }

/* ================= context.c: context, errors, arena ================= */

typedef struct cf_errslot cf_errslot;
typedef struct cf_progress cf_progress; /* progress.c */
typedef struct cf_trace cf_trace;       /* trace.h: a run's timeline */
typedef struct cf_trace_lane cf_trace_lane; /* trace.h: a thread's events */
struct cf_context {
  pthread_mutex_t err_lock; /* guards errs and err_seq */
  cf_errslot *errs;         /* the messages, one slot per thread (context.c) */
  uint64_t err_seq;         /* errors recorded so far: orders the slots */
  cf_log_fn log_fn;         /* caller's log sink or NULL */
  void *log_user;
  void *codegen; /* codegen/'s JIT and kernel cache, created on first use */
  void (*codegen_free)(void *codegen); /* set by codegen/ with it */
  pthread_mutex_t codegen_lock;        /* codegen/ creates codegen under it */
  const struct cf_codegen_ops *codegen_ops; /* the LLVM module's table, loaded under
                                               codegen_lock on first use (codegen/load.c) */
  void *kload; /* codegen/load.c's kernels linked from the disk cache without LLVM, created
                  under codegen_lock on first use */
  void (*kload_free)(void *kload); /* set by codegen/ with it */
  /* borrowed from the caller, NULL when not wanted (the executor's rank
   * contexts copy both): a job's phases (progress.c) and a run's timeline
   * (trace.c) */
  cf_progress *progress;
  cf_trace *trace;
};

/* Record an error "FILE:LINE: error: MSG" (file/line omitted when NULL/0)
 * as the calling thread's message on ctx and return st. */
cf_status cf_error(cf_context *ctx, cf_status st, const char *file, int line, const char *fmt,
                   ...) __attribute__((format(printf, 5, 6)));
cf_status cf_verror(cf_context *ctx, cf_status st, const char *file, int line, const char *fmt,
                    va_list ap);
/* s[0..n) as a message quotes input: bytes that are not printable UTF-8
 * become \xNN and more than CF_EXCERPT_CHARS characters are cut with "...".
 * buf holds CF_EXCERPT_BUF bytes; returns it. cf_verror escapes every message
 * the same way (without cutting). */
#define CF_EXCERPT_CHARS 60
#define CF_EXCERPT_BUF (CF_EXCERPT_CHARS * 4 + 4)
const char *cf_excerpt(char *buf, size_t len, const char *s, size_t n);
/* cf_excerpt of a NUL-terminated string, in a buffer that lives until the end
 * of the enclosing block: fail(..., "unknown op '%s'", CF_QUOTE(op)). */
#define CF_QUOTE(s) cf_excerpt((char[CF_EXCERPT_BUF]){0}, CF_EXCERPT_BUF, (s), strlen(s))
void cf_log(cf_context *ctx, cf_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Forget the calling thread's message on ctx. */
void cf_clear_error(cf_context *ctx);
/* The calling thread's message, detached (the caller frees it; NULL when
 * none), and a message (heap, or NULL) put back as its message. */
char *cf_error_take(cf_context *ctx);
void cf_error_put(cf_context *ctx, char *msg);
/* What cf_context_create, cf_context_destroy and cf_context_errmsg of the
 * public header do (api/ wraps these). */
cf_status cf_ctx_create(cf_context **out);
void cf_ctx_destroy(cf_context *ctx);
/* The calling thread's last error on ctx; a thread with none gets a copy of
 * the newest message any thread left there; "" when there is none. Valid
 * until the calling thread's next error or read on ctx. */
const char *cf_errmsg(const cf_context *ctx);

typedef struct cf_arena_chunk cf_arena_chunk;
typedef struct cf_arena {
  cf_arena_chunk *head; /* newest chunk first */
} cf_arena;

void *cf_arena_alloc(cf_arena *a, size_t size);           /* zeroed, 16-aligned; NULL on OOM */
void *cf_arena_array(cf_arena *a, size_t n, size_t elem); /* overflow-checked */
char *cf_arena_strdup(cf_arena *a, const char *s);
char *cf_arena_strndup(cf_arena *a, const char *s, size_t n);
/* "<base><tail>" for a name made from another name (a fused node, an
 * inlined call, a made-up output): base is cut, at a UTF-8 character
 * boundary, so that the whole holds at most CF_MAX_NAME bytes; tail (a
 * short suffix) is kept whole. NULL on OOM. */
char *cf_arena_name(cf_arena *a, const char *base, const char *tail);
void cf_arena_free(cf_arena *a);

/* write(2) all of p[0..n), retrying on EINTR and short writes. */
bool cf_write_all(int fd, const void *p, size_t n);

/* Overflow-safe helpers: return false on overflow. */
bool cf_mul_i64(int64_t a, int64_t b, int64_t *out);
bool cf_add_i64(int64_t a, int64_t b, int64_t *out);

/* ================= file.c: writing output files, reading input files ================= */

/* An output file being written. cf_out_open creates a fresh ".cf-XXXXXX"
 * beside path (O_EXCL: nothing existing is followed or truncated);
 * cf_out_close fsyncs it and renames it over path, so a symlink at path is
 * replaced, not written through. A path that is not a regular file (a
 * device, FIFO or socket) or lies under /dev/ or /proc/ (/dev/stdout) is
 * written in place; a directory is an error. Errors name path and say why. */
typedef struct cf_outfile {
  FILE *f;          /* where to write */
  char *tmp;        /* the temporary's name, NULL when writing in place */
  const char *path; /* the target, as given */
  int dirfd;        /* what path and tmp are relative to: AT_FDCWD, or cf_out_openat's */
  int slot;         /* tmp's in temp.c's registry, -1 none */
} cf_outfile;
cf_status cf_out_open(cf_context *ctx, const char *path, bool binary, cf_outfile *o);
/* cf_out_open of name in the directory dirfd (a private cache's): always a
 * fresh temporary of mode 0600 renamed over name, never written in place. */
cf_status cf_out_openat(cf_context *ctx, int dirfd, const char *name, cf_outfile *o);
/* ok: flush, fsync, close and move into place; !ok: close and remove the
 * temporary (the target untouched). A no-op once closed. Returns CF_ERR_IO
 * (with a message) when ok and finishing failed. */
cf_status cf_out_close(cf_context *ctx, cf_outfile *o, bool ok);
/* data[0..size) as the file path, through cf_out_open/cf_out_close. */
cf_status cf_write_file(cf_context *ctx, const char *path, const void *data, size_t size);

/* ================= progress.c: a job's phases ================= */

/* The record of a job's phases (opaque), owned by whoever puts it on a
 * context (cf_context.progress). */
enum { CF_PHASES_MAX = 16 };
cf_status cf_progress_create(cf_progress **out);
void cf_progress_destroy(cf_progress *p);
/* Phase name (a static string: "read", "compile", "plan", "inputs",
 * "iterations", "verify", ...) begins on ctx's record, ending the one
 * before; total: its units (iterations, windows), 0 when it has none. Each
 * call is a no-op when ctx has no record. */
void cf_phase_begin(cf_context *ctx, const char *name, int64_t total);
void cf_phase_done(cf_context *ctx, int64_t done); /* units done so far */
void cf_phase_add(cf_context *ctx, int64_t units); /* more done (any thread) */
void cf_phase_end(cf_context *ctx);                /* no phase runs now */
/* A sign of life of the rank the calling thread works for: its world's
 * heartbeat (transports.h's cf_comm_pulse), which the rank's peers read
 * while they wait for it, so their --timeout counts its silence, not its
 * work. Set per thread by whoever runs a rank's work (the executor's rank
 * threads, the driver of one process of a job, --verify's workers from
 * their caller's); fn NULL: nobody listens. cf_beat() is one beat of the
 * calling thread's pulse (cheap: called per chunk of a long local phase,
 * such as a fill, a first touch, a window of --verify; cf_phase_done and
 * cf_phase_add beat too). */
typedef struct cf_pulse {
  void (*fn)(void *user);
  void *user;
} cf_pulse;
extern _Thread_local cf_pulse cf_pulse_here;
void cf_beat(void);
/* The running phase, its seconds so far and units done of total (another
 * thread's view, for a progress line); false when none runs. */
bool cf_progress_peek(cf_progress *p, const char **name, double *elapsed, int64_t *done,
                      int64_t *total);
/* Every phase so far, in first-begun order, with its seconds (the running
 * one's so far): how many, at most max. */
int cf_progress_phases(cf_progress *p, const char **names, double *secs, int max);

/* ================= env.c: the environment variables, one table ================= */

typedef enum cf_env_var {
  CF_ENV_VERBOSE,       /* COLLFUSE_VERBOSE */
  CF_ENV_CACHE,         /* COLLFUSE_CACHE */
  CF_ENV_XDG_CACHE,     /* XDG_CACHE_HOME */
  CF_ENV_PROFILE,       /* COLLFUSE_PROFILE */
  CF_ENV_XDG_CONFIG,    /* XDG_CONFIG_HOME */
  CF_ENV_HOME,          /* HOME */
  CF_ENV_STREAM_MIN,    /* COLLFUSE_STREAM_MIN */
  CF_ENV_BIND,          /* COLLFUSE_BIND */
  CF_ENV_BLAS_THREADS,  /* OPENBLAS_NUM_THREADS */
  CF_ENV_CUDA_DRIVER,   /* COLLFUSE_CUDA_DRIVER */
  CF_ENV_CUBLAS,        /* CUBLAS_LIBRARY */
  CF_ENV_SHM_RANK,        /* COLLFUSE_RANK */
  CF_ENV_SHM_SIZE,        /* COLLFUSE_WORLD_SIZE */
  CF_ENV_SHM_JOB,         /* COLLFUSE_JOB */
  CF_ENV_TORCH_RANK,      /* RANK */
  CF_ENV_TORCH_SIZE,      /* WORLD_SIZE */
  CF_ENV_TORCH_LOCAL_SIZE, /* LOCAL_WORLD_SIZE */
  CF_ENV_MASTER_ADDR,     /* MASTER_ADDR */
  CF_ENV_MASTER_PORT,     /* MASTER_PORT */
  CF_ENV_OMPI_RANK,       /* OMPI_COMM_WORLD_RANK */
  CF_ENV_OMPI_SIZE,       /* OMPI_COMM_WORLD_SIZE */
  CF_ENV_OMPI_LOCAL_SIZE, /* OMPI_COMM_WORLD_LOCAL_SIZE */
  CF_ENV_OMPI_BTL,        /* OMPI_MCA_btl */
  CF_ENV_PMIX_NAMESPACE,  /* PMIX_NAMESPACE */
  CF_ENV_PMI_RANK,        /* PMI_RANK */
  CF_ENV_PMI_SIZE,        /* PMI_SIZE */
  CF_ENV_SLURM_PROCID,    /* SLURM_PROCID */
  CF_ENV_SLURM_NTASKS,    /* SLURM_NTASKS */
  CF_ENV_SLURM_NNODES,    /* SLURM_NNODES */
  CF_ENV_SLURM_JOB_ID,    /* SLURM_JOB_ID */
  CF_ENV_SLURM_STEP_ID,   /* SLURM_STEP_ID */
  CF_ENV_SHM_HUGE,        /* COLLFUSE_SHM_HUGE */
  CF_ENV_SHM_SPIN,        /* COLLFUSE_SHM_SPIN */
  CF_ENV_SHM_CORES,       /* COLLFUSE_SHM_CORES */
  CF_ENV_HOSTID,          /* COLLFUSE_HOSTID */
  CF_ENV_RENDEZVOUS,      /* COLLFUSE_RENDEZVOUS */
  CF_ENV_PATH,            /* PATH */
  CF_ENV_COUNT
} cf_env_var;

/* One variable: what the man page and docs/cli.md say of it. */
typedef struct cf_env_knob {
  const char *name;
  const char *value; /* the kind of value it takes ("directory, or `off`") */
  const char *dflt;  /* what holds when it is unset */
  const char *doc;   /* its meaning, one sentence (`literal` words in backticks) */
} cf_env_knob;
extern const cf_env_knob cf_env_table[CF_ENV_COUNT];

/* The variable's value, NULL when unset: the one way collfuse reads its
 * environment (each reader parses the value as its row says). */
const char *cf_env(cf_env_var v);

/* ================= temp.c: temporaries, directories published whole ================= */

/* Register a temporary (a file, or a directory removed with what it holds,
 * two levels deep) that cf_temps_remove removes; its slot, -1 when none is
 * free or the path is too long (it is then only not removed on a signal). */
int cf_temp_track(const char *path, bool dir);
/* The temporary of slot is gone or has its final name (slot -1: nothing). */
void cf_temp_untrack(int slot);
/* Remove every registered temporary: async-signal-safe, for a handler of
 * SIGTERM/SIGINT that then re-raises (tools/run.c). */
void cf_temps_remove(void);

/* A directory filled under a temporary ".cf-XXXXXX" name beside its target
 * (registered), then published whole. */
typedef struct cf_tmpdir {
  char *path; /* where to write its files; NULL once published or discarded */
  int slot;
} cf_tmpdir;
cf_status cf_tmpdir_make(cf_context *ctx, const char *target, cf_tmpdir *t);
/* t replaces target: renamed over it, or exchanged with it when it holds
 * files (the old tree then removed), so a reader sees the old directory or
 * the new one, never a mix. On failure t is discarded and target is as it
 * was; a target that is not a directory is an error. */
cf_status cf_tmpdir_publish(cf_context *ctx, cf_tmpdir *t, const char *target);
/* Remove t with what it holds (a no-op once published). */
void cf_tmpdir_discard(cf_tmpdir *t);
/* Remove directory path and what it holds (renamed aside first, so it is
 * there whole or not at all); CF_OK when it is absent. */
cf_status cf_dir_remove(cf_context *ctx, const char *path);

/* Every file collfuse reads goes through cf_in_open or cf_read_file: the
 * file is checked to be a regular file before anything could block on it
 * (stat, then open O_NONBLOCK and fstat the descriptor), and read whole
 * only up to a size bound. Errors (CF_ERR_IO, CF_ERR_INVALID above the
 * bound) name the file and say what it is: "not a regular file (a FIFO)".
 * what, when not NULL, leads every message ("profile" gives "profile:
 * cannot open: ..."). */
#define CF_STDIN_NAME "<stdin>"
enum {
  CF_IN_STDIN = 1,    /* "-" is standard input (named CF_STDIN_NAME), read to its end */
  CF_IN_OPTIONAL = 2, /* a missing file is no error: *fd -1, *data NULL */
  CF_IN_FIFO = 4,     /* cf_in_open: a FIFO is allowed too, left O_NONBLOCK, for
                         cf_read_full with a deadline */
};
/* A descriptor for reading path (flags: CF_IN_OPTIONAL, CF_IN_FIFO). */
cf_status cf_in_open(cf_context *ctx, const char *path, const char *what, unsigned flags, int *fd);
/* The whole of path (flags: CF_IN_STDIN, CF_IN_OPTIONAL), at most max bytes,
 * as a malloc'd *data with a NUL after its *size bytes. */
cf_status cf_read_file(cf_context *ctx, const char *path, const char *what, size_t max,
                       unsigned flags, char **data, size_t *size);
/* cf_read_file for callers that keep their own message buffer: false with
 * why[0..len) set to the message, without the file's name. */
bool cf_read_file_msg(const char *path, size_t max, unsigned flags, char **data, size_t *size,
                      char *why, size_t len);
/* Read up to n bytes, stopping early only at end of file; with a deadline
 * (cf_now() seconds, > 0) each read waits at most until then: -1 with errno
 * ETIMEDOUT. */
ssize_t cf_read_full(int fd, void *buf, size_t n, double deadline);

/* ================= dtype.c: dtypes, shapes, values ================= */

typedef enum cf_dtype {
  CF_DT_INVALID = 0,
  CF_DT_INT8,
  CF_DT_UINT8,
  CF_DT_INT16,
  CF_DT_INT32,
  CF_DT_INT64,
  CF_DT_FLOAT16,
  CF_DT_BFLOAT16,
  CF_DT_FLOAT32,
  CF_DT_FLOAT64,
  CF_DT_UINT16, /* appended: the values above are stored in caches and sent between ranks */
  CF_DT_UINT32,
  CF_DT_UINT64,
  CF_DT_BOOL,   /* XLA's pred: one byte, 0 or 1 */
  CF_DT_COUNT
} cf_dtype;

typedef struct cf_shape {
  int rank;                   /* 0..CF_MAX_RANK; 0 is a scalar */
  int64_t dims[CF_MAX_RANK];  /* each >= 0 */
} cf_shape;

typedef struct cf_value {
  cf_dtype dtype;
  cf_shape shape;
} cf_value;

const char *cf_dtype_name(cf_dtype dt);
cf_dtype cf_dtype_parse(const char *s); /* accepts aliases (f32, bf16, half...) */
int cf_dtype_size(cf_dtype dt);
bool cf_dtype_is_float(cf_dtype dt);
/* Integers read zero-extended: the uint types and bool. */
bool cf_dtype_is_unsigned(cf_dtype dt);
/* The bits u of an integer dtype as its value in int64: sign-extended from
 * dt's width, zero-extended for the unsigned types (uint64 keeps its bits:
 * compare and divide those as uint64), bool 1 for any u != 0. What every
 * integer op's result is stored as (integer arithmetic wraps). */
int64_t cf_dtype_wrap(cf_dtype dt, uint64_t u);
/* numpy's type code and size of dt ('f' and 4 for float32, 'b' and 1 for
 * bool), as in a .npy descr; 0 when numpy has none (bfloat16). */
char cf_dtype_npy_kind(cf_dtype dt);
/* The dtypes in the order people list them (int8, uint8, int16, uint16,
 * ..., float64, bool), for i in 0..CF_DT_COUNT-2 (messages, docs). */
cf_dtype cf_dtype_listed(int i);
/* The dtype a MatMul of two dt operands produces (integers narrower than 32
 * bits accumulate in 32), CF_DT_INVALID when it has none (bool). */
cf_dtype cf_dtype_matmul_out(cf_dtype dt);
/* Whether dt holds v without a silent change: an integer type an integral
 * value in its range, a float type any value up to its largest finite one
 * (or an infinity or NaN, which it holds as such). False with the range in
 * why otherwise. */
bool cf_dtype_holds(cf_dtype dt, double v, char *why, size_t len);

/* Parse "1024,512" ("" = scalar). On failure returns false and writes a
 * human-readable reason into why. */
bool cf_shape_parse(const char *s, cf_shape *out, char *why, size_t why_len);
/* Format as "1024,512" into buf; returns buf. */
char *cf_shape_format(const cf_shape *s, char *buf, size_t len);
bool cf_shape_equal(const cf_shape *a, const cf_shape *b);
/* Elements and bytes, false on overflow or above CF_MAX_ELEMENTS/BYTES. */
bool cf_shape_elements(const cf_shape *s, int64_t *out);
bool cf_value_bytes(const cf_value *v, int64_t *out);
/* A byte count for people: "512 B", "1.5 KiB", "8.6 GiB" (binary units,
 * one decimal); returns buf. */
char *cf_bytes_text(int64_t bytes, char *buf, size_t len);
/* A byte count as the command line writes it: "4096", "64K", "1.5MiB",
 * "25M", "4G", "1T" (K/M/G/T binary, optional "i" and "B"), s[0..len); at
 * least 1 and at most max bytes, else false. */
bool cf_bytes_parse(const char *s, size_t len, int64_t max, int64_t *out);
/* float <-> half/bfloat16 bits, round to nearest even, NaN stays NaN. */
float cf_f16_to_f32(uint16_t h);
uint16_t cf_f32_to_f16(float f);
float cf_bf16_to_f32(uint16_t h);
uint16_t cf_f32_to_bf16(float f);

/* ================= graph.c: ops, attributes, nodes, graph ================= */

typedef enum cf_attr_id {
#define ATTR(id, name, kind, dflt, doc) CF_A_##id,
#include "ops.def"
#undef ATTR
  CF_A_COUNT
} cf_attr_id;

typedef enum cf_attr_kind {
  CF_AK_INT,
  CF_AK_STR,
  CF_AK_DTYPE,
  CF_AK_SHAPE,
  CF_AK_FLOAT,
  CF_AK_RED,
  CF_AK_LAYOUT,
  CF_AK_STRS, /* a list of strings: a bucket's members */
  CF_AK_INTS  /* a list of integers: a bucket's offsets */
} cf_attr_kind;

typedef enum cf_category {
  CF_CAT_SOURCE,
  CF_CAT_SINK,
  CF_CAT_COMPUTE,
  CF_CAT_COLLECTIVE,
  CF_CAT_FUSED_COLLECTIVE,
  CF_CAT_FUSED_MATMUL
} cf_category;

typedef enum cf_op {
  CF_OP_INVALID = 0,
#define OP(id, name, mn, mx, cat, coll, flags, look, req, allowed) CF_OP_##id,
#include "ops.def"
#undef OP
  CF_OP_COUNT
} cf_op;

typedef enum cf_reduction {
  CF_RED_SUM,
  CF_RED_MEAN,
  CF_RED_MAX,
  CF_RED_MIN,
  CF_RED_PROD,
  CF_RED_COUNT
} cf_reduction;

typedef enum cf_layout { CF_LAYOUT_STACK, CF_LAYOUT_CONCAT } cf_layout;

typedef enum cf_op_flag {
  CF_OPF_REDUCES = 1u << 0, /* combines ranks' data with a reduction */
  CF_OPF_ROOTED = 1u << 1   /* one rank of the group is its root */
} cf_op_flag;

/* How `collfuse dot` draws an op (frontend/dot.c gives each its shape, style
 * and colours). */
typedef enum cf_look {
  CF_LOOK_ELLIPSE,
  CF_LOOK_DASHED_ELLIPSE,
  CF_LOOK_OCTAGON,
  CF_LOOK_ROUNDED_BOX,
  CF_LOOK_BLUE, /* collectives: a filled box, a cluster when fused */
  CF_LOOK_GREEN,
  CF_LOOK_ORANGE,
  CF_LOOK_PURPLE,
  CF_LOOK_YELLOW,
  CF_LOOK_RED,
  CF_LOOK_TEAL,
  CF_LOOK_PINK,
  CF_LOOK_COUNT
} cf_look;

typedef struct cf_op_info {
  const char *name;
  int min_in, max_in;   /* max_in -1: variadic */
  cf_category cat;
  cf_op coll;     /* the plain collective it performs, CF_OP_INVALID when none */
  uint32_t flags; /* mask of cf_op_flag */
  cf_look look;
  uint32_t required;    /* mask of 1u << cf_attr_id */
  uint32_t allowed;     /* includes required */
} cf_op_info;

typedef struct cf_attr_info {
  const char *name;
  cf_attr_kind kind;
} cf_attr_info;

typedef struct cf_op_alias {
  const char *name;
  cf_op op;
  int layout; /* the layout the alias implies, -1 when none */
} cf_op_alias;

extern const cf_op_info cf_op_table[CF_OP_COUNT];
extern const cf_attr_info cf_attr_table[CF_A_COUNT];
extern const cf_op_alias cf_op_aliases[]; /* ops.def's ALIAS rows */
extern const size_t cf_op_alias_count;

/* Look up an op by name or alias; *layout gets the alias's default layout
 * (-1 when none). Returns CF_OP_INVALID when unknown. */
cf_op cf_op_lookup(const char *name, int *layout);
cf_attr_id cf_attr_lookup(const char *name); /* CF_A_COUNT when unknown */
const char *cf_op_alias_name(size_t i);      /* i-th alias of ops.def, NULL past the end */
const char *cf_reduction_name(cf_reduction r);
/* The reduction that computes red on dt's values: bool's sum is or and its
 * prod is and (XLA's pred add/multiply), which on 0 and 1 are max and min;
 * every other dtype keeps red. Kernels, the reference and transports all
 * reduce through it. */
cf_reduction cf_dtype_reduction(cf_dtype dt, cf_reduction red);
int cf_reduction_parse(const char *s); /* -1 when unknown */
const char *cf_layout_name(cf_layout l);
int cf_layout_parse(const char *s); /* -1 when unknown */
bool cf_op_is_collective(cf_op op);  /* plain or fused collective, fused matmul */
/* ops.def's columns: the plain collective op performs (CF_OP_INVALID when
 * none), whether it reduces, whether it has a root. */
cf_op cf_op_coll(cf_op op);
bool cf_op_reduces(cf_op op);
bool cf_op_rooted(cf_op op);
/* The op a node stands for in reports and target checks: a fused collective
 * stands for the collective it buckets, any other op for itself. */
cf_op cf_op_unfused(cf_op op);
/* The fused collective that buckets the plain collective coll, CF_OP_INVALID
 * when none does. */
cf_op cf_op_fused(cf_op coll);

/* A list attribute's items (arena); n is -1 where an accessor finds none. */
typedef struct cf_strs {
  const char **v;
  int n;
} cf_strs;
typedef struct cf_ints {
  const int64_t *v;
  int n;
} cf_ints;

typedef struct cf_attr {
  cf_attr_id id;
  union {
    int64_t i;        /* INT, DTYPE, RED, LAYOUT */
    double f;         /* FLOAT */
    const char *s;    /* STR (arena) */
    cf_shape *shape;  /* SHAPE (arena) */
    cf_strs strs;     /* STRS */
    cf_ints ints;     /* INTS */
  } v;
} cf_attr;

typedef struct cf_ref {
  int node; /* index into graph->nodes */
  int port; /* output port of that node */
} cf_ref;

typedef struct cf_decl {
  bool has_dtype, has_shape;
  cf_value v;
} cf_decl;

typedef struct cf_node {
  const char *name;   /* unique within the graph */
  cf_op op;
  int line;           /* source line, 0 when unknown */
  int n_in;
  cf_ref *in;         /* operands, in order */
  int n_ctl;
  int *ctl;           /* control predecessors: nodes that run before this one
                         though no value flows (XLA's control-predecessors, a
                         GraphDef's ^inputs); every pass keeps the order */
  int n_out;
  cf_value *out;      /* output types, filled by inference */
  int n_decl;
  cf_decl *decl;      /* declared output types (dtype/shape attrs, <output>) */
  int n_attr;
  cf_attr *attr;      /* other attributes, at most one per id */
  int cap_attr;
  int region;         /* the body it belongs to: an index of graph->regions, 0 the
                         graph's own top level (cf_region) */
  bool dead;          /* marked for removal by a pass */
} cf_node;

/* A body that a control-flow op runs (a while's body or condition, a
 * branch of a conditional), read into the graph so that its collectives are
 * seen, counted and combined: its nodes carry its index as their region.
 * The body's nodes take the op's operands, and the op's node (an Opaque of
 * the op's result types) takes what the body ends in as operands too, so it
 * runs after the whole body and nothing outside moves across it. The executor does not run a graph
 * with regions (cf_graph_regions_refuse); combiners never group nodes of
 * two regions. Region 0 is the top level: regions[0] is unused. */
typedef struct cf_region {
  const char *op;    /* the control-flow op as its format spells it: `while`, `conditional`,
                        `stablehlo.while`, ... (arena) */
  const char *owner; /* the name of the node that stands for the op (arena) */
  const char *part;  /* which body: `body`, `condition`, `branch 0`, ... (arena) */
  int parent;        /* the region the op is in, 0 at the top level */
  int line;          /* the op's source line, 0 when unknown */
} cf_region;

/* A communicator group. It may be partitioned into n_parts disjoint parts
 * of n_ranks ranks each (XLA's replica_groups {{0,1},{2,3}}, the colours of
 * MPI_Comm_split): every part is one communicator, and a rank runs a
 * collective of the group with the part that holds it. */
typedef struct cf_group {
  const char *name;
  int n_ranks;  /* ranks in one part: the communicator size (rank_size) */
  int n_parts;  /* >= 1; 1 for a plain rank list */
  int *ranks;   /* n_parts * n_ranks world ranks, part after part */
  int line;
} cf_group;

struct cf_graph {
  cf_context *ctx;
  cf_arena arena;
  const char *name;     /* graph name */
  const char *file;     /* source file for messages ("<memory>" when none) */
  int64_t world_size;   /* 0 when not declared */
  int version;
  cf_node *nodes;
  int n_nodes, cap_nodes;
  cf_group *groups;
  int n_groups, cap_groups;
  int *index;           /* open-addressed hash: name -> node index + 1 */
  int index_cap;
  int *group_index; /* the same for group names -> group index + 1 */
  int group_index_cap;
  int *topo;            /* topological order after verification (arena) */
  const char *fingerprint; /* of the collective sequence, when compiled (arena) */
  int node_limit;       /* CF_MAX_NODES; a pass may exceed it while rewriting */
  uint64_t generation;  /* bumped by every change made through the public API; an
                           executable made at one generation refuses to run at another */
  int holders;          /* executables holding the graph (cf_graph_hold) */
  bool released;        /* cf_graph_release was called while holders > 0 */
  struct cf_opaque_op *opaque; /* foreign ops a reader imported as Opaque, by */
  int n_opaque;                /* first line (cf_graph_note_opaque; arena) */
  struct cf_dropped *dropped;  /* foreign nodes a reader left out, newest first (arena) */
  cf_region *regions;          /* bodies of control-flow ops, [0] unused (cf_region; malloc'd) */
  int n_regions, cap_regions;  /* n_regions 0 or 1: none */
};

#define CF_WORLD_GROUP "hccl_world_group"

cf_status cf_graph_new(cf_context *ctx, const char *file, cf_graph **out);
/* The caller's release of g (cf_graph_destroy); NULL is a no-op. An
 * executable's hold on its graph: cf_graph_release of a held graph only
 * marks it released, and the last cf_graph_unhold frees it. */
void cf_graph_release(cf_graph *g);
void cf_graph_hold(cf_graph *g);
void cf_graph_unhold(cf_graph *g);
/* A new region of g (strings copied), its index (>= 1) in *id. */
cf_status cf_graph_add_region(cf_graph *g, const char *op, const char *owner, const char *part,
                              int parent, int line, int *id);
/* "while 'w' body": region id (> 0) of g as messages name it, into buf;
 * returns buf. */
const char *cf_region_text(const cf_graph *g, int id, char *buf, size_t len);
/* CF_OK when no node of g is in a region, else an error naming the first
 * top-level op with one and its line: its bodies are compiled but not run
 * (the executor runs a graph once, in dataflow order, and a loop or a
 * branch is not that). */
cf_status cf_graph_regions_refuse(const cf_graph *g);
/* Add a node (name copied); returns its index through *idx. Fails on a
 * duplicate name or the node limit. */
cf_status cf_graph_add_node(cf_graph *g, const char *name, cf_op op, int line, int *idx);
int cf_graph_find(const cf_graph *g, const char *name); /* -1 when absent */
cf_status cf_node_set_inputs(cf_graph *g, int node, int n, const cf_ref *refs);
/* Orders node after pred (a control edge; a repeat or pred == node is a
 * no-op). */
cf_status cf_node_add_control(cf_graph *g, int node, int pred);
/* A node's dependencies, operands then control predecessors: what every
 * order (the topological sort, the combiners' depths and reachability,
 * liveness) follows. */
static inline int cf_node_n_deps(const cf_node *n) { return n->n_in + n->n_ctl; }
static inline int cf_node_dep(const cf_node *n, int j) {
  return j < n->n_in ? n->in[j].node : n->ctl[j - n->n_in];
}
cf_status cf_node_set_attr(cf_graph *g, int node, const cf_attr *a); /* replaces */
const cf_attr *cf_node_attr(const cf_node *n, cf_attr_id id);
int64_t cf_node_int(const cf_node *n, cf_attr_id id, int64_t dflt);
const char *cf_node_str(const cf_node *n, cf_attr_id id, const char *dflt);
/* A list attribute's items, n = -1 when unset. */
cf_strs cf_node_strs(const cf_node *n, cf_attr_id id);
cf_ints cf_node_ints(const cf_node *n, cf_attr_id id);
/* Set a list attribute to v[0..n), copied into the graph's arena. */
cf_status cf_node_set_strs(cf_graph *g, int node, cf_attr_id id, const char *const *v, int n);
cf_status cf_node_set_ints(cf_graph *g, int node, cf_attr_id id, const int64_t *v, int n);
/* An attribute's value as text, the form cf_node_parse_attr reads: a list
 * is comma-separated ("0,64,128"; an item's `,` is written `\,`, and a `\`
 * as `\\` where it would otherwise read as an escape). Writes at most len
 * bytes with the terminator (buf may be NULL when len is 0) and returns the
 * length of the whole text, as snprintf does. */
size_t cf_attr_text(const cf_attr *a, char *buf, size_t len);
/* Parse text for attribute id of node and set it; messages name file:line. */
cf_status cf_node_parse_attr(cf_graph *g, int node, cf_attr_id id, const char *text, int line);
cf_status cf_graph_add_group(cf_graph *g, const char *name, const int *ranks, int n, int line);
/* A partitioned group: part k is ranks[off[k]..off[k+1]) for k < n_parts
 * (off has n_parts + 1 entries, off[0] = 0). Every part must be non-empty
 * and of the same size (an error naming file, line and group otherwise);
 * disjointness and the world's bounds are the verifier's checks. */
cf_status cf_graph_add_group_parts(cf_graph *g, const char *name, const int *ranks,
                                   const int *off, int n_parts, int line);
const cf_group *cf_graph_group(const cf_graph *g, const char *name);
/* The part of gr that holds world rank `rank` (n_ranks ranks) and, through
 * *index when not NULL, rank's position in it; NULL when no part has it. */
const int *cf_group_part_of(const cf_group *gr, int rank, int *index);
/* Size of a group; the world group has world_size ranks. -1 when unknown. */
int64_t cf_graph_group_size(const cf_graph *g, const char *name);
/* Remove nodes with dead set, remapping operands. Operands of live nodes
 * must not point at dead nodes. */
cf_status cf_graph_compact(cf_graph *g);
/* Reorder the nodes: order lists n old indices, each once; nodes not listed
 * are dropped (operands of listed nodes must all be listed). */
cf_status cf_graph_permute(cf_graph *g, const int *order, int n);
/* Error naming the node: "FILE:LINE: error: node 'NAME': MSG". */
cf_status cf_node_error(const cf_graph *g, const cf_node *n, cf_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Reduction/group/etc. with defaults applied. */
cf_reduction cf_node_reduction(const cf_node *n);
cf_layout cf_node_layout(const cf_node *n);
const char *cf_node_group(const cf_node *n);
/* CollectivePermute's source_target_pairs, "{s,t},{s,t},..." (XLA's text;
 * outer braces and spaces allowed, no pairs is ""): target[s] = t and
 * source[t] = s for every pair, -1 elsewhere, over the group's n ranks
 * (arrays of n entries). False with why when the text does not parse, a
 * rank is outside 0..n-1, or a rank is a source or a target twice. */
bool cf_pairs_parse(const char *s, int n, int *target, int *source, char *why, size_t len);
int64_t cf_node_fusion(const cf_node *n);
/* The dimension member j of an AllGather or ReduceScatter (plain or fused)
 * gathers or scatters along: its entry of `dims` when the node lists one
 * per member (a bucket combined across dimensions), else `dim` (0). */
int64_t cf_node_member_dim(const cf_node *n, int j);

/* ================= verify.c: structure, topology, the whole check ================= */

/* One verification error and what it is about, for showing every error of
 * a graph at once (a drawing of a broken graph): the message as
 * cf_errmsg gives it, the node it names (-1: the graph or a group)
 * and, for a cycle, the cycle's nodes along its edges. */
typedef struct cf_diag {
  char *msg;  /* "FILE:LINE: error: node 'x': ..." (owned) */
  int node;   /* node index, -1 when none */
  int *cycle; /* cycle[k] -> cycle[k+1] -> ... -> cycle[0] (owned), else NULL */
  int n_cycle;
} cf_diag;
typedef struct cf_diags {
  cf_diag *v;
  int n, cap;
} cf_diags;
/* Append a copy of msg (and of cycle[0..n_cycle)). */
void cf_diags_add(cf_diags *d, const char *msg, int node, const int *cycle, int n_cycle);
void cf_diags_free(cf_diags *d); /* leaves d empty */
/* Verify g's structure and infer its types like cf_verify_structure +
 * cf_infer, but go on after an error: every node is checked, a cycle is
 * reported with its nodes, and nodes whose operands failed are not inferred
 * (their errors would only repeat). Every error goes to d, in the order
 * found; the first one is the context's message and its status is
 * returned. On success g is verified and inferred; on failure g->topo is
 * NULL. */
cf_status cf_verify_collect(cf_graph *g, cf_diags *d);

/* Structural checks (arity, attributes allowed/required and their ranges,
 * refs, ports, groups) and a topological order in g->topo; a cycle is
 * reported with the names of the nodes on it. */
cf_status cf_verify_structure(cf_graph *g);
/* Number of output ports a node has, from its op and operands. */
int cf_node_n_outputs(const cf_node *n);
/* Size g's world to the job's ranks (`run --ranks`, mpirun's processes, the
 * API's "ranks" option), which job names for messages ("--ranks 2"). A graph
 * that declares world_size W and verifies at W but not at ranks is refused
 * with what is wrong ("the graph is for 4 ranks (world_size=4) and the job has
 * 2 (--ranks 2); run it with 4 ranks"), not with the line the smaller world
 * breaks; other errors pass through. Verifies structure and types. */
cf_status cf_graph_size_world(cf_graph *g, int ranks, const char *job);
/* The check of a freshly read or rewritten graph: structure, topology and
 * inferred types, and a compiled graph's fingerprint against its
 * collectives (the readers only parse; cf_frontend_parse and
 * cf_frontend_load end with this). */
cf_status cf_verify_graph(cf_graph *g);
/* cf_verify_graph, then target profile `target`'s limits (NULL: the
 * default profile; an unknown name is CF_ERR_USAGE with the closest one):
 * the full verification of the public cf_graph_verify and cf_compile. */
cf_status cf_verify_for_target(cf_graph *g, const char *target);

/* ================= infer.c: shape and dtype inference ================= */

/* Infers every node's outputs in topological order, checks the op rules and
 * the declared dtype/shape. Needs cf_verify_structure first. */
cf_status cf_infer(cf_graph *g);
/* Infer and check one node whose operands are already inferred (passes use
 * it to try a node before they commit to it). */
cf_status cf_infer_node(cf_graph *g, cf_node *n);

/* ================= target.c: target profiles ================= */

typedef struct cf_target cf_target;
const cf_target *cf_target_find(const char *name); /* NULL when unknown */
const char *cf_target_at(size_t i);                /* profile i's name, NULL past the last */
/* "unknown target 'NAME'" and the closest profile, else the list of them,
 * into buf; returns buf. */
const char *cf_target_unknown(const char *name, char *buf, size_t len);
const char *cf_target_profile_name(const cf_target *t);
/* Check every node against the target's limits. Needs inferred types. */
cf_status cf_target_check(const cf_graph *g, const cf_target *t);
/* The per-node limits alone (cf_target_check adds the graph-wide ones). */
cf_status cf_target_check_node(const cf_graph *g, const cf_node *n, const cf_target *t);
/* Whether the target runs every fused matmul op in comm_mode ai_cpu on one
 * communicator (Atlas A2); cf_target_check enforces it. */
bool cf_target_one_mc2_group(const cf_target *t);
/* A fused matmul op's communication mode, with the default applied. */
const char *cf_node_comm_mode(const cf_node *n);

/* ================= stats.c: summaries ================= */

typedef struct cf_graph_stats {
  int nodes;
  int collectives;                /* plain + fused collectives + fused matmul */
  int by_op[CF_OP_COUNT];
  int64_t comm_bytes;             /* bytes of every collective's full tensor */
} cf_graph_stats;

void cf_graph_stats_compute(const cf_graph *g, cf_graph_stats *st);

/* One foreign op type a reader (HLO, pbtxt: not the native formats, where
 * Opaque is written on purpose) imported as Opaque. */
typedef struct cf_opaque_op {
  const char *type;    /* the Opaque nodes' type attribute: the foreign op */
  int count;           /* its nodes */
  int line;            /* the first one's source line (0 when unknown) */
  const char *first;   /* the first one's name */
  const char *suggest; /* a collective's spelling the type is a typo of, or NULL */
  bool dropped;        /* nodes the reader left out (nothing uses them and their
                          types are unknown: cf_graph_note_dropped), not imported */
} cf_opaque_op;
/* A foreign node a reader left out of g (nothing uses it and its output
 * types are unknown), so that it is reported with the Opaque ones, never
 * lost without a word: its op type, name and line, copied into g's arena. */
cf_status cf_graph_note_dropped(cf_graph *g, const char *type, const char *name, int line);
/* Record every Opaque node of g in g->opaque, one entry per type in order
 * of first line, and the nodes cf_graph_note_dropped noted (entries of
 * their own): the readers of foreign formats call it on what they read. */
cf_status cf_graph_note_opaque(cf_graph *g);
/* "N nodes of foreign op 'T' imported as Opaque (first 'NAME')[; did you
 * mean 'S'?]" into buf; returns buf. */
const char *cf_opaque_text(const cf_opaque_op *o, char *buf, size_t len);
/* CF_OK when no foreign op became Opaque, else an error naming the first
 * ("... (first 'NAME') and N more foreign ops[; did you mean 'S'?]"): for
 * callers that refuse them (--strict). */
cf_status cf_graph_refuse_opaque(const cf_graph *g);
/* Fingerprint of the collective sequence in execution order (kind, group,
 * dtype, reduction, bytes): 16 hex digits into buf[17]. Needs g->topo and
 * inferred types. Ranks compare it before they communicate. */
void cf_graph_fingerprint(const cf_graph *g, char buf[17]);
/* Compute and store the fingerprint in the graph (written by the XML writer,
 * checked when the graph is read back). */
cf_status cf_graph_seal(cf_graph *g);
/* Bytes a collective node moves: the size of the full (unscattered /
 * gathered) tensor, summed over ports. */
int64_t cf_node_comm_bytes(const cf_graph *g, const cf_node *n);

/* Shard (ir/shard.c): check n against its operand's global shape and give
 * the block's shape; with rank >= 0 also where rank's block starts
 * (origin[d] per dim). Errors name the node. */
cf_status cf_shard_block(const cf_graph *g, const cf_node *n, const cf_shape *global, int rank,
                         cf_shape *local, int64_t *origin);
/* Copy the block of local's shape at origin out of the row-major tensor src
 * of shape global (elements of esize bytes) into dst, row-major. */
void cf_copy_block(const void *src, const cf_shape *global, const int64_t *origin,
                   const cf_shape *local, size_t esize, void *dst);

/* ================= suggest.c: "did you mean" ================= */

/* Edit distance (Damerau-Levenshtein, case-insensitive) of a and b. */
int cf_edit_distance(const char *a, const char *b);
/* The closest of the candidates fed to it, if close enough to be a typo of
 * word: init with the word, add every candidate of a table, read best. */
typedef struct cf_suggest {
  const char *word; /* what the user typed */
  const char *best; /* the closest candidate so far, NULL when none is close */
  int dist;         /* best's distance (the limit + 1 before any) */
} cf_suggest;
void cf_suggest_init(cf_suggest *s, const char *word);
void cf_suggest_add(cf_suggest *s, const char *candidate);
/* "; did you mean 'BEST'?", or "" when best is NULL, into buf; returns buf. */
const char *cf_did_you_mean(const char *best, char *buf, size_t len);
/* The closest op (name or alias), dtype, reduction or target profile; NULL
 * when none is close. */
const char *cf_op_suggest(const char *name);
const char *cf_dtype_suggest(const char *name);
const char *cf_reduction_suggest(const char *name);
const char *cf_target_suggest(const char *name);
/* The collective spelling (IR name, ops.def alias, HLO opcode) a foreign op
 * name is a typo of; NULL when none, when the name is one of them up to case
 * (HLO's reduce is not the Reduce collective) or extends one (all-reduce-done). */
const char *cf_collective_suggest(const char *name);

#endif /* COLLFUSE_IR_H */
