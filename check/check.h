/* check/check.h - what only checking a run needs: the float64 reference
 * evaluation of a graph (reference.c), the comparison of a run's outputs
 * with it (verify.c) and NumPy .npy files (npy.c). `collfuse run` (--verify,
 * --input, --save) and the tests use it; the library (libcollfuse) does
 * not carry it: it is its own static library, collfuse_check.
 */
#ifndef COLLFUSE_CHECK_H
#define COLLFUSE_CHECK_H

#include "../executor/executor.h"

/* ================= npy.c: NumPy .npy files ================= */

/* Read a .npy file (format 1.0/2.0/3.0, C order, little or big endian;
 * bool/int8/uint8/int16/int32/int64/float16/float32/float64; for bfloat16,
 * what ml_dtypes' np.save writes ('<V2' or '|V2' raw 2-byte records) and
 * '<u2' raw bits). It must hold exactly dt with shape *shape, else an error
 * naming the file, the expected and the found dtype/shape. *data is
 * malloc'd. */
cf_status cf_npy_read(cf_context *ctx, const char *path, cf_dtype dt, const cf_shape *shape,
                      void **data);
/* cf_npy_read that gives up after timeout_s seconds with CF_ERR_RUNTIME:
 * with a timeout (> 0) path may also be a FIFO, and one with no writer does
 * not hang the run; without (0), what is not a regular file is refused. */
cf_status cf_npy_read_timeout(cf_context *ctx, const char *path, cf_dtype dt, const cf_shape *shape,
                              double timeout_s, void **data);
/* Write data as a .npy file (format 1.0, little endian; bfloat16 as '<V2'
 * raw records, which ml_dtypes reads back with .view(bfloat16)) through
 * cf_out_open: a temporary beside path renamed over it. */
cf_status cf_npy_write(cf_context *ctx, const char *path, cf_dtype dt, const cf_shape *shape,
                       const void *data);

/* ================= reference.c, verify.c: float64 reference ================= */

/* The reference value of one output on one rank: val[i] is the float64
 * result, mag[i] a bound on the magnitude of what was summed to get it
 * (sum of |terms| through the graph, so the tolerance scales with the
 * conditioning, as a forward error bound does); integer outputs are exact
 * in ival[] (wrapping as the type does) and val/mag are NULL. */
typedef struct cf_ref_value {
  cf_dtype dtype;
  cf_shape shape;
  int64_t count;
  double *val, *mag; /* float dtypes */
  int64_t *ival;     /* integer dtypes */
} cf_ref_value;

/* Evaluate the unfused graph g (verified and inferred; fused ops are
 * evaluated by their definition too) for ranks 0..in->ranks-1 in float64
 * (integers exactly). Collectives follow docs/format.md with groups;
 * Reduce's non-root outputs are undefined and left NaN/0 (verify skips
 * them). out[rank * n_outputs + j] is the j-th Output node (node order) of
 * rank; the caller frees with cf_ref_free(out, count). */
cf_status cf_reference_run(cf_context *ctx, const cf_graph *g, const cf_inputs *in, uint64_t seed,
                           cf_ref_value **out, int *n_outputs);
void cf_ref_free(cf_ref_value *v, int count);
/* The most memory cf_reference_run holds for g on ranks ranks: the live
 * float64 values (value and magnitude, 16 bytes an element; integers 8)
 * of every rank, the Output copies it returns, and the buffers a node uses
 * while it runs (an upper bound for fused MatMul+collective ops). */
int64_t cf_reference_bytes(const cf_graph *g, int ranks);

/* Whether every op of g is elementwise (element e of each output depends
 * on element e of its operands alone: Input, Constant, Opaque, Output,
 * Add/Sub/Mul without broadcasting, Cast, Reshape, AllReduce, Reduce,
 * Broadcast, CollectivePermute, FusedAllReduce), so that the reference can
 * be evaluated a window of elements at a time. */
bool cf_reference_streams(const cf_graph *g);
/* cf_reference_run on elements [lo, hi) of every value of g (each clipped
 * to its own size; g must stream): out[rank * n_outputs + j] holds Output j's
 * elements lo .. min(hi, count) - 1 (count 0 beyond its end), bitwise what
 * the whole run gives there. An Input that in does not give is regenerated
 * from seed as the executor fills it (cf_fill_node). */
cf_status cf_reference_window(cf_context *ctx, const cf_graph *g, const cf_inputs *in,
                              uint64_t seed, int64_t lo, int64_t hi, cf_ref_value **out,
                              int *n_outputs);
/* What cf_reference_window holds at most for windows of `window` elements. */
int64_t cf_reference_window_bytes(const cf_graph *g, int ranks, int64_t window);

typedef struct cf_verify_stats {
  double max_abs_err, max_rel_err; /* over every checked element */
  int64_t checked;                 /* elements compared */
} cf_verify_stats;

/* Compare got[rank * n_outputs + j] with ref[...] for every rank and output
 * of g: |got - val| <= tol * mag (float32 1e-5, float16/bfloat16 1e-2,
 * float64 1e-12), NaN only where the reference is NaN; integers exactly.
 * Reduce outputs are checked on the root only. The first mismatch is an
 * error "output 'NAME' rank R index I: got G, expected E" (CF_ERR_INVALID);
 * st is filled either way. */
cf_status cf_verify_outputs(cf_context *ctx, const cf_graph *g, const cf_tensor *got,
                            const cf_ref_value *ref, int ranks, int n_outputs, cf_verify_stats *st);

/* cf_verify_outputs against a reference evaluated window by window
 * (cf_reference_window; g must stream), so memory follows the window, not
 * the graph: same verdict, same first-mismatch message (the lowest rank's
 * first output and index) and, on success, the same stats. in gives the
 * Inputs it has data for (the rest are regenerated from seed). only >= 0:
 * that rank's outputs alone are checked (an MPI process's own). window <= 0
 * picks the largest power of two whose windows need at most
 * CF_VERIFY_WINDOW_BYTES (cf_verify_window). */
#define CF_VERIFY_WINDOW_BYTES ((int64_t)64 << 20)
cf_status cf_verify_streamed(cf_context *ctx, const cf_graph *g, const cf_inputs *in, uint64_t seed,
                             const cf_tensor *got, int ranks, int n_outputs, int only,
                             int64_t window, cf_verify_stats *st);
/* Which Output nodes of verified graph g depend on an Opaque node: dep[j]
 * for the j-th Output in node order (n_outputs of them). collfuse does not
 * run Opaque nodes; the run and the reference both give them the same
 * synthetic data, so --verify compares those outputs with themselves and
 * checks nothing. Returns how many depend; -1 when out of memory. */
int cf_verify_opaque_outputs(const cf_graph *g, bool *dep, int n_outputs);
/* The window cf_verify_streamed picks for g on ranks ranks (elements), and
 * through *bytes (optional) what its reference holds then. */
int64_t cf_verify_window(const cf_graph *g, int ranks, int64_t *bytes);

#endif /* COLLFUSE_CHECK_H */
