/* module.c - modules of kernels: the IR of each key from kernels_ir.c,
 * verified, then optimized with default<O3> (loop and SLP vectorization on)
 * for a target machine of kernels.c. The JIT and the AOT emitters build
 * every module here.
 */
#define CF_CODEGEN_INTERNAL
#include "codegen.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Transforms/PassBuilder.h>

cf_status cf_codegen_module_tm(cf_context *ctx, const cf_codegen_target *t, LLVMTargetMachineRef tm,
                               const cf_kernel_key *keys, int n, LLVMContextRef lc,
                               LLVMModuleRef *out) {
  if (out) *out = NULL;
  if (!t || !tm || (!keys && n > 0) || n < 0 || !lc || !out)
    return cf_error(ctx, CF_ERR_USAGE, NULL, 0, "codegen: bad arguments to cf_codegen_module");
  char why[128], name[64];
  for (int i = 0; i < n; i++)
    if (!cf_kernel_key_valid(&keys[i], why, sizeof why))
      return cf_error(ctx, CF_ERR_USAGE, NULL, 0, "codegen: kernel %s: %s",
                      cf_kernel_name(&keys[i], name, sizeof name), why);
  LLVMModuleRef mod = LLVMModuleCreateWithNameInContext("collfuse_kernels", lc);
  LLVMSetTarget(mod, t->triple);
  LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(tm);
  LLVMSetModuleDataLayout(mod, dl);
  LLVMDisposeTargetData(dl);
  cf_status st = CF_OK;
  for (int i = 0; i < n; i++) {
    cf_kernel_name(&keys[i], name, sizeof name);
    if (LLVMGetNamedFunction(mod, name)) continue; /* a duplicate key */
    cf_kernel_emit_ir(mod, t, &keys[i]);
  }
  char *msg = NULL;
  if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg)) {
    /* an internal invariant: our generator produced invalid IR */
    st = cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "codegen: internal error: invalid IR: %s",
                  msg ? msg : "");
    goto fail;
  }
  LLVMDisposeMessage(msg);
  msg = NULL;
  LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
  LLVMPassBuilderOptionsSetLoopVectorization(po, 1);
  LLVMPassBuilderOptionsSetSLPVectorization(po, 1);
  LLVMPassBuilderOptionsSetLoopUnrolling(po, 1);
  LLVMErrorRef e = LLVMRunPasses(mod, "default<O3>", tm, po);
  LLVMDisposePassBuilderOptions(po);
  if (e) {
    char *em = LLVMGetErrorMessage(e);
    st = cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "codegen: default<O3> failed: %s", em);
    LLVMDisposeErrorMessage(em);
    goto fail;
  }
  *out = mod;
  return CF_OK;
fail:
  LLVMDisposeMessage(msg);
  LLVMDisposeModule(mod);
  return st;
}

cf_status cf_codegen_module(cf_context *ctx, const cf_codegen_target *t, const cf_kernel_key *keys,
                            int n, LLVMContextRef lc, LLVMModuleRef *out) {
  if (out) *out = NULL;
  LLVMTargetMachineRef tm;
  cf_status st = cf_codegen_machine(ctx, t, &tm);
  if (st != CF_OK) return st;
  st = cf_codegen_module_tm(ctx, t, tm, keys, n, lc, out);
  LLVMDisposeTargetMachine(tm);
  return st;
}
