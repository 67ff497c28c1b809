/* codegen.h - reduction kernels generated with the LLVM C API (one header for
 * the codegen/ module; the only module that includes LLVM).
 *
 * Two parts. keys.c, load.c, objcache.c and elfload.c are plain C in
 * libcollfuse: kernel keys, the kernels a graph needs, the on-disk kernel
 * cache and a loader that links its objects without LLVM, and the entry
 * points below that generate code, which load the rest, the LLVM module
 * collfuse-codegen.so (every other file here, linked to libLLVM), with
 * dlopen on first use: a kernel already in the disk cache needs no module. So a process that
 * never generates or links a kernel (`collfuse compile`, `check`, `dot`, the
 * Python package importing) never maps libLLVM, whose relocation alone costs
 * a start-up ten times a bare one's.
 *
 * Every kernel is described by a cf_kernel_key and has one of four C ABIs.
 * All pointers are noalias; n counts elements, not bytes.
 *
 *   CF_K_NARY   void k(void *dst, const void *const *src, int64_t n, double div)
 *               dst[i] = op(src[0][i], ..., src[K-1][i]) for K = arity (2..8);
 *               mean: the sum divided by div (floats multiply by 1/div once,
 *               integers sum exactly in int64 and divide, truncating to zero)
 *               A key with outs (always a stream key's) takes its
 *               destinations as an array instead: void k(void *const *dst,
 *               ...), and writes the same result to dst[0..outs), reading
 *               each source once.
 *   CF_K_ACC    void k(void *dst, const void *src, int64_t n)
 *               dst[i] = op(dst[i], src[i]); mean accumulates as sum
 *   CF_K_SCALE  void k(void *dst, int64_t n, double div)
 *               dst[i] = dst[i] / div in place (mean's final step; integers
 *               truncate toward zero)
 *   CF_K_QUANT  void k(void *dst, const int32_t *acc, const float *x1_scale,
 *                      const float *x2_scale, int64_t m, int64_t n)
 *               dst[i*n+j] = (dtype)(acc[i*n+j] * x1_scale[i] * x2_scale[j]),
 *               dtype bfloat16 or float16 (QuantMatMul's epilogue)
 *
 * Semantics (documented in docs/kernels.md): integer sums and products wrap
 * (two's complement, like MPI and NCCL); float max/min propagate NaN;
 * float16/bfloat16 are computed in float32 and rounded to nearest even on
 * the way back, NaN stays NaN.
 */
#ifndef COLLFUSE_CODEGEN_H
#define COLLFUSE_CODEGEN_H

#include "../ir/ir.h"

typedef enum cf_kernel_kind {
  CF_K_NARY,  /* dst = op(src0..srcK-1) */
  CF_K_ACC,   /* dst = op(dst, src) */
  CF_K_SCALE, /* dst /= div */
  CF_K_QUANT  /* int32 * x1_scale * x2_scale -> bf16/f16 */
} cf_kernel_kind;

#define CF_MAX_ARITY 8

/* Bytes ahead at which streaming code (a stream key's vector loop, the CPU
 * device's copy_stream) prefetches its sources: the executor's segments
 * (algo_allreduce.c) restart the hardware's stream detection every few KiB
 * per source, and while a pass writes with streaming stores nothing else
 * asks memory for the next lines. rsag at 256 MiB, 4 alternating runs:
 * 0.96x the time without on two ranks, 0.92x on four (1 KiB gave less, 4-8
 * KiB no more). */
#define CF_STREAM_PREFETCH 2048

typedef struct cf_kernel_key {
  cf_kernel_kind kind;
  cf_dtype dtype;   /* element type; CF_K_QUANT: the output type */
  cf_reduction red; /* CF_K_NARY, CF_K_ACC */
  int arity;        /* CF_K_NARY: 2..CF_MAX_ARITY; others 0 */
  bool stream;      /* CF_K_NARY: non-temporal (streaming) stores, for a destination
                       that is not read again soon; the executor chooses it by the
                       size of the data (cf_streams); others false */
  int outs;         /* CF_K_NARY: 0, one destination (`void *dst`); 1..CF_MAX_ARITY,
                       that many, passed as an array, each receiving the result
                       from one read of the sources (one AllReduce chunk into
                       every rank's output); a stream key needs 1 or more;
                       others 0 */
} cf_kernel_key;

typedef void (*cf_kernel_nary_fn)(void *dst, const void *const *src, int64_t n, double div);
typedef void (*cf_kernel_nary_to_fn)(void *const *dst, const void *const *src, int64_t n,
                                     double div);
typedef void (*cf_kernel_acc_fn)(void *dst, const void *src, int64_t n);
typedef void (*cf_kernel_scale_fn)(void *dst, int64_t n, double div);
typedef void (*cf_kernel_quant_fn)(void *dst, const int32_t *acc, const float *x1_scale,
                                   const float *x2_scale, int64_t m, int64_t n);

/* ---- keys.c: kernel keys, and the kernels a graph needs ---- */

/* "cf_nary_sum_float32_4", "cf_nary_sum_float32_4_x4" (to 4 destinations),
 * "cf_nary_sum_float32_4_nt4" (a stream key to 4 destinations),
 * "cf_acc_max_bfloat16", "cf_scale_int8", "cf_quant_bfloat16". */
char *cf_kernel_name(const cf_kernel_key *key, char *buf, size_t len);
/* false with a reason when no such kernel exists (arity out of range, ...). */
bool cf_kernel_key_valid(const cf_kernel_key *key, char *why, size_t len);
/* The kernels graph g needs (reducing collectives: NARY at their group's
 * arity capped at CF_MAX_ARITY, ACC, SCALE for mean; QUANT for quantized
 * matmuls), without duplicates, in a stable order. *keys is malloc'd. */
cf_status cf_codegen_graph_kernels(const cf_graph *g, cf_kernel_key **keys, int *n);

/* ---- load.c: the entry points that generate code (in the LLVM module) ---- */

/* A code generation target: the host (vector width from its CPU features)
 * or nvptx64-nvidia-cuda (PTX kernels with a grid-stride loop). */
typedef enum cf_target_arch { CF_ARCH_HOST, CF_ARCH_NVPTX } cf_target_arch;

typedef struct cf_codegen_target {
  cf_target_arch arch;
  char triple[128];
  char cpu[64];          /* "generic" is possible for the host */
  char features[4096];   /* LLVMGetHostCPUFeatures() or "+ptx80" */
  int vector_bits;       /* widest vector register: 128, 256, 512 */
} cf_codegen_target;

/* Each entry point loads the module once per context (the loaded table is
 * kept in ctx, and a context that borrows another's JIT borrows it too);
 * when the module cannot be found or loaded, the call fails with
 * CF_ERR_UNSUPPORTED and a message naming every place looked at. */

/* kernels.c: the host's target, NVPTX's for sm ("sm_NN"; NULL: sm_90). */
cf_status cf_codegen_target_host(cf_context *ctx, cf_codegen_target *t);
cf_status cf_codegen_target_nvptx(cf_context *ctx, const char *sm, cf_codegen_target *t);

/* jit.c: ORC LLJIT, kernels cached in the context. */

/* The kernel for key, compiled on first use for the host and cached in ctx
 * (and, unless COLLFUSE_CACHE=off, as an object file in the XDG cache dir,
 * so a second process compiles nothing). *fn stays valid until ctx is
 * destroyed. *compile_ms (may be NULL) receives the time spent: 0 when the
 * kernel came from a cache. */
cf_status cf_codegen_kernel(cf_context *ctx, const cf_kernel_key *key, void **fn,
                            double *compile_ms);

/* aot.c: ahead-of-time emitters. */
typedef enum cf_emit_format { CF_EMIT_LLVM, CF_EMIT_ASM, CF_EMIT_OBJ, CF_EMIT_PTX } cf_emit_format;

/* Write keys[0..n) as one module in the given format to path (CF_EMIT_PTX
 * targets nvptx64-nvidia-cuda sm_90, the others the host). */
cf_status cf_codegen_emit(cf_context *ctx, const cf_kernel_key *keys, int n, cf_emit_format fmt,
                          const char *path);
/* keys[0..n) as one PTX module (nvptx64-nvidia-cuda, PTX ISA 8.0) for sm
 * ("sm_80" or "sm_90"; NULL: sm_90), in memory: *ptx is a malloc'd,
 * NUL-terminated text the caller frees (what cuModuleLoadData takes). */
cf_status cf_codegen_ptx(cf_context *ctx, const cf_kernel_key *keys, int n, const char *sm, char **ptx);

/* jit.c: compile ctx's kernels for t, a host target with some of the
 * host's features taken away (tests of the paths that other CPUs take:
 * "-avx512bf16", "-avx512dq"), instead of the host's own. Only before ctx
 * compiles its first kernel (CF_ERR_USAGE after). t must run on the host. */
cf_status cf_codegen_use_target(cf_context *ctx, const cf_codegen_target *t);

/* ---- objcache.c: the on-disk kernel cache (plain C, in libcollfuse; the
 * module uses it too). Compiled kernels as files "NAME-TARGETHASH.o"
 * holding a header (format, LLVM version, key, target hash, payload size,
 * HMAC-SHA256 under the user's key) and the object file. Best effort: failures are logged,
 * never fatal. A cache directory, entry or key that someone else could
 * have written turns the cache off (one CF_LOG_WARN). */
typedef struct cf_objcache {
  bool enabled;           /* false: COLLFUSE_CACHE=off, no directory, or not trusted */
  int dirfd;              /* the directory, opened O_NOFOLLOW and checked; -1 when off */
  unsigned char key[32];  /* the per-user secret (DIR/key) entries are authenticated with */
  char dir[4096];         /* $COLLFUSE_CACHE, $XDG_CACHE_HOME/collfuse or ~/.cache/collfuse */
  bool quiet;             /* log nothing of entries or trust (load.c's reader: the module,
                             which it falls back to, logs what it finds once) */
} cf_objcache;

/* Read the environment once (per JIT state), create the directory if it is
 * missing (mode 0700), open and check it, and read or create its key; when
 * any of that fails, one warning and the cache stays off. */
void cf_objcache_open(cf_context *ctx, cf_objcache *oc);
/* The same, quiet: neither a distrusted cache nor a stale entry is logged. */
void cf_objcache_open_as(cf_context *ctx, cf_objcache *oc, bool quiet);
void cf_objcache_close(cf_objcache *oc);
/* The object stored for key and t: true with a malloc'd *data of *size
 * bytes; false when absent or stale (bad header, MAC, LLVM version, key,
 * target or size; logged at CF_LOG_INFO). An entry that is not a regular
 * file of ours turns the cache off. */
bool cf_objcache_load(cf_context *ctx, cf_objcache *oc, const cf_codegen_target *t,
                      const cf_kernel_key *key, void **data, size_t *size);
/* Store atomically (temporary file + rename); false when it could not
 * (logged at CF_LOG_WARN). */
bool cf_objcache_store(cf_context *ctx, const cf_objcache *oc, const cf_codegen_target *t,
                       const cf_kernel_key *key, const void *data, size_t size);
/* cf_objcache_load by the target's hash (what a host record gives). */
bool cf_objcache_load_hash(cf_context *ctx, cf_objcache *oc, uint64_t th, const cf_kernel_key *key,
                           void **data, size_t *size);
/* The host record (objcache.c, "the host's target record"): what this
 * CPU and kernel report, hashed with the generator and LLVM version (false
 * where the host has no such key: not x86-64); the module stores t as the
 * host's target under it, and libcollfuse reads back its target hash
 * (false when there is none or it does not verify, logged at INFO). */
bool cf_objcache_host_key(uint64_t *out);
bool cf_objcache_store_host(cf_context *ctx, const cf_objcache *oc, const cf_codegen_target *t);
bool cf_objcache_load_host(cf_context *ctx, cf_objcache *oc, uint64_t *th);

/* elfload.c: link one cached kernel object without LLVM: an ELF64 x86-64
 * relocatable whose allocated sections are read-only code and data,
 * relocated by R_X86_64_64/PC32/PLT32 against its own sections only. True
 * with *fn the global function name and img the mapping (read+execute,
 * cf_elf_unmap frees it); false with why set for anything else. */
typedef struct cf_elf_image {
  void *base;
  size_t len;
} cf_elf_image;
bool cf_elf_link(const void *obj, size_t size, const char *name, cf_elf_image *img, void **fn,
                 char *why, size_t len);
void cf_elf_unmap(cf_elf_image *img);

/* ---- plugin.c: what the LLVM module gives load.c ----
 * The module exports one symbol, the table CF_CODEGEN_OPS_SYMBOL, and keeps
 * everything else local (its own copy of ir/ and keys.c included). The
 * table's abi is a hash of the headers whose structs cross between the two
 * (cf_context, cf_graph, the key and the target), computed when configuring;
 * load.c refuses a module from another build. Its copy of ir/ has globals
 * of its own: per-thread state the module needs from the caller (the trace
 * lane, cf_trace_here) crosses as an argument, never through the copy. */
#define CF_CODEGEN_MODULE "collfuse-codegen.so"
#define CF_CODEGEN_OPS_SYMBOL "cf_codegen_llvm_ops"

typedef struct cf_codegen_ops {
  uint64_t abi; /* CF_CODEGEN_ABI of the build that made the module */
  cf_status (*target_host)(cf_context *ctx, cf_codegen_target *t);
  cf_status (*target_nvptx)(cf_context *ctx, const char *sm, cf_codegen_target *t);
  /* lane: the caller's trace lane (cf_trace_here) or NULL; passed, as the
   * module's copy of ir/ has a cf_trace_here of its own */
  cf_status (*kernel)(cf_context *ctx, const cf_kernel_key *key, void **fn, double *compile_ms,
                      cf_trace_lane *lane);
  cf_status (*emit)(cf_context *ctx, const cf_kernel_key *keys, int n, cf_emit_format fmt,
                    const char *path);
  cf_status (*ptx)(cf_context *ctx, const cf_kernel_key *keys, int n, const char *sm, char **ptx);
  cf_status (*use_target)(cf_context *ctx, const cf_codegen_target *t);
} cf_codegen_ops;

/* ---- internal: codegen/ and its tests only (they see LLVM types) ---- */
#ifdef CF_CODEGEN_INTERNAL
#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>

/* kernels.c */

/* Whether host target t lists "+name" among its features ("avx512dq");
 * false for NVPTX. */
bool cf_target_has(const cf_codegen_target *t, const char *name);
/* Process-wide LLVM target registration (native + NVPTX), done once. */
void cf_codegen_init_llvm(void);
/* A target machine for t at -O3, PIC; the caller disposes it. */
cf_status cf_codegen_machine(cf_context *ctx, const cf_codegen_target *t,
                             LLVMTargetMachineRef *out);

/* kernels_ir.c: the IR of one kernel, added to mod (whose data layout and
 * triple are set); key must be valid. Returns the function. */
LLVMValueRef cf_kernel_emit_ir(LLVMModuleRef mod, const cf_codegen_target *t,
                               const cf_kernel_key *key);
/* Lanes of the explicit vector loop of key's kernel on t (1 on NVPTX,
 * where every thread handles one element per grid-stride step). */
int cf_kernel_lanes(const cf_codegen_target *t, const cf_kernel_key *key);

/* module.c: build keys[0..n) into a new module in lc for target t, optimized with
 * default<O3> (loop+SLP vectorization on). *out is owned by the caller
 * (LLVMDisposeModule, before lc goes). */
cf_status cf_codegen_module(cf_context *ctx, const cf_codegen_target *t, const cf_kernel_key *keys,
                            int n, LLVMContextRef lc, LLVMModuleRef *out);
/* The same with a machine the caller already has for t (the JIT keeps one). */
cf_status cf_codegen_module_tm(cf_context *ctx, const cf_codegen_target *t, LLVMTargetMachineRef tm,
                               const cf_kernel_key *keys, int n, LLVMContextRef lc,
                               LLVMModuleRef *out);

/* The module's implementations of the table's entries (plugin.c);
 * everything outside the module calls the cf_codegen_* names above. */
cf_status cf_llvm_target_host(cf_context *ctx, cf_codegen_target *t);
cf_status cf_llvm_target_nvptx(cf_context *ctx, const char *sm, cf_codegen_target *t);
cf_status cf_llvm_kernel(cf_context *ctx, const cf_kernel_key *key, void **fn, double *compile_ms,
                         cf_trace_lane *lane);
cf_status cf_llvm_emit(cf_context *ctx, const cf_kernel_key *keys, int n, cf_emit_format fmt,
                       const char *path);
cf_status cf_llvm_ptx(cf_context *ctx, const cf_kernel_key *keys, int n, const char *sm, char **ptx);
cf_status cf_llvm_use_target(cf_context *ctx, const cf_codegen_target *t);
extern const cf_codegen_ops cf_codegen_llvm_ops;

#endif /* CF_CODEGEN_INTERNAL */

#endif /* COLLFUSE_CODEGEN_H */
