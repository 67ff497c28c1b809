/* host.h - what the executor does on host memory without a device:
 * deterministic tensor contents and element conversions (fill.c) and the
 * compute ops (compute.c). The CPU backend and the host fallbacks of the
 * device wrappers (backends/device.c) are built on it, the float64
 * reference (check/) fills its inputs with it, and executor.h hands it on
 * to the driver.
 */
#ifndef COLLFUSE_EXECUTOR_HOST_H
#define COLLFUSE_EXECUTOR_HOST_H

#include "runtime.h"

/* ================= fill.c: deterministic data ================= */

/* Pseudo-random, reproducible data: element i depends only on (seed, rank,
 * name, i), never on the buffer layout or the thread that writes it.
 * Floats are uniform in [-1, 1) (never all zeros; float16/bfloat16 values
 * are exactly representable), signed integers in [-8, 8), uint8 in [0, 16):
 * small enough that sums and products over a few ranks stay exact in the
 * type, large enough that a wrong answer shows. */
void cf_fill_random(void *data, cf_dtype dt, int64_t count, uint64_t seed, int rank,
                    const char *name);
/* An Input's or Constant's contents by its `init` (random, default for
 * Input; zeros; ones; iota: element i = i converted to the type) and, for a
 * Constant, `value` (every element = value converted); a sign of life
 * (cf_beat) every 4 Mi elements. */
void cf_fill_node(const cf_node *n, void *data, cf_dtype dt, int64_t count, uint64_t seed,
                  int rank);
/* Elements first .. first + count - 1 of what cf_fill_random / cf_fill_node
 * write, into data[0 .. count): any range of a tensor, bitwise as the whole. */
void cf_fill_random_at(void *data, cf_dtype dt, int64_t first, int64_t count, uint64_t seed,
                       int rank, const char *name);
void cf_fill_node_at(const cf_node *n, void *data, cf_dtype dt, int64_t first, int64_t count,
                     uint64_t seed, int rank);
/* Element i of a buffer as double, and a double stored into element i
 * (round to nearest even for float16/bfloat16, saturating float -> int
 * casts, like numpy's astype on in-range values). */
double cf_load_f64(const void *data, cf_dtype dt, int64_t i);
void cf_store_f64(void *data, cf_dtype dt, int64_t i, double v);
/* Integer element i as int64 (integer dtypes only). */
int64_t cf_load_i64(const void *data, cf_dtype dt, int64_t i);
void cf_store_i64(void *data, cf_dtype dt, int64_t i, int64_t v); /* wraps */

/* ================= compute.c: compute ops ================= */

/* Run compute node n (Constant, MatMul, QuantMatMul, Add, Sub, Mul, Cast,
 * Reshape, Opaque) of graph g for one rank: in[0..n->n_in) are its operands
 * (already computed), out[0..n_out) its preallocated outputs with dtype,
 * shape and count set. MatMul: OpenBLAS sgemm/dgemm for float32/float64,
 * float16/bfloat16 through float32, integers exactly (int8 accumulates in
 * int32, wrapping as the type does). QuantMatMul: int8 x int8 -> int32 (+
 * int32 bias), then the codegen QUANT epilogue. Add/Sub/Mul broadcast like
 * numpy. Opaque fills its outputs with cf_fill_random(seed, rank, name of
 * the node + ":" + port). Thread-safe: ranks call it concurrently. */
#define CF_COMPUTE_DETERMINISTIC 1u /* flags: row-invariant float products (slower than BLAS) */
cf_status cf_compute_run(cf_context *ctx, const cf_graph *g, const cf_node *n, const cf_tensor *in,
                         cf_tensor *out, int rank, uint64_t seed, unsigned flags);

/* The product of a MatMul-like node n on blocks of rows (the fused
 * MatMul+collective ops pipeline over them): out (r, n) = x1 (r, k) @ x2
 * (k, n) with MatMul's rules, plus bias (n) on every row when given; with
 * x1_scale (r, 1) and x2_scale (1, n) the quantized form (int8 x int8 ->
 * int32 + int32 bias -> QUANT epilogue -> out's bfloat16/float16). The
 * tensors' shapes describe the blocks; n only names the node in errors.
 * With CF_COMPUTE_DETERMINISTIC a row's result never depends on the rows
 * computed with it. */
cf_status cf_compute_product(cf_context *ctx, const cf_graph *g, const cf_node *n,
                             const cf_tensor *x1, const cf_tensor *x2, const cf_tensor *x1_scale,
                             const cf_tensor *x2_scale, const cf_tensor *bias, cf_tensor *out,
                             unsigned flags);

#endif /* COLLFUSE_EXECUTOR_HOST_H */
