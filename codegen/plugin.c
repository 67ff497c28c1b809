/* plugin.c - the LLVM module's one exported symbol: the table of the entry
 * points that load.c (in libcollfuse) calls through. The module is
 * collfuse-codegen.so, built from every file of codegen/ but keys.c and
 * load.c; see codegen.h.
 */
#define CF_CODEGEN_INTERNAL
#include "codegen.h"

__attribute__((visibility("default"))) const cf_codegen_ops cf_codegen_llvm_ops = {
    .abi = CF_CODEGEN_ABI,
    .target_host = cf_llvm_target_host,
    .target_nvptx = cf_llvm_target_nvptx,
    .kernel = cf_llvm_kernel,
    .emit = cf_llvm_emit,
    .ptx = cf_llvm_ptx,
    .use_target = cf_llvm_use_target,
};
