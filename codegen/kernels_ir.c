/* kernels_ir.c - LLVM IR for one reduction kernel (n-ary, accumulate,
 * scale, QuantMatMul epilogue), for the host or for NVPTX.
 *
 * Host kernels are explicit vector code: a main loop over <L x T> vectors,
 * L = the host's widest register / lane width (lane_bits: float32 for
 * float16 arithmetic, 16 bits for bfloat16 pairs and 16-bit max/min),
 * then a scalar tail; both loops carry metadata that keeps the optimizer
 * from vectorizing or unrolling them again, which only cost compile time.
 * Writing the vectors ourselves, rather than leaving a scalar loop to the
 * loop vectorizer, makes the width a decision of ours, the same for every
 * dtype, and testable at exactly L-1, L and L+1. NVPTX kernels are scalar
 * per thread in a grid-stride loop (tid/ntid/ctaid/nctaid sregs).
 *
 * Element semantics: integers wrap (unsigned ones compare and divide
 * unsigned; bool's sum and prod are or and and, cf_dtype_reduction);
 * float16/bfloat16 are widened to float32,
 * combined there, and rounded back to nearest even (bfloat16 in even/odd
 * pairs, by vcvtne2ps2bf16 where the host has it, else by integer
 * arithmetic that keeps NaN a NaN); float max/min propagate NaN with
 * -0 < +0: vrangeps plus a NaN fix-up on AVX512DQ hosts, else
 * llvm.maximum/minimum with a vmaxps fast path for NaN-free blocks
 * (maxmin_fast), and float16/bfloat16 read off integer max/min of their
 * bit patterns (half_maxmin); n-ary kernels with a destination of >= 4 MiB
 * use non-temporal stores; integer means divide exactly, truncating
 * toward zero.
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
  int vector_bits; /* the target's widest registers */
  bool dq, vl;     /* x86 AVX512DQ (vrangeps, vfpclassps), AVX512VL (them below 512 bits) */
  bool bf16;       /* x86 AVX512_BF16 (vcvtne2ps2bf16) */
  LLVMTypeRef i8, i16, i32, i64, f16, f32, f64, ptr, vd;
} kg;

typedef struct kenv {
  const cf_kernel_key *key;
  LLVMValueRef dst, src[CF_MAX_ARITY]; /* NARY: the loaded source pointers */
  LLVMValueRef dsts[CF_MAX_ARITY];     /* NARY: where the result goes (a key's outs
                                          destinations, loaded; otherwise dst alone) */
  int ndst;
  LLVMValueRef inv;                    /* float mean/scale: 1/div in the compute type */
  LLVMValueRef fdiv;                   /* integer mean/scale (<= 32 bits): div as an exact double */
  LLVMValueRef idiv;                   /* integer mean/scale (64 bits): div as i64 >= 1 */
  LLVMValueRef acc, x2, s1;            /* QUANT: this row's acc and x1_scale, x2_scale */
  unsigned nt_align;                   /* NARY: non-zero in the streaming loop, whose vector
                                          stores are !nontemporal and aligned to this */
} kenv;

typedef void (*body_fn)(kg *g, kenv *e, LLVMValueRef idx, int lanes);

/* ---- types and constants ---- */

static int storage_bits(cf_dtype dt) { return cf_dtype_size(dt) * 8; }
static bool is_half_float(cf_dtype dt) { return dt == CF_DT_FLOAT16 || dt == CF_DT_BFLOAT16; }
static bool is_float(cf_dtype dt) { return cf_dtype_is_float(dt); }

static LLVMTypeRef store_ty(kg *g, cf_dtype dt) {
  if (dt == CF_DT_FLOAT16) return g->f16;
  if (dt == CF_DT_FLOAT32) return g->f32;
  if (dt == CF_DT_FLOAT64) return g->f64;
  switch (storage_bits(dt)) { /* integers, and bfloat16's bits */
  case 8: return g->i8;
  case 16: return g->i16;
  case 32: return g->i32;
  default: return g->i64;
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

/* scalar s splatted to as many lanes as v has (s itself for a scalar v) */
static LLVMValueRef splat_like(kg *g, LLVMValueRef s, LLVMValueRef v) {
  LLVMTypeRef t = LLVMTypeOf(v);
  return splat(g, s, LLVMGetTypeKind(t) == LLVMVectorTypeKind ? (int)LLVMGetVectorSize(t) : 1);
}

static bool half_bits_op(cf_dtype dt, cf_reduction red) {
  return is_half_float(dt) && (red == CF_RED_MAX || red == CF_RED_MIN);
}

/* Bits of one lane of key's host vector loop: float16/bfloat16 max/min
 * work on their 16-bit patterns (half_maxmin), the other bfloat16
 * kernels on pairs of elements (bf16_load), float16 and QUANT in float32. */
static int lane_bits(const cf_kernel_key *key) {
  if (key->kind == CF_K_QUANT) return 32;
  if (key->dtype == CF_DT_BFLOAT16) return 16;
  if (key->dtype == CF_DT_FLOAT16)
    return key->kind != CF_K_SCALE && half_bits_op(key->dtype, key->red) ? 16 : 32;
  return storage_bits(key->dtype);
}

int cf_kernel_lanes(const cf_codegen_target *t, const cf_kernel_key *key) {
  if (t->arch == CF_ARCH_NVPTX) return 1;
  int bits = lane_bits(key);
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

/* Whether AVX-512 instructions may work on vectors of bits: 512 bits
 * within the target's width, 128 and 256 with AVX512VL. */
static bool avx512_width(kg *g, int bits) {
  return bits <= g->vector_bits && (bits == 512 || (g->vl && (bits == 128 || bits == 256)));
}

/* if (cond) goto rare; else goto usual; with rare marked unlikely */
static void weighted_br(kg *g, LLVMValueRef cond, LLVMBasicBlockRef rare, LLVMBasicBlockRef usual) {
  LLVMValueRef br = LLVMBuildCondBr(g->b, cond, rare, usual);
  const char *bw = "branch_weights";
  LLVMMetadataRef w[3] = {LLVMMDStringInContext2(g->lc, bw, strlen(bw)),
                          LLVMValueAsMetadata(LLVMConstInt(g->i32, 1, 0)),
                          LLVMValueAsMetadata(LLVMConstInt(g->i32, 1000, 0))};
  LLVMSetMetadata(br, LLVMGetMDKindIDInContext(g->lc, "prof", 4),
                  LLVMMetadataAsValue(g->lc, LLVMMDNodeInContext2(g->lc, w, 3)));
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

/* A store of v at element idx of base (elements of type et; v may be a
 * vector of another type, as bf16_store's pairs are). In the NARY
 * streaming loop vectors are !nontemporal and aligned (x86 emits
 * vmovntps/vmovntdq only for aligned addresses); its scalar peel and tail,
 * and every other loop, store ordinarily. */
static void store_nt(kg *g, kenv *e, LLVMTypeRef et, LLVMValueRef v, LLVMValueRef base,
                     LLVMValueRef idx) {
  if (!e->nt_align || LLVMGetTypeKind(LLVMTypeOf(v)) != LLVMVectorTypeKind) {
    LLVMValueRef s = LLVMBuildStore(g->b, v, elem_ptr(g, et, base, idx));
    LLVMSetAlignment(s, elem_align(g, et));
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

/* float32 -> bfloat16 rounded to nearest even, in the high 16 bits of an
 * i32 (the low 16 are left over); a NaN gets its quiet bit set instead
 * of being rounded, so that its low payload bits can neither make it Inf
 * nor carry into the sign. */
static LLVMValueRef bf16_round_hi(kg *g, LLVMValueRef v, int lanes) {
  LLVMTypeRef it = vec(g->i32, lanes);
  LLVMValueRef bits = LLVMBuildBitCast(g->b, v, it, "");
  LLVMValueRef lsb = LLVMBuildAnd(g->b, LLVMBuildLShr(g->b, bits, cint(g, g->i32, 16, lanes), ""),
                                  cint(g, g->i32, 1, lanes), "");
  LLVMValueRef r = LLVMBuildAdd(g->b, bits, cint(g, g->i32, 0x7fff, lanes), "");
  r = LLVMBuildAdd(g->b, r, lsb, "rne");
  LLVMValueRef nan = LLVMBuildFCmp(g->b, LLVMRealUNO, v, v, "isnan");
  LLVMValueRef q = LLVMBuildOr(g->b, bits, cint(g, g->i32, 0x400000, lanes), "");
  return LLVMBuildSelect(g->b, nan, q, r, "");
}

static LLVMValueRef f32_to_bf16(kg *g, LLVMValueRef v, int lanes) {
  LLVMValueRef r = LLVMBuildLShr(g->b, bf16_round_hi(g, v, lanes), cint(g, g->i32, 16, lanes), "");
  return LLVMBuildTrunc(g->b, r, vec(g->i16, lanes), "");
}

static LLVMValueRef from_comp(kg *g, LLVMValueRef v, cf_dtype dt, int lanes) {
  if (dt == CF_DT_FLOAT16) return LLVMBuildFPTrunc(g->b, v, vec(g->f16, lanes), "");
  if (dt == CF_DT_BFLOAT16) return f32_to_bf16(g, v, lanes);
  return v;
}

/* A host vector of lanes bfloat16 elements as lanes/2 i32 pairs: the low
 * halves (even elements) shifted up and the high halves (odd elements)
 * masked are float32 values already. So widening takes two bit
 * operations and no shuffle, where zext <N x i16> to <N x i32> takes
 * cross-lane vpmovzxwd; the even and odd elements are combined apart
 * and merged again by bf16_store, so the order never changes. */
static void bf16_load(kg *g, LLVMValueRef base, LLVMValueRef idx, int lanes, LLVMValueRef p[2]) {
  int h = lanes / 2;
  LLVMValueRef w = LLVMBuildLoad2(g->b, vec(g->i32, h), elem_ptr(g, g->i16, base, idx), "");
  LLVMSetAlignment(w, 1);
  LLVMTypeRef ft = vec(g->f32, h);
  p[0] = LLVMBuildBitCast(g->b, LLVMBuildShl(g->b, w, cint(g, g->i32, 16, h), ""), ft, "even");
  p[1] =
      LLVMBuildBitCast(g->b, LLVMBuildAnd(g->b, w, cint(g, g->i32, 0xffff0000u, h), ""), ft, "odd");
}

/* The even and odd float32 results p[0..1] rounded to bfloat16 and merged
 * back into lanes/2 i32 pairs, by integer arithmetic. */
static LLVMValueRef bf16_merge_int(kg *g, LLVMValueRef p[2], int h) {
  LLVMValueRef lo = LLVMBuildLShr(g->b, bf16_round_hi(g, p[0], h), cint(g, g->i32, 16, h), "");
  LLVMValueRef hi =
      LLVMBuildAnd(g->b, bf16_round_hi(g, p[1], h), cint(g, g->i32, 0xffff0000u, h), "");
  return LLVMBuildOr(g->b, hi, lo, "");
}

/* The same with AVX512_BF16: vcvtne2ps2bf16 rounds both halves to nearest
 * even in one instruction (a NaN stays NaN, quieted), and one vpermw puts
 * the even and odd elements back in place. But it flushes subnormal
 * results to zero (it runs with DAZ semantics), so a block with one takes
 * the integer rounding instead: one vfpclassps per half decides. */
static LLVMValueRef bf16_merge_native(kg *g, LLVMValueRef p[2], int h) {
  /* vfpclassps class 0x20: denormal (llvm.is.fpclass becomes 3 integer
   * operations per vector instead) */
  char fpc[40];
  snprintf(fpc, sizeof fpc, "llvm.x86.avx512.fpclass.ps.%d", h * 32);
  LLVMValueRef tst[2] = {NULL, LLVMConstInt(g->i32, 0x20, 0)};
  LLVMValueRef sub = NULL;
  for (int j = 0; j < 2; j++) {
    tst[0] = p[j];
    LLVMValueRef c = call_intrinsic(g, fpc, NULL, tst, 2);
    sub = sub ? LLVMBuildOr(g->b, sub, c, "") : c;
  }
  LLVMValueRef any = LLVMBuildICmp(
      g->b, LLVMIntNE, LLVMBuildBitCast(g->b, sub, LLVMIntTypeInContext(g->lc, (unsigned)h), ""),
      LLVMConstInt(LLVMIntTypeInContext(g->lc, (unsigned)h), 0, 0), "subnormal");
  LLVMBasicBlockRef fast = LLVMAppendBasicBlockInContext(g->lc, g->fn, "bf16cvt");
  LLVMBasicBlockRef slow = LLVMAppendBasicBlockInContext(g->lc, g->fn, "bf16sub");
  LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(g->lc, g->fn, "bf16st");
  weighted_br(g, any, slow, fast);
  LLVMPositionBuilderAtEnd(g->b, fast);
  char name[48];
  snprintf(name, sizeof name, "llvm.x86.avx512bf16.cvtne2ps2bf16.%d", h * 32);
  LLVMValueRef args[2] = {p[1], p[0]}; /* the second operand's go to the low half */
  LLVMValueRef c = call_intrinsic(g, name, NULL, args, 2);
  c = LLVMBuildBitCast(g->b, c, vec(g->i16, 2 * h), "");
  LLVMValueRef mask[MAX_LANES];
  for (int i = 0; i < 2 * h; i++) /* even i from the low half, odd from the high */
    mask[i] = LLVMConstInt(g->i32, (unsigned)(i / 2 + (i & 1) * h), 0);
  c = LLVMBuildShuffleVector(g->b, c, LLVMGetPoison(LLVMTypeOf(c)),
                             LLVMConstVector(mask, (unsigned)(2 * h)), "");
  c = LLVMBuildBitCast(g->b, c, vec(g->i32, h), "");
  LLVMBuildBr(g->b, join);
  LLVMPositionBuilderAtEnd(g->b, slow);
  LLVMValueRef r = bf16_merge_int(g, p, h);
  LLVMBasicBlockRef slow_end = LLVMGetInsertBlock(g->b);
  LLVMBuildBr(g->b, join);
  LLVMPositionBuilderAtEnd(g->b, join);
  LLVMValueRef phi = LLVMBuildPhi(g->b, vec(g->i32, h), "");
  LLVMValueRef vals[2] = {c, r};
  LLVMBasicBlockRef bbs[2] = {fast, slow_end};
  LLVMAddIncoming(phi, vals, bbs, 2);
  return phi;
}

static void bf16_store(kg *g, kenv *e, LLVMValueRef p[2], LLVMValueRef base, LLVMValueRef idx,
                       int lanes) {
  int h = lanes / 2;
  LLVMValueRef m = g->bf16 && g->dq && avx512_width(g, h * 32) ? bf16_merge_native(g, p, h)
                                                               : bf16_merge_int(g, p, h);
  store_nt(g, e, g->i16, m, base, idx);
}

/* The value at idx in the compute type, as parts[0..return): one vector
 * (or scalar), or bfloat16's even and odd elements. */
static int load_comp(kg *g, cf_dtype dt, LLVMValueRef base, LLVMValueRef idx, int lanes,
                     LLVMValueRef parts[2]) {
  if (dt == CF_DT_BFLOAT16 && lanes > 1) {
    bf16_load(g, base, idx, lanes, parts);
    return 2;
  }
  parts[0] = to_comp(g, load(g, store_ty(g, dt), base, idx, lanes), dt, lanes);
  return 1;
}

static void store_comp(kg *g, kenv *e, cf_dtype dt, LLVMValueRef *parts, int np, LLVMValueRef base,
                       LLVMValueRef idx, int lanes) {
  if (np == 2)
    bf16_store(g, e, parts, base, idx, lanes);
  else
    store_nt(g, e, store_ty(g, dt), from_comp(g, parts[0], dt, lanes), base, idx);
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
  bool u = cf_dtype_is_unsigned(dt);
  switch (cf_dtype_reduction(dt, red)) { /* bool: or, and */
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
  weighted_br(g, any, slow, join);
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

/* Where the vmaxps fast path pays when vrangeps is missing (measured on
 * znver5, 256 KiB, against the exact chain): 1.07x at 4 sources, 1.7x at
 * 8; even with 2 sources and 0.94x for the accumulate, which keep the
 * exact chain. */
static bool fast_maxmin_op(kg *g, cf_dtype dt, cf_reduction red, int k, int lanes) {
  return !g->ptx && lanes > 1 && (red == CF_RED_MAX || red == CF_RED_MIN) &&
         (dt == CF_DT_FLOAT32 || dt == CF_DT_FLOAT64) && k >= 3;
}

/* ---- float max/min with AVX512DQ's vrangeps/vrangepd ----
 * vrange with imm 5 (max) or 4 (min; sign from the comparison) orders
 * -0 below +0 exactly as llvm.maximum/minimum do, but a quiet NaN operand
 * is ignored (like maxNum). So a pair is one vrange, one unordered
 * compare and a masked add that puts a NaN (a + b: the first NaN operand,
 * quieted) in the lanes with one: 3 instructions where LLVM's lowering of
 * llvm.maximum takes 6. Checked against the reference on every pair of
 * specials, NaN payloads and signed zeros included (test_specials). */
static bool range_op(kg *g, cf_dtype dt, cf_reduction red, int lanes) {
  return g->dq && lanes > 1 && (red == CF_RED_MAX || red == CF_RED_MIN) &&
         (dt == CF_DT_FLOAT32 || dt == CF_DT_FLOAT64) && avx512_width(g, lanes * storage_bits(dt));
}

static LLVMValueRef range_pair(kg *g, cf_reduction red, LLVMValueRef a, LLVMValueRef b) {
  LLVMTypeRef vt = LLVMTypeOf(a);
  bool dbl = LLVMGetTypeKind(LLVMGetElementType(vt)) == LLVMDoubleTypeKind;
  unsigned n = LLVMGetVectorSize(vt);
  int bits = (int)n * (dbl ? 64 : 32);
  char name[48];
  snprintf(name, sizeof name, "llvm.x86.avx512.mask.range.%s.%d", dbl ? "pd" : "ps", bits);
  LLVMTypeRef mt = n > 8 ? g->i16 : g->i8;
  LLVMValueRef imm = LLVMConstInt(g->i32, red == CF_RED_MAX ? 5 : 4, 0);
  LLVMValueRef rounding = LLVMConstInt(g->i32, 4, 0); /* the current mode */
  LLVMValueRef args[6] = {a, b, imm, a, LLVMConstAllOnes(mt), rounding};
  LLVMValueRef r = call_intrinsic(g, name, NULL, args, bits == 512 ? 6 : 5);
  LLVMValueRef nan = LLVMBuildFCmp(g->b, LLVMRealUNO, a, b, "");
  return LLVMBuildSelect(g->b, nan, LLVMBuildFAdd(g->b, a, b, ""), r, "");
}

/* x[0..k) folded as a balanced tree of range_pair (max/min of values
 * other than NaN is associative, so any order gives the same bits). */
static LLVMValueRef range_maxmin(kg *g, cf_reduction red, LLVMValueRef *x, int k) {
  LLVMValueRef t[CF_MAX_ARITY];
  for (int i = 0; i < k; i++)
    t[i] = x[i];
  for (int c = k; c > 1;) {
    int o = 0;
    for (int i = 0; i + 1 < c; i += 2)
      t[o++] = range_pair(g, red, t[i], t[i + 1]);
    if (c & 1) t[o++] = t[c - 1];
    c = o;
  }
  return t[0];
}

/* ---- float16/bfloat16 max/min on their bit patterns ----
 * Both are sign and magnitude in 16 bits, so their maximum and minimum
 * can be read off three integer reductions of the raw patterns, with no
 * conversion: S = smax, U = umin, V = umax over all sources.
 *   max: S >= 0 (some source is positive or +0): S, the largest positive;
 *        else all are negative and the smallest magnitude, U, is the max.
 *   min: V has the sign bit (some source is negative, and negatives are
 *        above positives unsigned): V, the largest negative magnitude;
 *        else U, the smallest positive.
 * -0 (0x8000) is below +0 in both (max(-0, +0) = +0, min = -0), as
 * llvm.maximum/minimum say. NaN wins: a positive NaN makes S > Inf, a
 * negative one V > -Inf (unsigned); either then is the result, quieted.
 * Three vpmaxsw/vpminuw/vpmaxuw per source, whose loads fold in, on full
 * 16-bit vectors: no fpext/fptrunc (float16 max through float32 let
 * InstCombine narrow it to a half maximum that x86 scalarizes). The same
 * IR serves the scalar tails and NVPTX, so every path gives the same bits. */
static LLVMValueRef half_maxmin(kg *g, cf_reduction red, cf_dtype dt, LLVMValueRef *x, int k,
                                int lanes) {
  LLVMTypeRef t = LLVMTypeOf(x[0]);
  LLVMValueRef s = x[0], u = x[0], v = x[0];
  for (int i = 1; i < k; i++) {
    LLVMValueRef as[2] = {s, x[i]}, au[2] = {u, x[i]}, av[2] = {v, x[i]};
    s = call_intrinsic(g, "llvm.smax", t, as, 2);
    u = call_intrinsic(g, "llvm.umin", t, au, 2);
    v = call_intrinsic(g, "llvm.umax", t, av, 2);
  }
  unsigned inf = dt == CF_DT_FLOAT16 ? 0x7c00 : 0x7f80, quiet = dt == CF_DT_FLOAT16 ? 0x200 : 0x40;
  LLVMValueRef zero = LLVMConstNull(t), r;
  if (red == CF_RED_MAX)
    r = LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSGE, s, zero, ""), s, u, "max");
  else
    r = LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, v, zero, ""), v, u, "min");
  LLVMValueRef q = cint(g, g->i16, quiet, lanes);
  LLVMValueRef nneg = LLVMBuildICmp(g->b, LLVMIntUGT, v, cint(g, g->i16, 0x8000 | inf, lanes), "");
  r = LLVMBuildSelect(g->b, nneg, LLVMBuildOr(g->b, v, q, ""), r, "");
  LLVMValueRef npos = LLVMBuildICmp(g->b, LLVMIntSGT, s, cint(g, g->i16, inf, lanes), "");
  return LLVMBuildSelect(g->b, npos, LLVMBuildOr(g->b, s, q, ""), r, "");
}

/* Integer v (any width, unsigned dtypes zero- and the others
 * sign-extended) divided by the kernel's divisor, truncated toward zero,
 * in dtype dt's storage type. Up to 32-bit types divide in double: v and
 * div are exact there and a correctly rounded quotient never crosses an
 * integer, so truncating it is exact integer division, and vdivpd beats
 * scalarized idiv. */
static LLVMValueRef int_div(kg *g, kenv *e, LLVMValueRef v, cf_dtype dt, int lanes) {
  bool u = cf_dtype_is_unsigned(dt);
  if (storage_bits(dt) == 64)
    return u ? LLVMBuildUDiv(g->b, v, splat(g, e->idiv, lanes), "")
             : LLVMBuildSDiv(g->b, v, splat(g, e->idiv, lanes), "");
  LLVMTypeRef dv = vec(g->f64, lanes);
  LLVMValueRef f = u ? LLVMBuildUIToFP(g->b, v, dv, "") : LLVMBuildSIToFP(g->b, v, dv, "");
  f = LLVMBuildFDiv(g->b, f, splat(g, e->fdiv, lanes), "");
  LLVMValueRef q = u ? LLVMBuildFPToUI(g->b, f, vec(g->i32, lanes), "") /* uint32: up to 2^32-1 */
                     : LLVMBuildFPToSI(g->b, f, vec(g->i32, lanes), "");
  return storage_bits(dt) < 32 ? LLVMBuildTrunc(g->b, q, vec(store_ty(g, dt), lanes), "") : q;
}

/* ---- kernel bodies: one vector (lanes > 1) or one element at idx ---- */

static void body_nary(kg *g, kenv *e, LLVMValueRef idx, int lanes) {
  cf_dtype dt = e->key->dtype;
  cf_reduction red = e->key->red;
  LLVMTypeRef st = store_ty(g, dt);
  LLVMValueRef r;
  /* the streaming loop fetches every source CF_STREAM_PREFETCH bytes ahead
   * (read, keep in all cache levels, data) */
  for (int k = 0; e->nt_align && lanes > 1 && k < e->key->arity; k++) {
    LLVMValueRef ip = LLVMBuildAdd(
        g->b, idx, LLVMConstInt(g->i64, CF_STREAM_PREFETCH / (storage_bits(dt) / 8), 0), "");
    LLVMValueRef args[4] = {elem_ptr(g, st, e->src[k], ip), LLVMConstInt(g->i32, 0, 0),
                            LLVMConstInt(g->i32, 3, 0), LLVMConstInt(g->i32, 1, 0)};
    call_intrinsic(g, "llvm.prefetch", g->ptr, args, 4);
  }
  if (red == CF_RED_MEAN && !is_float(dt)) {
    /* exact sum in int64 (int64 itself wraps), then divide */
    LLVMTypeRef wt = vec(g->i64, lanes);
    r = NULL;
    for (int k = 0; k < e->key->arity; k++) {
      LLVMValueRef x = load(g, st, e->src[k], idx, lanes);
      if (storage_bits(dt) < 64)
        x = cf_dtype_is_unsigned(dt) ? LLVMBuildZExt(g->b, x, wt, "") : LLVMBuildSExt(g->b, x, wt, "");
      r = r ? LLVMBuildAdd(g->b, r, x, "") : x;
    }
    r = int_div(g, e, r, dt, lanes);
  } else if (half_bits_op(dt, red)) {
    LLVMValueRef x[CF_MAX_ARITY];
    for (int k = 0; k < e->key->arity; k++)
      x[k] = load(g, g->i16, e->src[k], idx, lanes);
    r = half_maxmin(g, red, dt, x, e->key->arity, lanes);
  } else if (range_op(g, dt, red, lanes)) {
    LLVMValueRef x[CF_MAX_ARITY];
    for (int k = 0; k < e->key->arity; k++)
      x[k] = load(g, st, e->src[k], idx, lanes);
    r = range_maxmin(g, red, x, e->key->arity);
  } else if (fast_maxmin_op(g, dt, red, e->key->arity, lanes)) {
    LLVMValueRef x[CF_MAX_ARITY];
    for (int k = 0; k < e->key->arity; k++)
      x[k] = to_comp(g, load(g, st, e->src[k], idx, lanes), dt, lanes);
    r = from_comp(g, maxmin_fast(g, red, dt, x, e->key->arity, lanes), dt, lanes);
  } else {
    LLVMValueRef p[2], x[2];
    int np = load_comp(g, dt, e->src[0], idx, lanes, p);
    for (int k = 1; k < e->key->arity; k++) {
      load_comp(g, dt, e->src[k], idx, lanes, x);
      for (int j = 0; j < np; j++)
        p[j] = combine(g, red, dt, p[j], x[j]);
    }
    for (int j = 0; j < np && red == CF_RED_MEAN; j++)
      p[j] = LLVMBuildFMul(g->b, p[j], splat_like(g, e->inv, p[j]), "mean");
    for (int d = 0; d < e->ndst; d++)
      store_comp(g, e, dt, p, np, e->dsts[d], idx, lanes);
    return;
  }
  for (int d = 0; d < e->ndst; d++)
    store_nt(g, e, st, r, e->dsts[d], idx);
}

static void body_acc(kg *g, kenv *e, LLVMValueRef idx, int lanes) {
  cf_dtype dt = e->key->dtype;
  cf_reduction red = e->key->red == CF_RED_MEAN ? CF_RED_SUM : e->key->red;
  if (half_bits_op(dt, red)) {
    LLVMValueRef x[2] = {load(g, g->i16, e->dst, idx, lanes),
                         load(g, g->i16, e->src[0], idx, lanes)};
    store(g, g->i16, half_maxmin(g, red, dt, x, 2, lanes), e->dst, idx);
    return;
  }
  LLVMValueRef a[2], b[2];
  int np = load_comp(g, dt, e->dst, idx, lanes, a);
  load_comp(g, dt, e->src[0], idx, lanes, b);
  for (int j = 0; j < np; j++)
    a[j] = range_op(g, dt, red, lanes) ? range_pair(g, red, a[j], b[j])
                                       : combine(g, red, dt, a[j], b[j]);
  store_comp(g, e, dt, a, np, e->dst, idx, lanes);
}

static void body_scale(kg *g, kenv *e, LLVMValueRef idx, int lanes) {
  cf_dtype dt = e->key->dtype;
  if (!is_float(dt)) {
    LLVMTypeRef st = store_ty(g, dt);
    store(g, st, int_div(g, e, load(g, st, e->dst, idx, lanes), dt, lanes), e->dst, idx);
    return;
  }
  LLVMValueRef p[2];
  int np = load_comp(g, dt, e->dst, idx, lanes, p);
  for (int j = 0; j < np; j++)
    p[j] = LLVMBuildFMul(g->b, p[j], splat_like(g, e->inv, p[j]), "");
  store_comp(g, e, dt, p, np, e->dst, idx, lanes);
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
  if (lanes > 1 && e->key->kind == CF_K_NARY && e->key->stream) {
    /* Streaming path (a stream key; the executor decides when: cf_streams):
     * a scalar peel up to the first 64-byte aligned dst element, the vector
     * loop with non-temporal stores, a store fence (streaming stores are
     * weakly ordered), the scalar tail. Only when dst is element-aligned,
     * so that it can be peeled to 64, and every other destination is as
     * far from a 64-byte line as dst (one peel aligns them all). */
    int es = storage_bits(e->key->dtype) / 8;
    /* float16 sums compute in float32, whose vectors narrow to half a
     * register on the way back; x86 folds that narrowing into the store
     * (vcvtps2ph to memory), which has no non-temporal form, so the
     * streaming loop takes two registers' worth: one full-width store */
    int nl = lanes * es < 64 && lanes < MAX_LANES ? 64 / es : lanes;
    LLVMValueRef addr = LLVMBuildPtrToInt(g->b, e->dst, g->i64, "");
    LLVMValueRef mis = LLVMBuildAnd(g->b, addr, LLVMConstInt(g->i64, 63, 0), "mis");
    LLVMValueRef ealn = LLVMBuildICmp(
        g->b, LLVMIntEQ, LLVMBuildAnd(g->b, mis, LLVMConstInt(g->i64, (unsigned)es - 1, 0), ""),
        zero, "");
    for (int d = 1; d < e->ndst; d++) {
      LLVMValueRef a = LLVMBuildPtrToInt(g->b, e->dsts[d], g->i64, "");
      LLVMValueRef m = LLVMBuildAnd(g->b, a, LLVMConstInt(g->i64, 63, 0), "");
      ealn = LLVMBuildAnd(g->b, ealn, LLVMBuildICmp(g->b, LLVMIntEQ, m, mis, ""), "");
    }
    /* it streams whenever the peel leaves a vector to store */
    int64_t min_n = 2 * 64;
    LLVMValueRef big = LLVMBuildICmp(g->b, LLVMIntSGE, n,
                                     LLVMConstInt(g->i64, (unsigned long long)min_n, 0), "");
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
  g->vector_bits = t->vector_bits;
  g->dq = cf_target_has(t, "avx512dq"); /* false for NVPTX */
  g->vl = cf_target_has(t, "avx512vl");
  g->bf16 = cf_target_has(t, "avx512bf16");
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
    ptr_param(g, 0, key->outs > 0); /* with outs: the array of destinations */
    ptr_param(g, 1, true);
    e->ndst = key->outs ? key->outs : 1;
    for (int d = 0; d < e->ndst; d++)
      e->dsts[d] = key->outs ? LLVMBuildLoad2(g->b, g->ptr,
                                              elem_ptr(g, g->ptr, LLVMGetParam(fn, 0),
                                                       LLVMConstInt(g->i64, (unsigned)d, 0)),
                                              "dst")
                             : LLVMGetParam(fn, 0);
    e->dst = e->dsts[0];
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
