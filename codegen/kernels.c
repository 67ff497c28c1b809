/* kernels.c - code generation targets (the host from
 * its CPU features, NVPTX) and their target machines: what kernels_ir.c
 * generates code for and module.c builds modules with.
 *
 * A target carries everything that changes the generated code (triple, CPU,
 * features, vector width), so it is also what the JIT and the object cache
 * key compiled kernels by.
 */
#define CF_CODEGEN_INTERNAL
#include "codegen.h"

#include <llvm-c/Target.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* ---- LLVM initialization ----
 * LLVM's target registry is process-wide by design: LLVMInitialize*
 * registers each target into it, and is idempotent but not safe to race.
 * This once-flag is the only static state of codegen/; it guards a one-way
 * process-wide registration, never data of a context, so contexts stay
 * independent. */
static pthread_once_t llvm_once = PTHREAD_ONCE_INIT;

static void llvm_init(void) {
  LLVMInitializeNativeTarget();
  LLVMInitializeNativeAsmPrinter();
  LLVMInitializeNativeAsmParser();
  LLVMInitializeNativeDisassembler();
  LLVMInitializeNVPTXTargetInfo();
  LLVMInitializeNVPTXTarget();
  LLVMInitializeNVPTXTargetMC();
  LLVMInitializeNVPTXAsmPrinter();
}

void cf_codegen_init_llvm(void) { pthread_once(&llvm_once, llvm_init); }

/* ---- targets ---- */

/* "+name" present as a whole entry of a comma-separated feature list. */
static bool has_feature(const char *features, char sign, const char *name) {
  size_t n = strlen(name);
  for (const char *p = features; p && *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == n + 1 && p[0] == sign && memcmp(p + 1, name, n) == 0) return true;
    p = end ? end + 1 : NULL;
  }
  return false;
}

bool cf_target_has(const cf_codegen_target *t, const char *name) {
  return t && t->arch == CF_ARCH_HOST && has_feature(t->features, '+', name);
}

/* Copy features into out; when the host's list is too long, keep only the
 * "+" entries (the "-" ones restate defaults of the CPU, mostly). */
static bool copy_features(const char *f, char *out, size_t cap) {
  if (strlen(f) < cap) {
    memcpy(out, f, strlen(f) + 1);
    return true;
  }
  size_t o = 0;
  for (const char *p = f; *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (p[0] == '+') {
      if (o + len + 2 > cap) return false;
      if (o) out[o++] = ',';
      memcpy(out + o, p, len);
      o += len;
    }
    p = end ? end + 1 : p + len;
  }
  out[o] = '\0';
  return true;
}

cf_status cf_llvm_target_host(cf_context *ctx, cf_codegen_target *t) {
  if (!t) return cf_error(ctx, CF_ERR_USAGE, NULL, 0, "codegen: no target to fill");
  memset(t, 0, sizeof *t);
  cf_codegen_init_llvm();
  char *triple = LLVMGetDefaultTargetTriple();
  char *norm = LLVMNormalizeTargetTriple(triple);
  char *cpu = LLVMGetHostCPUName();
  char *feat = LLVMGetHostCPUFeatures();
  cf_status st = CF_OK;
  if (strlen(norm) >= sizeof t->triple || strlen(cpu) >= sizeof t->cpu ||
      !copy_features(feat, t->features, sizeof t->features))
    st = cf_error(ctx, CF_ERR_UNSUPPORTED, NULL, 0,
                  "codegen: host triple '%s' cpu '%s' or its "
                  "features (%zu bytes) too long",
                  norm, cpu, strlen(feat));
  else {
    t->arch = CF_ARCH_HOST;
    snprintf(t->triple, sizeof t->triple, "%s", norm);
    snprintf(t->cpu, sizeof t->cpu, "%s", cpu);
    /* the widest registers the code may use; AVX-512 without EVEX512
     * (AVX10/256-style parts) only has 256-bit ones */
    if (has_feature(t->features, '+', "avx512f") && !has_feature(t->features, '-', "evex512"))
      t->vector_bits = 512;
    else if (has_feature(t->features, '+', "avx"))
      t->vector_bits = 256;
    else
      t->vector_bits = 128;
  }
  LLVMDisposeMessage(triple);
  LLVMDisposeMessage(norm);
  LLVMDisposeMessage(cpu);
  LLVMDisposeMessage(feat);
  if (st != CF_OK) memset(t, 0, sizeof *t);
  return st;
}

cf_status cf_llvm_target_nvptx(cf_context *ctx, const char *sm, cf_codegen_target *t) {
  if (!t) return cf_error(ctx, CF_ERR_USAGE, NULL, 0, "codegen: no target to fill");
  memset(t, 0, sizeof *t);
  if (!sm) sm = "sm_90";
  size_t len = strlen(sm);
  bool ok = len >= 5 && len < 16 && strncmp(sm, "sm_", 3) == 0;
  for (size_t i = 3; ok && i < len; i++)
    ok = (sm[i] >= '0' && sm[i] <= '9') || (i == len - 1 && i > 3 && sm[i] == 'a');
  if (!ok)
    return cf_error(ctx, CF_ERR_USAGE, NULL, 0,
                    "codegen: NVPTX architecture '%s' is not of the form sm_NN (e.g. sm_90)", sm);
  cf_codegen_init_llvm();
  t->arch = CF_ARCH_NVPTX;
  snprintf(t->triple, sizeof t->triple, "nvptx64-nvidia-cuda");
  snprintf(t->cpu, sizeof t->cpu, "%s", sm);
  /* PTX ISA 8.0 (CUDA 12.0) covers sm_90/sm_90a and everything older */
  snprintf(t->features, sizeof t->features, "+ptx80");
  t->vector_bits = 32; /* scalar per thread */
  return CF_OK;
}

cf_status cf_codegen_machine(cf_context *ctx, const cf_codegen_target *t,
                             LLVMTargetMachineRef *out) {
  if (out) *out = NULL;
  if (!t || !out) return cf_error(ctx, CF_ERR_USAGE, NULL, 0, "codegen: no target or result");
  cf_codegen_init_llvm();
  LLVMTargetRef target;
  char *err = NULL;
  if (LLVMGetTargetFromTriple(t->triple, &target, &err)) {
    cf_status st = cf_error(ctx, CF_ERR_UNSUPPORTED, NULL, 0, "codegen: target '%s': %s", t->triple,
                            err ? err : "unknown");
    LLVMDisposeMessage(err);
    return st;
  }
  *out = LLVMCreateTargetMachine(target, t->triple, t->cpu, t->features, LLVMCodeGenLevelAggressive,
                                 t->arch == CF_ARCH_HOST ? LLVMRelocPIC : LLVMRelocDefault,
                                 LLVMCodeModelDefault);
  if (!*out)
    return cf_error(ctx, CF_ERR_UNSUPPORTED, NULL, 0,
                    "codegen: no target machine for '%s' cpu '%s'", t->triple, t->cpu);
  return CF_OK;
}
