/* tools.h - internals of the collfuse command-line driver. */
#ifndef COLLFUSE_TOOLS_H
#define COLLFUSE_TOOLS_H

#include "../ir/ir.h"
#include "../passes/passes.h"

/* json_report.c: the `compile --json` object (SPEC section 4), printed on
 * stdout. before is the collective count of the input graph. */
cf_status cf_report_compile_json(const cf_graph *g, int collectives_before,
                                 const cf_pass_timing *timing, int n_timing);
/* Bucket reason text for a collective left after fusion. */
const char *cf_report_reason(const cf_node *n, char *buf, size_t len);
/* bench.c: `collfuse bench compile [--sizes N,...] [--json]`; returns the
 * exit code. */
int cf_bench_compile(int argc, char **argv);
/* bench_reduce.c: `collfuse bench reduce [--quick] [--sizes S,..] [--reps N]
 * [--min-ms MS] [--json]`: collfuse's JIT kernels against memcpy, a plain C
 * loop and MPI_Reduce_local; returns the exit code. */
int cf_bench_reduce(cf_context *ctx, int argc, char **argv);

/* Base collective name of a node ("AllReduce" for FusedAllReduce). */
const char *cf_report_base_op(cf_op op);

#endif
