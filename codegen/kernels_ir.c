/* kernels_ir.c - LLVM IR for one reduction kernel (n-ary, accumulate,
 * scale, QuantMatMul epilogue), for the host or for NVPTX.
 *
 * Host kernels are explicit vector code: a main loop over <L x T> vectors,
 * L = the host's widest register / element width (float32 for the 16-bit
 * floats), then a scalar tail; both loops carry metadata that keeps the
 * optimizer from vectorizing or unrolling them again, which only cost
 * compile time.
 * Writing the vectors ourselves, rather than leaving a scalar loop to the
 * loop vectorizer, makes the width a decision of ours, the same for every
 * dtype, and testable at exactly L-1, L and L+1. NVPTX kernels are scalar
 * per thread in a grid-stride loop (tid/ntid/ctaid/nctaid sregs).
 *
 * Element semantics: integers wrap; float16/bfloat16 are widened to float32,
 * combined there, and rounded back to nearest even (bfloat16 by integer
 * arithmetic that keeps NaN a NaN); float max/min are llvm.maximum/minimum
 * (NaN wins, -0 < +0; float16 compares bit patterns to the same effect),
 * with a vmaxps-based fast path for NaN-free vector blocks (maxmin_fast);
 * n-ary kernels with a destination of >= 4 MiB use non-temporal stores;
 * integer means divide exactly, truncating toward zero.
 */
#define CF_CODEGEN_INTERNAL
#include "codegen.h"

#include <llvm-c/DebugInfo.h>
#include <stdio.h>
#include <string.h>

#define MAX_LANES 64 /* 512-bit registers of int8 */

typedef struct kg {
  LLVMContextRef lc;
  LLVMModuleRef mod;
  LLVMBuilderRef b;
  LLVMValueRef fn;
  bool ptx; /* NVPTX: scalar per thread, grid-stride loop */
  const char *triple;
  LLVMTypeRef i8, i16, i32, i64, f16, f32, f64, ptr, vd;
} kg;

typedef struct kenv {
  const cf_kernel_key *key;
  LLVMValueRef dst, src[CF_MAX_ARITY]; /* NARY: the loaded source pointers */
  LLVMValueRef inv;                    /* float mean/scale: 1/div in the compute type */
  LLVMValueRef fdiv;                   /* integer mean/scale (<= 32 bits): div as an exact double */
  LLVMValueRef idiv;                   /* integer mean/scale (64 bits): div as i64 >= 1 */
  LLVMValueRef acc, x2, s1;            /* QUANT: this row's acc and x1_scale, x2_scale */
  unsigned nt_align;                   /* NARY: non-zero in the streaming loop, whose vector
                                          stores are !nontemporal and aligned to this */
} kenv;

/* NARY kernels whose destination is at least this large (n * element size)
 * write it with non-temporal (streaming) stores: at DRAM sizes that saves
 * the read-for-ownership of every destination line (1.2x at 64 MiB); in
 * cache it would evict the result and costs 0.7x (measured on znver5). */
#define NT_MIN_BYTES (4ll << 20)

typedef void (*body_fn)(kg *g, kenv *e, LLVMValueRef idx, int lanes);

/* ---- types and constants ---- */

static int storage_bits(cf_dtype dt) { return cf_dtype_size(dt) * 8; }
static bool is_half_float(cf_dtype dt) { return dt == CF_DT_FLOAT16 || dt == CF_DT_BFLOAT16; }
static bool is_float(cf_dtype dt) { return cf_dtype_is_float(dt); }

static LLVMTypeRef store_ty(kg *g, cf_dtype dt) {
  switch (dt) {
  case CF_DT_INT8:
  case CF_DT_UINT8: return g->i8;
  case CF_DT_INT16:
  case CF_DT_BFLOAT16: return g->i16;
  case CF_DT_INT32: return g->i32;
  case CF_DT_INT64: return g->i64;
  case CF_DT_FLOAT16: return g->f16;
  case CF_DT_FLOAT32: return g->f32;
  default: return g->f64;
  }
}

static LLVMTypeRef vec(LLVMTypeRef t, int lanes) {
  return lanes == 1 ? t : LLVMVectorType(t, (unsigned)lanes);
}

static LLVMValueRef splat(kg *g, LLVMValueRef s, int lanes) {
  if (lanes == 1) return s;
  if (LLVMIsConstant(s)) {
    LLVMValueRef el[MAX_LANES];
    for (int i = 0; i < lanes; i++)
      el[i] = s;
    return LLVMConstVector(el, (unsigned)lanes);
  }
  LLVMTypeRef vt = LLVMVectorType(LLVMTypeOf(s), (unsigned)lanes);
  LLVMValueRef v =
      LLVMBuildInsertElement(g->b, LLVMGetPoison(vt), s, LLVMConstInt(g->i32, 0, 0), "");
  LLVMValueRef mask = LLVMConstNull(LLVMVectorType(g->i32, (unsigned)lanes));
  return LLVMBuildShuffleVector(g->b, v, LLVMGetPoison(vt), mask, "splat");
}

static LLVMValueRef cint(kg *g, LLVMTypeRef t, unsigned long long v, int lanes) {
  return splat(g, LLVMConstInt(t, v, 0), lanes);
}

int cf_kernel_lanes(const cf_codegen_target *t, const cf_kernel_key *key) {
  if (t->arch == CF_ARCH_NVPTX) return 1;
  int bits = key->kind == CF_K_QUANT || is_half_float(key->dtype) ? 32 : storage_bits(key->dtype);
  int lanes = 1; /* a power of two: the vector loop's bound is n & -lanes */
  while (lanes * 2 <= MAX_LANES && lanes * 2 * bits <= t->vector_bits)
    lanes *= 2;
  return lanes;
}

static LLVMValueRef call_intrinsic(kg *g, const char *name, LLVMTypeRef overload,
                                   LLVMValueRef *args, unsigned nargs) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  LLVMTypeRef tys[1] = {overload};
  size_t ntys = overload ? 1 : 0;
  LLVMValueRef f = LLVMGetIntrinsicDeclaration(g->mod, id, tys, ntys);
  LLVMTypeRef ft = LLVMIntrinsicGetType(g->lc, id, tys, ntys);
  return LLVMBuildCall2(g->b, ft, f, args, nargs, "");
}

/* ---- memory ---- */

static LLVMValueRef elem_ptr(kg *g, LLVMTypeRef et, LLVMValueRef base, LLVMValueRef idx) {
  return LLVMBuildGEP2(g->b, et, base, &idx, 1, "");
}

/* Host loads/stores are align 1: fused buffers may place a tensor at any
 * byte offset, and unaligned vector moves cost nothing extra on x86 when
 * the data happens to be aligned. NVPTX needs natural alignment. */
static unsigned elem_align(kg *g, LLVMTypeRef et) {
  if (!g->ptx) return 1;
  switch (LLVMGetTypeKind(et)) {
  case LLVMHalfTypeKind: return 2;
  case LLVMFloatTypeKind: return 4;
  case LLVMDoubleTypeKind: return 8;
  default: return LLVMGetIntTypeWidth(et) / 8;
  }
}

static LLVMValueRef load(kg *g, LLVMTypeRef et, LLVMValueRef base, LLVMValueRef idx, int lanes) {
  LLVMValueRef v = LLVMBuildLoad2(g->b, vec(et, lanes), elem_ptr(g, et, base, idx), "");
  LLVMSetAlignment(v, elem_align(g, et));
  return v;
}

static void store(kg *g, LLVMTypeRef et, LLVMValueRef v, LLVMValueRef base, LLVMValueRef idx) {
  LLVMValueRef s = LLVMBuildStore(g->b, v, elem_ptr(g, et, base, idx));
  LLVMSetAlignment(s, elem_align(g, et));
}

/* A store of the NARY streaming loop: vectors are !nontemporal and aligned
 * (x86 emits vmovntps/vmovntdq only for aligned addresses); its scalar
 * peel and tail are ordinary stores. */
static void store_nt(kg *g, kenv *e, LLVMTypeRef et, LLVMValueRef v, LLVMValueRef base,
                     LLVMValueRef idx) {
  if (!e->nt_align || LLVMGetTypeKind(LLVMTypeOf(v)) != LLVMVectorTypeKind) {
    store(g, et, v, base, idx);
    return;
  }
  LLVMValueRef s = LLVMBuildStore(g->b, v, elem_ptr(g, et, base, idx));
  LLVMSetAlignment(s, e->nt_align);
  LLVMMetadataRef one = LLVMValueAsMetadata(LLVMConstInt(g->i32, 1, 0));
  LLVMSetMetadata(s, LLVMGetMDKindIDInContext(g->lc, "nontemporal", 11),
                  LLVMMetadataAsValue(g->lc, LLVMMDNodeInContext2(g->lc, &one, 1)));
}

/* ---- conversions between storage and compute types ---- */

static LLVMValueRef to_comp(kg *g, LLVMValueRef v, cf_dtype dt, int lanes) {
  if (dt == CF_DT_FLOAT16) return LLVMBuildFPExt(g->b, v, vec(g->f32, lanes), "");
  if (dt == CF_DT_BFLOAT16) {
    LLVMValueRef w = LLVMBuildZExt(g->b, v, vec(g->i32, lanes), "");
    w = LLVMBuildShl(g->b, w, cint(g, g->i32, 16, lanes), "");
    return LLVMBuildBitCast(g->b, w, vec(g->f32, lanes), "");
  }
  return v;
}

/* float32 -> bfloat16, round to nearest even; a NaN gets its quiet bit set
 * first so that truncating its low payload bits cannot turn it into Inf. */
static LLVMValueRef f32_to_bf16(kg *g, LLVMValueRef v, int lanes) {
  LLVMTypeRef it = vec(g->i32, lanes);
  LLVMValueRef bits = LLVMBuildBitCast(g->b, v, it, "");
  LLVMValueRef lsb = LLVMBuildAnd(g->b, LLVMBuildLShr(g->b, bits, cint(g, g->i32, 16, lanes), ""),
                                  cint(g, g->i32, 1, lanes), "");
  LLVMValueRef r = LLVMBuildAdd(g->b, bits, cint(g, g->i32, 0x7fff, lanes), "");
  r = LLVMBuildAdd(g->b, r, lsb, "rne");
  LLVMValueRef nan = LLVMBuildFCmp(g->b, LLVMRealUNO, v, v, "isnan");
  LLVMValueRef q = LLVMBuildOr(g->b, bits, cint(g, g->i32, 0x400000, lanes), "");
  r = LLVMBuildSelect(g->b, nan, q, r, "");
  r = LLVMBuildLShr(g->b, r, cint(g, g->i32, 16, lanes), "");
  return LLVMBuildTrunc(g->b, r, vec(g->i16, lanes), "");
}

static LLVMValueRef from_comp(kg *g, LLVMValueRef v, cf_dtype dt, int lanes) {
  if (dt == CF_DT_FLOAT16) return LLVMBuildFPTrunc(g->b, v, vec(g->f16, lanes), "");
  if (dt == CF_DT_BFLOAT16) return f32_to_bf16(g, v, lanes);
  return v;
}

/* ---- the reductions ---- */

static LLVMValueRef combine(kg *g, cf_reduction red, cf_dtype dt, LLVMValueRef a, LLVMValueRef b) {
  LLVMValueRef args[2] = {a, b};
  LLVMTypeRef t = LLVMTypeOf(a);
  if (is_float(dt)) {
    switch (red) {
    case CF_RED_PROD: return LLVMBuildFMul(g->b, a, b, "");
    case CF_RED_MAX: return call_intrinsic(g, "llvm.maximum", t, args, 2);
    case CF_RED_MIN: return call_intrinsic(g, "llvm.minimum", t, args, 2);
    default: return LLVMBuildFAdd(g->b, a, b, "");
    }
  }
  bool u = dt == CF_DT_UINT8;
  switch (red) {
  case CF_RED_PROD: return LLVMBuildMul(g->b, a, b, "");
  case CF_RED_MAX: return call_intrinsic(g, u ? "llvm.umax" : "llvm.smax", t, args, 2);
  case CF_RED_MIN: return call_intrinsic(g, u ? "llvm.umin" : "llvm.smin", t, args, 2);
  default: return LLVMBuildAdd(g->b, a, b, "");
  }
}

/* Float max/min of x[0..k) (compute-type vectors, k >= 2), fast path.
 * llvm.maximum/minimum lower to about six instructions per vector on x86;
 * select(fcmp ogt a, b; a; b) is one vmaxps (vminps for olt), exact except
 * for NaN and for equal operands (+0 vs -0, where it returns b). So: fold
 * the k sources as a balanced tree of those selects; fix the sign of a zero
 * result without a compare: max clears m's sign bit unless every operand's
 * is set (m & (AND of all | ~sign)), min sets it if any operand's is
 * (m | (OR of all & sign)). A nonzero m keeps its sign either way (max < 0
 * means all are negative, min > 0 all positive), and a zero m becomes -0
 * exactly when -0 < +0 says so; and if
 * any operand of the block is NaN (one fcmp uno per pair, OR-reduced),
 * branch to the exact left-to-right chain of llvm.maximum/minimum, so a
 * block with a NaN gives the same bits as before. */
static LLVMValueRef maxmin_fast(kg *g, cf_reduction red, cf_dtype dt, LLVMValueRef *x, int k,
                                int lanes) {
  LLVMTypeRef ft = LLVMTypeOf(x[0]);
  LLVMTypeRef ie = dt == CF_DT_FLOAT64 ? g->i64 : g->i32, it = vec(ie, lanes);
  bool mx = red == CF_RED_MAX;
  LLVMValueRef nan = NULL;
  for (int i = 0; i < k; i += 2) {
    LLVMValueRef c = LLVMBuildFCmp(g->b, LLVMRealUNO, x[i], x[i + 1 < k ? i + 1 : i], "");
    nan = nan ? LLVMBuildOr(g->b, nan, c, "") : c;
  }
  LLVMValueRef nanbits =
      LLVMBuildBitCast(g->b, nan, LLVMIntTypeInContext(g->lc, (unsigned)lanes), "");
  LLVMValueRef any = LLVMBuildICmp(g->b, LLVMIntNE, nanbits, LLVMConstNull(LLVMTypeOf(nanbits)),
                                   "anynan");
  LLVMValueRef t[CF_MAX_ARITY];
  int c = k;
  for (int i = 0; i < k; i++)
    t[i] = x[i];
  while (c > 1) {
    int o = 0;
    for (int i = 0; i + 1 < c; i += 2) {
      LLVMValueRef cmp = LLVMBuildFCmp(g->b, mx ? LLVMRealOGT : LLVMRealOLT, t[i], t[i + 1], "");
      t[o++] = LLVMBuildSelect(g->b, cmp, t[i], t[i + 1], "");
    }
    if (c & 1) t[o++] = t[c - 1];
    c = o;
  }
  LLVMValueRef bits = LLVMBuildBitCast(g->b, x[0], it, "");
  for (int i = 1; i < k; i++) {
    LLVMValueRef xi = LLVMBuildBitCast(g->b, x[i], it, "");
    bits = mx ? LLVMBuildAnd(g->b, bits, xi, "") : LLVMBuildOr(g->b, bits, xi, "");
  }
  unsigned long long sign = dt == CF_DT_FLOAT64 ? 1ull << 63 : 1ull << 31;
  LLVMValueRef mb = LLVMBuildBitCast(g->b, t[0], it, "");
  if (mx) /* m & (AND of all | ~sign): clears m's sign unless all are negative */
    mb = LLVMBuildAnd(g->b, mb, LLVMBuildOr(g->b, bits, cint(g, ie, ~sign, lanes), ""), "");
  else /* m | (OR of all & sign): sets m's sign if any is negative */
    mb = LLVMBuildOr(g->b, mb, LLVMBuildAnd(g->b, bits, cint(g, ie, sign, lanes), ""), "");
  LLVMValueRef fast = LLVMBuildBitCast(g->b, mb, ft, "");

  LLVMBasicBlockRef here = LLVMGetInsertBlock(g->b);
  LLVMBasicBlockRef slow = LLVMAppendBasicBlockInContext(g->lc, g->fn, "nan");
  LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(g->lc, g->fn, "maxmin");
  LLVMValueRef br = LLVMBuildCondBr(g->b, any, slow, join);
  const char *bw = "branch_weights";
  LLVMMetadataRef w[3] = {LLVMMDStringInContext2(g->lc, bw, strlen(bw)),
                          LLVMValueAsMetadata(LLVMConstInt(g->i32, 1, 0)),
                          LLVMValueAsMetadata(LLVMConstInt(g->i32, 1000, 0))};
  LLVMSetMetadata(br, LLVMGetMDKindIDInContext(g->lc, "prof", 4),
                  LLVMMetadataAsValue(g->lc, LLVMMDNodeInContext2(g->lc, w, 3)));
  LLVMPositionBuilderAtEnd(g->b, slow);
  LLVMValueRef exact = x[0];
  for (int i = 1; i < k; i++)
    exact = combine(g, red, dt, exact, x[i]);
  LLVMBasicBlockRef slow_end = LLVMGetInsertBlock(g->b);
  LLVMBuildBr(g->b, join);
  LLVMPositionBuilderAtEnd(g->b, join);
  LLVMValueRef phi = LLVMBuildPhi(g->b, ft, "");
  LLVMValueRef vals[2] = {fast, exact};
  LLVMBasicBlockRef bbs[2] = {here, slow_end};
  LLVMAddIncoming(phi, vals, bbs, 2);
  return phi;
}

/* Where the fast path pays (measured on znver5, 256 KiB, against the exact
 * chain): 1.07x at 4 sources, 1.7x (float32/64) and 2x (bfloat16) at 8,
 * 1.05x for bfloat16 at 2; even for float32/float64 with 2 sources and
 * 0.94x for their accumulate, which keep the exact chain. float16 max/min
 * compare bit patterns instead (f16_maxmin). */
static bool fast_maxmin_op(kg *g, cf_dtype dt, cf_reduction red, int k, int lanes) {
  return !g->ptx && lanes > 1 && (red == CF_RED_MAX || red == CF_RED_MIN) && is_float(dt) &&
         dt != CF_DT_FLOAT16 && (k >= 3 || dt == CF_DT_BFLOAT16);
}

/* float16 max/min on the bits: InstCombine narrows
 * fptrunc(maximum(fpext a, fpext b)) to a half maximum, which x86 without
 * AVX512-FP16 scalarizes (8-ary kernels took 70 ms to compile). Instead:
 * key(x) = x ^ ((x >>s 15) & 0x7fff) orders half bit patterns like their
 * values, -0 below +0 (as llvm.maximum does); a NaN operand wins, quieted. */
static LLVMValueRef f16_key(kg *g, LLVMValueRef x, int lanes) {
  LLVMValueRef sign = LLVMBuildAShr(g->b, x, cint(g, g->i16, 15, lanes), "");
  return LLVMBuildXor(g->b, x, LLVMBuildAnd(g->b, sign, cint(g, g->i16, 0x7fff, lanes), ""), "");
}

static LLVMValueRef f16_maxmin(kg *g, cf_reduction red, LLVMValueRef a, LLVMValueRef b, int lanes) {
  LLVMValueRef ka = f16_key(g, a, lanes), kb = f16_key(g, b, lanes);
  LLVMValueRef c = LLVMBuildICmp(g->b, red == CF_RED_MAX ? LLVMIntSGT : LLVMIntSLT, ka, kb, "");
  LLVMValueRef r = LLVMBuildSelect(g->b, c, a, b, "");
  LLVMValueRef mag = cint(g, g->i16, 0x7fff, lanes), inf = cint(g, g->i16, 0x7c00, lanes);
  LLVMValueRef qbit = cint(g, g->i16, 0x200, lanes);
  LLVMValueRef nb = LLVMBuildICmp(g->b, LLVMIntUGT, LLVMBuildAnd(g->b, b, mag, ""), inf, "");
  r = LLVMBuildSelect(g->b, nb, LLVMBuildOr(g->b, b, qbit, ""), r, "");
  LLVMValueRef na = LLVMBuildICmp(g->b, LLVMIntUGT, LLVMBuildAnd(g->b, a, mag, ""), inf, "");
  return LLVMBuildSelect(g->b, na, LLVMBuildOr(g->b, a, qbit, ""), r, "");
}

static bool f16_bits_op(cf_dtype dt, cf_reduction red) {
  return dt == CF_DT_FLOAT16 && (red == CF_RED_MAX || red == CF_RED_MIN);
}

/* Integer v (any width, uint8 zero- and the others sign-extended) divided
 * by the kernel's divisor, truncated toward zero, in dtype dt's storage
 * type. Up to 32-bit types divide in double: v and div are exact there and
 * a correctly rounded quotient never crosses an integer, so truncating it
 * is exact integer division, and vdivpd beats scalarized idiv. */
static LLVMValueRef int_div(kg *g, kenv *e, LLVMValueRef v, cf_dtype dt, int lanes) {
  if (dt == CF_DT_INT64) return LLVMBuildSDiv(g->b, v, splat(g, e->idiv, lanes), "");
  LLVMTypeRef dv = vec(g->f64, lanes);
  LLVMValueRef f = dt == CF_DT_UINT8 ? LLVMBuildUIToFP(g->b, v, dv, "") /* v >= 0 */
                                     : LLVMBuildSIToFP(g->b, v, dv, "");
  f = LLVMBuildFDiv(g->b, f, splat(g, e->fdiv, lanes), "");
  LLVMValueRef q = LLVMBuildFPToSI(g->b, f, vec(g->i32, lanes), "");
  return storage_bits(dt) < 32 ? LLVMBuildTrunc(g->b, q, vec(store_ty(g, dt), lanes), "") : q;
}

/* ---- kernel bodies: one vector (lanes > 1) or one element at idx ---- */

static void body_nary(kg *g, kenv *e, LLVMValueRef idx, int lanes) {
  cf_dtype dt = e->key->dtype;
  cf_reduction red = e->key->red;
  LLVMTypeRef st = store_ty(g, dt);
  LLVMValueRef r;
  if (red == CF_RED_MEAN && !is_float(dt)) {
    /* exact sum in int64 (int64 itself wraps), then divide */
    LLVMTypeRef wt = vec(g->i64, lanes);
    r = NULL;
    for (int k = 0; k < e->key->arity; k++) {
      LLVMValueRef x = load(g, st, e->src[k], idx, lanes);
      if (dt != CF_DT_INT64)
        x = dt == CF_DT_UINT8 ? LLVMBuildZExt(g->b, x, wt, "") : LLVMBuildSExt(g->b, x, wt, "");
      r = r ? LLVMBuildAdd(g->b, r, x, "") : x;
    }
    r = int_div(g, e, r, dt, lanes);
  } else if (f16_bits_op(dt, red)) {
    r = load(g, g->i16, e->src[0], idx, lanes);
    for (int k = 1; k < e->key->arity; k++)
      r = f16_maxmin(g, red, r, load(g, g->i16, e->src[k], idx, lanes), lanes);
    st = g->i16;
  } else if (fast_maxmin_op(g, dt, red, e->key->arity, lanes)) {
    LLVMValueRef x[CF_MAX_ARITY];
    for (int k = 0; k < e->key->arity; k++)
      x[k] = to_comp(g, load(g, st, e->src[k], idx, lanes), dt, lanes);
    r = from_comp(g, maxmin_fast(g, red, dt, x, e->key->arity, lanes), dt, lanes);
  } else {
    r = to_comp(g, load(g, st, e->src[0], idx, lanes), dt, lanes);
    for (int k = 1; k < e->key->arity; k++)
      r = combine(g, red, dt, r, to_comp(g, load(g, st, e->src[k], idx, lanes), dt, lanes));
    if (red == CF_RED_MEAN) r = LLVMBuildFMul(g->b, r, splat(g, e->inv, lanes), "mean");
    r = from_comp(g, r, dt, lanes);
  }
  store_nt(g, e, st, r, e->dst, idx);
}

static void body_acc(kg *g, kenv *e, LLVMValueRef idx, int lanes) {
  cf_dtype dt = e->key->dtype;
  LLVMTypeRef st = store_ty(g, dt);
  if (f16_bits_op(dt, e->key->red)) {
    LLVMValueRef a = load(g, g->i16, e->dst, idx, lanes),
                 b = load(g, g->i16, e->src[0], idx, lanes);
    store(g, g->i16, f16_maxmin(g, e->key->red, a, b, lanes), e->dst, idx);
    return;
  }
  LLVMValueRef a = to_comp(g, load(g, st, e->dst, idx, lanes), dt, lanes);
  LLVMValueRef b = to_comp(g, load(g, st, e->src[0], idx, lanes), dt, lanes);
  cf_reduction red = e->key->red == CF_RED_MEAN ? CF_RED_SUM : e->key->red;
  LLVMValueRef x[2] = {a, b};
  LLVMValueRef r = fast_maxmin_op(g, dt, red, 2, lanes) ? maxmin_fast(g, red, dt, x, 2, lanes)
                                                      : combine(g, red, dt, a, b);
  store(g, st, from_comp(g, r, dt, lanes), e->dst, idx);
}

static void body_scale(kg *g, kenv *e, LLVMValueRef idx, int lanes) {
  cf_dtype dt = e->key->dtype;
  LLVMTypeRef st = store_ty(g, dt);
  LLVMValueRef v = load(g, st, e->dst, idx, lanes);
  if (is_float(dt))
    v = from_comp(g, LLVMBuildFMul(g->b, to_comp(g, v, dt, lanes), splat(g, e->inv, lanes), ""), dt,
                  lanes);
  else
    v = int_div(g, e, v, dt, lanes);
  store(g, st, v, e->dst, idx);
}

/* dst[j] = (dtype)((float)acc[j] * x1_scale[i] * x2_scale[j]) for row i */
static void body_quant(kg *g, kenv *e, LLVMValueRef idx, int lanes) {
  LLVMValueRef a =
      LLVMBuildSIToFP(g->b, load(g, g->i32, e->acc, idx, lanes), vec(g->f32, lanes), "");
  a = LLVMBuildFMul(g->b, a, splat(g, e->s1, lanes), "");
  a = LLVMBuildFMul(g->b, a, load(g, g->f32, e->x2, idx, lanes), "");
  store(g, store_ty(g, e->key->dtype), from_comp(g, a, e->key->dtype, lanes), e->dst, idx);
}

/* ---- loops ---- */

typedef struct kloop {
  LLVMBasicBlockRef head, exit;
  LLVMValueRef iv;
} kloop;

/* for (iv = start; iv < end; iv += step) { ...builder left in the body... } */
static LLVMValueRef loop_begin(kg *g, kloop *L, LLVMValueRef start, LLVMValueRef end) {
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(g->b);
  L->head = LLVMAppendBasicBlockInContext(g->lc, g->fn, "head");
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(g->lc, g->fn, "body");
  L->exit = LLVMAppendBasicBlockInContext(g->lc, g->fn, "exit");
  LLVMBuildBr(g->b, L->head);
  LLVMPositionBuilderAtEnd(g->b, L->head);
  L->iv = LLVMBuildPhi(g->b, g->i64, "i");
  LLVMAddIncoming(L->iv, &start, &pre, 1);
  LLVMBuildCondBr(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, L->iv, end, ""), body, L->exit);
  LLVMPositionBuilderAtEnd(g->b, body);
  return L->iv;
}

/* A loop ID that switches off vectorization and unrolling of a loop that
 * runs fewer times than a vector has lanes (self-referential, as loop IDs
 * must be, through a temporary node). */
static LLVMValueRef no_vec_loop_id(kg *g, int unroll) {
  LLVMMetadataRef tmp = LLVMTemporaryMDNode(g->lc, NULL, 0);
  const char *v = "llvm.loop.vectorize.enable";
  const char *u = unroll > 1 ? "llvm.loop.unroll.count" : "llvm.loop.unroll.disable";
  LLVMMetadataRef vs[2] = {LLVMMDStringInContext2(g->lc, v, strlen(v)),
                           LLVMValueAsMetadata(LLVMConstInt(LLVMInt1TypeInContext(g->lc), 0, 0))};
  LLVMMetadataRef us[2] = {LLVMMDStringInContext2(g->lc, u, strlen(u)),
                           LLVMValueAsMetadata(LLVMConstInt(g->i32, (unsigned)unroll, 0))};
  LLVMMetadataRef ops[3] = {tmp, LLVMMDNodeInContext2(g->lc, vs, 2),
                            LLVMMDNodeInContext2(g->lc, us, unroll > 1 ? 2 : 1)};
  LLVMMetadataRef id = LLVMMDNodeInContext2(g->lc, ops, 3);
  LLVMMetadataReplaceAllUsesWith(tmp, id);
  return LLVMMetadataAsValue(g->lc, id);
}

/* unroll: 0 leaves the loop to the optimizer; 1 switches vectorization
 * and unrolling off; N > 1 switches vectorization off and unrolls N times. */
static void loop_end(kg *g, kloop *L, LLVMValueRef step, int unroll) {
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(g->b);
  LLVMValueRef next = LLVMBuildAdd(g->b, L->iv, step, "next");
  LLVMValueRef br = LLVMBuildBr(g->b, L->head);
  if (unroll)
    LLVMSetMetadata(br, LLVMGetMDKindIDInContext(g->lc, "llvm.loop", 9), no_vec_loop_id(g, unroll));
  LLVMAddIncoming(L->iv, &next, &latch, 1);
  LLVMPositionBuilderAtEnd(g->b, L->exit);
}

static LLVMValueRef sreg(kg *g, const char *name) {
  return LLVMBuildZExt(g->b, call_intrinsic(g, name, NULL, NULL, 0), g->i64, "");
}

/* body over [0, n): host vectors then a scalar tail; NVPTX grid-stride.
 * n must be >= 0 here (the entry clamps it). */
static void elementwise(kg *g, kenv *e, LLVMValueRef n, int lanes, body_fn body) {
  kloop L;
  if (g->ptx) {
    LLVMValueRef tid = sreg(g, "llvm.nvvm.read.ptx.sreg.tid.x");
    LLVMValueRef ntid = sreg(g, "llvm.nvvm.read.ptx.sreg.ntid.x");
    LLVMValueRef ctaid = sreg(g, "llvm.nvvm.read.ptx.sreg.ctaid.x");
    LLVMValueRef nctaid = sreg(g, "llvm.nvvm.read.ptx.sreg.nctaid.x");
    LLVMValueRef start = LLVMBuildAdd(g->b, LLVMBuildMul(g->b, ctaid, ntid, ""), tid, "gid");
    LLVMValueRef stride = LLVMBuildMul(g->b, ntid, nctaid, "stride");
    body(g, e, loop_begin(g, &L, start, n), 1);
    loop_end(g, &L, stride, 0);
    return;
  }
  LLVMValueRef zero = LLVMConstInt(g->i64, 0, 0), nv = zero;
  LLVMBasicBlockRef done = NULL;
  /* not float16 max/min: their bit-pattern compares are compute-bound at
   * high arity, and a second copy of that loop took 8-ary kernels past
   * 50 ms of compile time */
  if (lanes > 1 && e->key->kind == CF_K_NARY && !f16_bits_op(e->key->dtype, e->key->red)) {
    /* Streaming path for large n: a scalar peel up to the first 64-byte
     * aligned dst element, the vector loop with non-temporal stores, a
     * store fence (streaming stores are weakly ordered), the scalar tail.
     * Only when dst is element-aligned, so that it can be peeled to 64. */
    int es = storage_bits(e->key->dtype) / 8;
    /* float16/bfloat16 compute in float32, whose vectors narrow to half a
     * register on the way back; x86 folds that narrowing into the store
     * (vpmovdw/vcvtps2ph to memory), which has no non-temporal form, so
     * the streaming loop takes two registers' worth: one full-width store */
    int nl = lanes * es < 64 && lanes < MAX_LANES ? 64 / es : lanes;
    LLVMValueRef addr = LLVMBuildPtrToInt(g->b, e->dst, g->i64, "");
    LLVMValueRef mis = LLVMBuildAnd(g->b, addr, LLVMConstInt(g->i64, 63, 0), "mis");
    LLVMValueRef ealn = LLVMBuildICmp(
        g->b, LLVMIntEQ, LLVMBuildAnd(g->b, mis, LLVMConstInt(g->i64, (unsigned)es - 1, 0), ""),
        zero, "");
    LLVMValueRef big = LLVMBuildICmp(
        g->b, LLVMIntSGE, n, LLVMConstInt(g->i64, (unsigned long long)(NT_MIN_BYTES / es), 0), "");
    LLVMBasicBlockRef ntb = LLVMAppendBasicBlockInContext(g->lc, g->fn, "stream");
    LLVMBasicBlockRef plain = LLVMAppendBasicBlockInContext(g->lc, g->fn, "plain");
    done = LLVMAppendBasicBlockInContext(g->lc, g->fn, "done");
    LLVMBuildCondBr(g->b, LLVMBuildAnd(g->b, big, ealn, ""), ntb, plain);
    LLVMPositionBuilderAtEnd(g->b, ntb);
    LLVMValueRef peel = LLVMBuildUDiv(
        g->b,
        LLVMBuildAnd(g->b, LLVMBuildSub(g->b, LLVMConstInt(g->i64, 64, 0), mis, ""),
                     LLVMConstInt(g->i64, 63, 0), ""),
        LLVMConstInt(g->i64, (unsigned)es, 0), "peel"); /* < 64 <= n */
    body(g, e, loop_begin(g, &L, zero, peel), 1);
    loop_end(g, &L, LLVMConstInt(g->i64, 1, 0), 1);
    LLVMValueRef vend = LLVMBuildAdd(
        g->b, peel,
        LLVMBuildAnd(g->b, LLVMBuildSub(g->b, n, peel, ""),
                     LLVMConstInt(g->i64, ~(unsigned long long)(nl - 1), 0), ""),
        "vend");
    e->nt_align = (unsigned)(nl * es < 64 ? nl * es : 64);
    body(g, e, loop_begin(g, &L, peel, vend), nl);
    e->nt_align = 0;
    loop_end(g, &L, LLVMConstInt(g->i64, (unsigned long long)nl, 0), 1);
    if (strncmp(g->triple, "x86_64", 6) == 0 || (g->triple[0] == 'i' && g->triple[2] == '8'))
      call_intrinsic(g, "llvm.x86.sse.sfence", NULL, NULL, 0);
    else
      LLVMBuildFence(g->b, LLVMAtomicOrderingSequentiallyConsistent, 0, "");
    body(g, e, loop_begin(g, &L, vend, n), 1);
    loop_end(g, &L, LLVMConstInt(g->i64, 1, 0), 1);
    LLVMBuildBr(g->b, done);
    LLVMPositionBuilderAtEnd(g->b, plain);
  }
  if (lanes > 1) {
    nv = LLVMBuildAnd(g->b, n, LLVMConstInt(g->i64, ~(unsigned long long)(lanes - 1), 0), "nvec");
    body(g, e, loop_begin(g, &L, zero, nv), lanes);
    /* not unrolled: the optimizer's 8x made the wide kernels (8-ary
     * float16 max) slow to compile, and 2x only added compile time; one
     * vector per iteration already runs as fast as gcc -O3 -march=native */
    loop_end(g, &L, LLVMConstInt(g->i64, (unsigned long long)lanes, 0), 1);
  }
  body(g, e, loop_begin(g, &L, nv, n), 1);
  loop_end(g, &L, LLVMConstInt(g->i64, 1, 0), 1);
  if (done) {
    LLVMBuildBr(g->b, done);
    LLVMPositionBuilderAtEnd(g->b, done);
  }
}

/* ---- functions ---- */

static void add_attr(kg *g, LLVMValueRef fn, unsigned idx, const char *name) {
  unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
  LLVMAddAttributeAtIndex(fn, idx, LLVMCreateEnumAttribute(g->lc, kind, 0));
}

static void add_str_attr(kg *g, LLVMValueRef fn, const char *k, const char *v) {
  LLVMAddAttributeAtIndex(
      fn, LLVMAttributeFunctionIndex,
      LLVMCreateStringAttribute(g->lc, k, (unsigned)strlen(k), v, (unsigned)strlen(v)));
}

/* Pointer parameter i (0-based): noalias nocapture, readonly for inputs. */
static void ptr_param(kg *g, int i, bool readonly) {
  add_attr(g, g->fn, (unsigned)i + 1, "noalias");
  add_attr(g, g->fn, (unsigned)i + 1, "nocapture");
  if (readonly) add_attr(g, g->fn, (unsigned)i + 1, "readonly");
}

/* max(n, 0): a negative count does nothing instead of running the tail
 * loop over negative indices. */
static LLVMValueRef clamp_n(kg *g, LLVMValueRef n) {
  LLVMValueRef zero = LLVMConstInt(g->i64, 0, 0);
  return LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSGT, n, zero, ""), n, zero, "n");
}

/* The divisor's forms: floats multiply by 1/div (computed once, in the
 * compute type); integers divide by trunc(div), taken as 1 unless it is in
 * [1, 2^53) so the division can neither trap nor overflow. */
static void divisor(kg *g, kenv *e, LLVMValueRef div) {
  cf_dtype dt = e->key->dtype;
  if (is_float(dt)) {
    LLVMValueRef inv = LLVMBuildFDiv(g->b, LLVMConstReal(g->f64, 1.0), div, "inv");
    e->inv = dt == CF_DT_FLOAT64 ? inv : LLVMBuildFPTrunc(g->b, inv, g->f32, "");
    return;
  }
  LLVMValueRef ok = LLVMBuildAnd(
      g->b, LLVMBuildFCmp(g->b, LLVMRealOGE, div, LLVMConstReal(g->f64, 1.0), ""),
      LLVMBuildFCmp(g->b, LLVMRealOLT, div, LLVMConstReal(g->f64, 9007199254740992.0), ""), "");
  LLVMValueRef d = LLVMBuildSelect(g->b, ok, div, LLVMConstReal(g->f64, 1.0), "");
  e->idiv = LLVMBuildFPToSI(g->b, d, g->i64, "idiv");
  e->fdiv = LLVMBuildSIToFP(g->b, e->idiv, g->f64, "fdiv");
}

static LLVMValueRef new_function(kg *g, const cf_codegen_target *t, const char *name,
                                 LLVMTypeRef *params, unsigned np) {
  LLVMTypeRef ft = LLVMFunctionType(g->vd, params, np, 0);
  LLVMValueRef fn = LLVMAddFunction(g->mod, name, ft);
  g->fn = fn;
  add_attr(g, fn, LLVMAttributeFunctionIndex, "nounwind");
  if (g->ptx) {
    LLVMSetFunctionCallConv(fn, LLVMPTXKernelCallConv); /* .entry in LLVM 19 */
  } else {
    char bits[16];
    snprintf(bits, sizeof bits, "%d", t->vector_bits);
    add_str_attr(g, fn, "target-cpu", t->cpu);
    add_str_attr(g, fn, "target-features", t->features);
    /* Without these, x86 CPUs tuned "prefer 256-bit" split our 512-bit
     * vectors into two ymm halves. */
    add_str_attr(g, fn, "prefer-vector-width", bits);
    add_str_attr(g, fn, "min-legal-vector-width", bits);
  }
  LLVMPositionBuilderAtEnd(g->b, LLVMAppendBasicBlockInContext(g->lc, fn, "entry"));
  return fn;
}

LLVMValueRef cf_kernel_emit_ir(LLVMModuleRef mod, const cf_codegen_target *t,
                               const cf_kernel_key *key) {
  kg G = {0}, *g = &G;
  g->lc = LLVMGetModuleContext(mod);
  g->mod = mod;
  g->b = LLVMCreateBuilderInContext(g->lc);
  g->ptx = t->arch == CF_ARCH_NVPTX;
  g->triple = t->triple;
  g->i8 = LLVMInt8TypeInContext(g->lc);
  g->i16 = LLVMInt16TypeInContext(g->lc);
  g->i32 = LLVMInt32TypeInContext(g->lc);
  g->i64 = LLVMInt64TypeInContext(g->lc);
  g->f16 = LLVMHalfTypeInContext(g->lc);
  g->f32 = LLVMFloatTypeInContext(g->lc);
  g->f64 = LLVMDoubleTypeInContext(g->lc);
  g->ptr = LLVMPointerTypeInContext(g->lc, 0);
  g->vd = LLVMVoidTypeInContext(g->lc);

  char name[64];
  cf_kernel_name(key, name, sizeof name);
  int lanes = cf_kernel_lanes(t, key);
  kenv E = {.key = key}, *e = &E;
  LLVMValueRef fn;
  switch (key->kind) {
  case CF_K_NARY: {
    LLVMTypeRef p[4] = {g->ptr, g->ptr, g->i64, g->f64};
    fn = new_function(g, t, name, p, 4);
    ptr_param(g, 0, false);
    ptr_param(g, 1, true);
    e->dst = LLVMGetParam(fn, 0);
    /* the source pointers are loaded once, before the loop */
    for (int k = 0; k < key->arity; k++) {
      LLVMValueRef pk =
          elem_ptr(g, g->ptr, LLVMGetParam(fn, 1), LLVMConstInt(g->i64, (unsigned)k, 0));
      e->src[k] = LLVMBuildLoad2(g->b, g->ptr, pk, "src");
    }
    if (key->red == CF_RED_MEAN) divisor(g, e, LLVMGetParam(fn, 3));
    elementwise(g, e, clamp_n(g, LLVMGetParam(fn, 2)), lanes, body_nary);
    break;
  }
  case CF_K_ACC: {
    LLVMTypeRef p[3] = {g->ptr, g->ptr, g->i64};
    fn = new_function(g, t, name, p, 3);
    ptr_param(g, 0, false);
    ptr_param(g, 1, true);
    e->dst = LLVMGetParam(fn, 0);
    e->src[0] = LLVMGetParam(fn, 1);
    elementwise(g, e, clamp_n(g, LLVMGetParam(fn, 2)), lanes, body_acc);
    break;
  }
  case CF_K_SCALE: {
    LLVMTypeRef p[3] = {g->ptr, g->i64, g->f64};
    fn = new_function(g, t, name, p, 3);
    ptr_param(g, 0, false);
    e->dst = LLVMGetParam(fn, 0);
    divisor(g, e, LLVMGetParam(fn, 2));
    elementwise(g, e, clamp_n(g, LLVMGetParam(fn, 1)), lanes, body_scale);
    break;
  }
  default: { /* CF_K_QUANT */
    LLVMTypeRef p[6] = {g->ptr, g->ptr, g->ptr, g->ptr, g->i64, g->i64};
    fn = new_function(g, t, name, p, 6);
    for (int i = 0; i < 4; i++)
      ptr_param(g, i, i > 0);
    LLVMValueRef dst = LLVMGetParam(fn, 0), acc = LLVMGetParam(fn, 1), x1 = LLVMGetParam(fn, 2);
    e->x2 = LLVMGetParam(fn, 3);
    LLVMValueRef m = clamp_n(g, LLVMGetParam(fn, 4)), n = clamp_n(g, LLVMGetParam(fn, 5));
    LLVMTypeRef st = store_ty(g, key->dtype);
    if (g->ptx) {
      /* one grid-stride loop over m*n; this thread's row from idx / n */
      e->dst = dst;
      e->acc = acc;
      kloop L;
      LLVMValueRef tid = sreg(g, "llvm.nvvm.read.ptx.sreg.tid.x");
      LLVMValueRef ntid = sreg(g, "llvm.nvvm.read.ptx.sreg.ntid.x");
      LLVMValueRef ctaid = sreg(g, "llvm.nvvm.read.ptx.sreg.ctaid.x");
      LLVMValueRef nctaid = sreg(g, "llvm.nvvm.read.ptx.sreg.nctaid.x");
      LLVMValueRef start = LLVMBuildAdd(g->b, LLVMBuildMul(g->b, ctaid, ntid, ""), tid, "");
      LLVMValueRef idx = loop_begin(g, &L, start, LLVMBuildMul(g->b, m, n, "mn"));
      LLVMValueRef row = LLVMBuildSDiv(g->b, idx, n, "row");
      LLVMValueRef col = LLVMBuildSub(g->b, idx, LLVMBuildMul(g->b, row, n, ""), "col");
      e->s1 = load(g, g->f32, x1, row, 1);
      LLVMValueRef a = LLVMBuildSIToFP(g->b, load(g, g->i32, acc, idx, 1), g->f32, "");
      a = LLVMBuildFMul(g->b, a, e->s1, "");
      a = LLVMBuildFMul(g->b, a, load(g, g->f32, e->x2, col, 1), "");
      store(g, st, from_comp(g, a, key->dtype, 1), dst, idx);
      loop_end(g, &L, LLVMBuildMul(g->b, ntid, nctaid, ""), 0);
    } else {
      kloop R;
      LLVMValueRef i = loop_begin(g, &R, LLVMConstInt(g->i64, 0, 0), m);
      LLVMValueRef off = LLVMBuildMul(g->b, i, n, "row");
      e->acc = elem_ptr(g, g->i32, acc, off);
      e->dst = elem_ptr(g, st, dst, off);
      e->s1 = load(g, g->f32, x1, i, 1);
      elementwise(g, e, n, lanes, body_quant);
      loop_end(g, &R, LLVMConstInt(g->i64, 1, 0), 1); /* unrolled, it doubled compile time */
    }
    break;
  }
  }
  LLVMBuildRetVoid(g->b);
  LLVMDisposeBuilder(g->b);
  return fn;
}
