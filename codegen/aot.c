/* aot.c - ahead-of-time emitters (`collfuse compile --emit-llvm/--emit-asm/
 * --emit-obj/--emit-ptx`) of the kernels keys.c lists for a graph.
 *
 * cf_llvm_emit builds one module for a list with cf_codegen_module (O3)
 * and writes it as LLVM IR text, host assembly, a host ELF object, or PTX
 * for sm_90, from a memory buffer through cf_write_file (a temporary beside
 * PATH renamed over it; a device or FIFO written in place).
 * cf_llvm_ptx is the in-memory form for the CUDA backend, which loads
 * the text with cuModuleLoadData: PTX for sm_80 or sm_90. Both are reached
 * through cf_codegen_emit and cf_codegen_ptx (load.c).
 */
#define CF_CODEGEN_INTERNAL
#include "codegen.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

cf_status cf_llvm_emit(cf_context *ctx, const cf_kernel_key *keys, int n, cf_emit_format fmt,
                          const char *path) {
  if (!ctx) return CF_ERR_USAGE;
  if (!path || n < 0 || (n > 0 && !keys) || fmt < CF_EMIT_LLVM || fmt > CF_EMIT_PTX)
    return cf_error(ctx, CF_ERR_USAGE, NULL, 0, "cf_codegen_emit: bad arguments");
  cf_status st = check_keys(ctx, keys, n, path);
  if (st) return st;
  cf_codegen_init_llvm(); /* native and NVPTX targets, asm printers */
  cf_codegen_target t;
  st = fmt == CF_EMIT_PTX ? cf_llvm_target_nvptx(ctx, "sm_90", &t) : cf_llvm_target_host(ctx, &t);
  if (st) return st;
  LLVMMemoryBufferRef buf = NULL;
  if ((st = emit_buffer(ctx, &t, keys, n, fmt, path, &buf))) return st;
  size_t size = LLVMGetBufferSize(buf);
  if (fmt == CF_EMIT_LLVM && size) size--; /* the copy's terminating NUL */
  st = cf_write_file(ctx, path, LLVMGetBufferStart(buf), size);
  LLVMDisposeMemoryBuffer(buf);
  return st;
}

cf_status cf_llvm_ptx(cf_context *ctx, const cf_kernel_key *keys, int n, const char *sm, char **ptx) {
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
  if ((st = cf_llvm_target_nvptx(ctx, sm ? sm : "sm_90", &t))) return st;
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
