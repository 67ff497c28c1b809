/* aot.c - the kernels a graph needs, and ahead-of-time emitters for them
 * (`collfuse compile --emit-llvm/--emit-asm/--emit-obj/--emit-ptx`).
 *
 * Which kernels a reducing collective needs. Every rank ends up combining
 * G contributions (G = the size of its group); the executor does that either
 * in one pass over all the sources it holds, or step by step as chunks
 * arrive (ring and pipelined algorithms), and folds more than CF_MAX_ARITY
 * sources as one 8-ary pass followed by accumulating steps. So for element
 * type dt and reduction r, with G >= 2:
 *
 *   NARY(dt, r, min(G, 8))  the one-pass reduction; when G > 8 and r is mean
 *                           the fold cannot divide yet, so it is NARY(dt, sum, 8)
 *   ACC(dt, r)              the accumulating step (mean accumulates as sum)
 *   SCALE(dt)               mean's final divide, after accumulating steps
 *
 * Reducing collectives are AllReduce, ReduceScatter, Reduce, their Fused*
 * forms, MatmulReduceScatter and MatmulAllReduce (always sum, over the
 * matmul's output type). A quantized MatmulReduceScatter (int8 operands) and
 * a QuantMatMul also need QUANT(output type), the int32 -> bf16/f16
 * epilogue; the quantized MatmulReduceScatter then reduce-scatters that
 * bf16/f16 output. AllGather, Broadcast and AllGatherMatmul combine nothing
 * and a group of one rank has nothing to combine. The list is sorted by
 * kind, dtype, reduction and arity, so a graph and its fused form, which
 * only groups collectives of equal dtype, reduction and group, need the
 * same list.
 *
 * cf_codegen_emit builds one module for a list with cf_codegen_module (O3)
 * and writes it as LLVM IR text, host assembly, a host ELF object, or PTX
 * for sm_90, from a memory buffer through cf_write_file (a temporary beside
 * PATH renamed over it; a device or FIFO written in place).
 * cf_codegen_ptx is the in-memory form for the CUDA backend, which loads
 * the text with cuModuleLoadData: PTX for sm_80 or sm_90.
 */
#define CF_CODEGEN_INTERNAL
#include "codegen.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------- the kernels a graph needs ---------------- */

typedef struct key_list {
  cf_kernel_key *v;
  int n, cap;
} key_list;

/* Add a key unless the list has it (a graph needs a few dozen at most). */
static bool push(key_list *l, cf_kernel_kind kind, cf_dtype dt, cf_reduction red, int arity) {
  for (int i = 0; i < l->n; i++)
    if (l->v[i].kind == kind && l->v[i].dtype == dt && l->v[i].red == red && l->v[i].arity == arity)
      return true;
  if (l->n == l->cap) {
    int cap = l->cap ? l->cap * 2 : 16;
    cf_kernel_key *v = realloc(l->v, (size_t)cap * sizeof *v);
    if (!v) return false;
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = (cf_kernel_key){.kind = kind, .dtype = dt, .red = red, .arity = arity};
  return true;
}

/* Ranks a collective combines: world_size of a fused matmul, else
 * rank_size, else the size of its group. */
static int64_t group_size(const cf_graph *g, const cf_node *n) {
  const cf_attr *a = cf_node_attr(n, CF_A_WORLD_SIZE);
  if (a) return a->v.i;
  if ((a = cf_node_attr(n, CF_A_RANK_SIZE))) return a->v.i;
  return cf_graph_group_size(g, cf_node_group(n));
}

static cf_dtype operand_dtype(const cf_graph *g, const cf_node *n, int j) {
  const cf_node *src = &g->nodes[n->in[j].node];
  if (!src->out || n->in[j].port >= src->n_out) return CF_DT_INVALID;
  return src->out[n->in[j].port].dtype;
}

/* The reduction keys of one collective over G ranks (module comment). */
static bool push_reduce(key_list *l, cf_dtype dt, cf_reduction r, int64_t G) {
  if (G < 2) return true;
  cf_reduction fold = r == CF_RED_MEAN ? CF_RED_SUM : r;
  int arity = G < CF_MAX_ARITY ? (int)G : CF_MAX_ARITY;
  return push(l, CF_K_NARY, dt, G <= CF_MAX_ARITY ? r : fold, arity) &&
         push(l, CF_K_ACC, dt, fold, 0) &&
         (r != CF_RED_MEAN || push(l, CF_K_SCALE, dt, CF_RED_SUM, 0));
}

static int key_cmp(const void *pa, const void *pb) {
  const cf_kernel_key *a = pa, *b = pb;
  if (a->kind != b->kind) return (int)a->kind - (int)b->kind;
  if (a->dtype != b->dtype) return (int)a->dtype - (int)b->dtype;
  if (a->red != b->red) return (int)a->red - (int)b->red;
  return a->arity - b->arity;
}

cf_status cf_codegen_graph_kernels(const cf_graph *g, cf_kernel_key **keys, int *n) {
  if (keys) *keys = NULL;
  if (n) *n = 0;
  if (!g || !keys || !n) return CF_ERR_USAGE;
  key_list l = {0};
  cf_status st = CF_OK;
  int from = 0; /* keys before l.v[from] are checked */
  for (int i = 0; i < g->n_nodes && !st; i++) {
    const cf_node *nd = &g->nodes[i];
    if (nd->dead) continue;
    /* a reducing op reduces with a kernel (a fused matmul op always sums,
     * verified); quantized matmuls (QuantMatMul, a reducing fused matmul op
     * on int8) dequantize with one */
    bool fused_mm = cf_op_table[nd->op].cat == CF_CAT_FUSED_MATMUL;
    bool reducing = cf_op_reduces(nd->op), quant = nd->op == CF_OP_QUANTMATMUL;
    if (reducing && fused_mm) quant = nd->n_in > 0 && operand_dtype(g, nd, 0) == CF_DT_INT8;
    if (!reducing && !quant) continue;
    cf_reduction red = reducing && !fused_mm ? cf_node_reduction(nd) : CF_RED_SUM;
    if (nd->n_out < 1 || !nd->out || nd->out[0].dtype == CF_DT_INVALID) {
      st = cf_node_error(g, nd, CF_ERR_USAGE, "no inferred output type: verify the graph first");
      break;
    }
    cf_dtype dt = nd->out[0].dtype;
    bool ok = (!quant || push(&l, CF_K_QUANT, dt, CF_RED_SUM, 0)) &&
              (!reducing || push_reduce(&l, dt, red, group_size(g, nd)));
    if (!ok) {
      st = cf_error(g->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
      break;
    }
    for (; from < l.n; from++) {
      char why[160], name[96];
      if (!cf_kernel_key_valid(&l.v[from], why, sizeof why)) {
        st = cf_node_error(g, nd, CF_ERR_UNSUPPORTED, "no kernel %s: %s",
                           cf_kernel_name(&l.v[from], name, sizeof name), why);
        break;
      }
    }
  }
  if (st) {
    free(l.v);
    return st;
  }
  if (l.n == 0) {
    free(l.v);
    return CF_OK;
  }
  qsort(l.v, (size_t)l.n, sizeof *l.v, key_cmp);
  *keys = l.v;
  *n = l.n;
  return CF_OK;
}

/* ---------------- emitters ---------------- */

static const char *format_name(cf_emit_format fmt) {
  switch (fmt) {
  case CF_EMIT_LLVM: return "LLVM IR";
  case CF_EMIT_ASM: return "assembly";
  case CF_EMIT_OBJ: return "object file";
  case CF_EMIT_PTX: return "PTX";
  }
  return "?";
}

/* A module with no kernels that still names its target and data layout. */
static LLVMModuleRef empty_module(const cf_codegen_target *t, LLVMTargetMachineRef tm,
                                  LLVMContextRef lc) {
  LLVMModuleRef m = LLVMModuleCreateWithNameInContext("collfuse_kernels", lc);
  LLVMSetTarget(m, t->triple);
  LLVMTargetDataRef td = LLVMCreateTargetDataLayout(tm);
  char *layout = LLVMCopyStringRepOfTargetData(td);
  LLVMSetDataLayout(m, layout);
  LLVMDisposeMessage(layout);
  LLVMDisposeTargetData(td);
  return m;
}

/* keys[0..n) as one module for t, emitted in fmt into a fresh memory
 * buffer (*out, the caller disposes it; for CF_EMIT_LLVM a NUL-terminated
 * copy of the IR text). what names the destination in messages. */
static cf_status emit_buffer(cf_context *ctx, const cf_codegen_target *t, const cf_kernel_key *keys,
                             int n, cf_emit_format fmt, const char *what, LLVMMemoryBufferRef *out) {
  *out = NULL;
  LLVMContextRef lc = LLVMContextCreate();
  LLVMModuleRef m = NULL;
  LLVMTargetMachineRef tm = NULL;
  char *text = NULL, *err = NULL;
  cf_status st = cf_codegen_machine(ctx, t, &tm);
  if (st) goto done;
  if (n)
    st = cf_codegen_module_tm(ctx, t, tm, keys, n, lc, &m);
  else
    m = empty_module(t, tm, lc);
  if (st) goto done;
  if (LLVMVerifyModule(m, LLVMReturnStatusAction, &err)) {
    st = cf_error(ctx, CF_ERR_RUNTIME, what, 0, "internal error: invalid kernel module: %s", err);
    goto done;
  }
  LLVMDisposeMessage(err);
  err = NULL;
  if (fmt == CF_EMIT_LLVM) {
    text = LLVMPrintModuleToString(m);
    *out = LLVMCreateMemoryBufferWithMemoryRangeCopy(text, strlen(text) + 1, "collfuse_kernels.ll");
    goto done;
  }
  if (LLVMTargetMachineEmitToMemoryBuffer(
          tm, m, fmt == CF_EMIT_OBJ ? LLVMObjectFile : LLVMAssemblyFile, &err, out)) {
    *out = NULL;
    st = cf_error(ctx, CF_ERR_RUNTIME, what, 0, "cannot generate %s for %s: %s", format_name(fmt),
                  t->triple, err ? err : "unknown LLVM error");
  }
done:
  if (text) LLVMDisposeMessage(text);
  if (err) LLVMDisposeMessage(err);
  if (tm) LLVMDisposeTargetMachine(tm);
  if (m) LLVMDisposeModule(m);
  LLVMContextDispose(lc);
  return st;
}

static cf_status check_keys(cf_context *ctx, const cf_kernel_key *keys, int n, const char *what) {
  for (int i = 0; i < n; i++) {
    char why[160];
    if (!cf_kernel_key_valid(&keys[i], why, sizeof why))
      return cf_error(ctx, CF_ERR_USAGE, what, 0, "kernel %d: %s", i, why);
  }
  return CF_OK;
}

cf_status cf_codegen_emit(cf_context *ctx, const cf_kernel_key *keys, int n, cf_emit_format fmt,
                          const char *path) {
  if (!ctx) return CF_ERR_USAGE;
  if (!path || n < 0 || (n > 0 && !keys) || fmt < CF_EMIT_LLVM || fmt > CF_EMIT_PTX)
    return cf_error(ctx, CF_ERR_USAGE, NULL, 0, "cf_codegen_emit: bad arguments");
  cf_status st = check_keys(ctx, keys, n, path);
  if (st) return st;
  cf_codegen_init_llvm(); /* native and NVPTX targets, asm printers */
  cf_codegen_target t;
  st = fmt == CF_EMIT_PTX ? cf_codegen_target_nvptx(ctx, "sm_90", &t) : cf_codegen_target_host(ctx, &t);
  if (st) return st;
  LLVMMemoryBufferRef buf = NULL;
  if ((st = emit_buffer(ctx, &t, keys, n, fmt, path, &buf))) return st;
  size_t size = LLVMGetBufferSize(buf);
  if (fmt == CF_EMIT_LLVM && size) size--; /* the copy's terminating NUL */
  st = cf_write_file(ctx, path, LLVMGetBufferStart(buf), size);
  LLVMDisposeMemoryBuffer(buf);
  return st;
}

cf_status cf_codegen_ptx(cf_context *ctx, const cf_kernel_key *keys, int n, const char *sm, char **ptx) {
  if (ptx) *ptx = NULL;
  if (!ctx) return CF_ERR_USAGE;
  if (!ptx || n < 0 || (n > 0 && !keys))
    return cf_error(ctx, CF_ERR_USAGE, NULL, 0, "cf_codegen_ptx: bad arguments");
  if (sm && strcmp(sm, "sm_80") != 0 && strcmp(sm, "sm_90") != 0)
    return cf_error(ctx, CF_ERR_UNSUPPORTED, NULL, 0,
                    "cf_codegen_ptx: architecture '%s': collfuse generates PTX for sm_80 and sm_90", sm);
  cf_status st = check_keys(ctx, keys, n, NULL);
  if (st) return st;
  cf_codegen_target t;
  if ((st = cf_codegen_target_nvptx(ctx, sm ? sm : "sm_90", &t))) return st;
  LLVMMemoryBufferRef buf = NULL;
  if ((st = emit_buffer(ctx, &t, keys, n, CF_EMIT_PTX, NULL, &buf))) return st;
  size_t size = LLVMGetBufferSize(buf);
  char *text = malloc(size + 1);
  if (!text) {
    LLVMDisposeMemoryBuffer(buf);
    return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  }
  memcpy(text, LLVMGetBufferStart(buf), size);
  text[size] = '\0';
  LLVMDisposeMemoryBuffer(buf);
  *ptx = text;
  return CF_OK;
}
