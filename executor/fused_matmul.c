/* fused_matmul.c - MatmulReduceScatter, MatmulAllReduce and AllGatherMatmul,
 * pipelined over chunks of rows.
 *
 * MatmulReduceScatter: rank r keeps rows [r*mb, (r+1)*mb) of the summed
 * product (mb = m / ws). Chunk i takes rows [i*cb, (i+1)*cb) of every rank's
 * block: the rank computes those rows of its product block by block into a
 * stage laid out [ws][cb][n] and reduce-scatters the stage, which delivers
 * exactly rows i*cb.. of its own output. While the communication thread
 * reduce-scatters chunk i, the rank thread multiplies chunk i+1 into the
 * other stage buffer (double buffering: chunk i+2 waits for chunk i).
 * MatmulAllReduce chunks plain rows the same way. AllGatherMatmul gathers
 * chunk i+1 of every rank's x1 while chunk i multiplies.
 *
 * How many chunks the plan decides (plan.c): comm_turn when the graph
 * sets it; else a cost model (cf_fused_matmul_overlaps) asks whether the
 * communication has a resource of its own. Where it has none (rank threads whose GEMMs fill the cores)
 * the op runs as one chunk, one GEMM over all rows and one collective on
 * the rank thread (cf_rank_io.run), which is what MatMul followed by the
 * collective costs; where it has one,
 * chunks of >= 512 KiB of traffic, at most 8, each tall enough that its
 * products stay efficient (cf_fused_matmul_min_rows).
 *
 * Every chunk is an ordinary collective call (same algorithms, kernels and
 * rank-order reductions), so the results are those of MatMul followed by
 * the collective, and bitwise so under --deterministic: a product row does
 * not depend on which other rows are computed with it.
 */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

typedef struct operands {
  cf_tensor x1, x2, bias, x1s, x2s;
  bool has_bias, quant;
} operands;

static cf_tensor value(const cf_plan *p, const cf_rank_io *io, cf_ref ref) {
  int i = p->val_base[ref.node] + ref.port;
  const cf_pvalue *v = &p->vals[i];
  return (cf_tensor){.data = io->vptr[i], .dtype = v->dtype, .shape = v->shape, .count = v->count};
}

static cf_tensor output(const cf_plan *p, const cf_rank_io *io, int node, int port) {
  int i = p->val_base[node] + port;
  const cf_pvalue *v = &p->vals[i];
  return (cf_tensor){.data = io->vptr[i], .dtype = v->dtype, .shape = v->shape, .count = v->count};
}

/* Operands of MatmulReduceScatter / MatmulAllReduce (ir/infer.c's order). */
static operands gather_operands(const cf_plan *p, const cf_rank_io *io, const cf_node *n) {
  operands o = {0};
  o.x1 = value(p, io, n->in[0]);
  o.x2 = value(p, io, n->in[1]);
  o.quant = o.x1.dtype == CF_DT_INT8 && n->n_in >= 4;
  if (o.quant) {
    o.x1s = value(p, io, n->in[n->n_in - 2]);
    o.x2s = value(p, io, n->in[n->n_in - 1]);
    if (n->n_in == 5) o.bias = value(p, io, n->in[2]), o.has_bias = true;
  } else if (n->n_in == 3) {
    o.bias = value(p, io, n->in[2]);
    o.has_bias = true;
  }
  return o;
}

/* A row block [row, row+len) of a (rows, cols) tensor as a tensor. */
static cf_tensor rows_of(const cf_tensor *t, int64_t row, int64_t len) {
  int64_t cols = t->shape.rank > 1 ? t->shape.dims[1] : 1;
  cf_tensor b = *t;
  b.data = (char *)t->data + row * cols * cf_dtype_size(t->dtype);
  b.shape.dims[0] = len;
  b.count = len * cols;
  return b;
}

/* cf_device_product, watched by the run for its timeout (io->busy/idle:
 * exec.c join_ranks gives up a rank stuck in it): BLAS, unlike the
 * collective waits around it, sees no deadline. */
static cf_status watched_product(const cf_plan *p, const cf_rank_io *io, const cf_node *n,
                                 const cf_tensor *a, const cf_tensor *x2, const cf_tensor *s1,
                                 const cf_tensor *s2, const cf_tensor *bias, cf_tensor *out) {
  if (io->busy) io->busy(io->impl);
  cf_status st = cf_device_product(io->dev, io->ctx, p->g, n, a, x2, s1, s2, bias, out,
                                   p->opt.deterministic ? CF_COMPUTE_DETERMINISTIC : 0);
  if (io->idle) io->idle(io->impl);
  return st;
}

/* dst rows = x1 rows [row, row+len) @ x2 (+ bias), dst is (len, cols). */
static cf_status product(const cf_plan *p, const cf_rank_io *io, const cf_node *n, const operands *o,
                         int64_t row, int64_t len, void *dst, cf_dtype dt, int64_t cols) {
  cf_tensor a = rows_of(&o->x1, row, len);
  cf_tensor out = {.data = dst, .dtype = dt, .shape = {.rank = 2, .dims = {len, cols}}, .count = len * cols};
  cf_tensor s1;
  if (o->quant) s1 = rows_of(&o->x1s, row, len);
  return watched_product(p, io, n, &a, &o->x2, o->quant ? &s1 : NULL, o->quant ? &o->x2s : NULL,
                         o->has_bias ? &o->bias : NULL, &out);
}

/* The chunk call i: the template with its own buffers and count. */
static void chunk_call(const cf_plan *p, const cf_pcoll *pc, const cf_coll_call *tmpl, cf_coll_call *call,
                       cf_coll_seg *seg, const void *in, void *out, int64_t count, int64_t seg_count) {
  *call = *tmpl;
  call->in = in;
  call->out = out;
  /* a rank whose descriptor differs from the plan's keeps differing */
  call->desc.count = count + (tmpl->desc.count - pc->desc.count);
  *seg = (cf_coll_seg){.in_off = 0, .out_off = 0, .count = seg_count};
  call->segs = seg;
  call->n_segs = 1;
  call->algo = cf_coll_select(&call->desc, pc->n, p->opt.deterministic, p->opt.algo);
}

static cf_status reduce_pipeline(const cf_plan *p, const cf_pcoll *pc, cf_rank_io *io,
                                 const cf_coll_call *tmpl, cf_coll_call *calls, cf_coll_seg *segs,
                                 uint64_t *tickets) {
  const cf_node *n = &p->g->nodes[pc->node];
  operands o = gather_operands(p, io, n);
  cf_tensor out = output(p, io, pc->node, 0);
  cf_dtype dt = out.dtype;
  int es = cf_dtype_size(dt);
  int64_t cols = out.shape.dims[1];
  bool rs = pc->desc.op == CF_OP_REDUCESCATTER;
  int ws = pc->n;
  int64_t rows = rs ? o.x1.shape.dims[0] / ws : o.x1.shape.dims[0];
  char *stage[2] = {io->arena + pc->stage_addr, io->arena + pc->stage_addr + pc->stage_bytes};
  cf_status st = CF_OK;
  for (int i = 0; i < pc->chunks && !st; i++) {
    int64_t row = (int64_t)i * pc->chunk_rows;
    int64_t len = row + pc->chunk_rows > rows ? rows - row : pc->chunk_rows;
    char *buf = stage[i & 1];
    if (i >= 2 && (st = io->wait(io->impl, tickets[i - 2]))) break;
    if (rs) {
      if (len == rows) /* one chunk: the stage [ws][rows][n] is the whole product, one GEMM */
        st = product(p, io, n, &o, 0, (int64_t)ws * rows, buf, dt, cols);
      for (int b = 0; b < ws && !st && len < rows; b++) /* rows of every rank's block */
        st = product(p, io, n, &o, (int64_t)b * rows + row, len, buf + (int64_t)b * len * cols * es, dt, cols);
      chunk_call(p, pc, tmpl, &calls[i], &segs[i], buf, (char *)out.data + row * cols * es,
                 (int64_t)ws * len * cols, len * cols);
    } else {
      st = product(p, io, n, &o, row, len, buf, dt, cols);
      chunk_call(p, pc, tmpl, &calls[i], &segs[i], buf, (char *)out.data + row * cols * es, len * cols,
                 len * cols);
    }
    if (!st && pc->chunks == 1 && io->run)
      st = io->run(io->impl, &calls[i]);
    else if (!st)
      tickets[i] = io->start(io->impl, &calls[i]);
  }
  /* wait for everything started, even after an error (buffers stay ours) */
  for (int i = 0; i < pc->chunks; i++)
    if (tickets[i]) {
      cf_status s2 = io->wait(io->impl, tickets[i]);
      if (!st) st = s2;
    }
  return st;
}

static cf_status gather_pipeline(const cf_plan *p, const cf_pcoll *pc, cf_rank_io *io,
                                 const cf_coll_call *tmpl, cf_coll_call *calls, cf_coll_seg *segs,
                                 uint64_t *tickets) {
  const cf_node *n = &p->g->nodes[pc->node];
  cf_tensor x1 = value(p, io, n->in[0]);
  cf_tensor gathered = output(p, io, pc->node, n->n_in - 1);
  int es = cf_dtype_size(x1.dtype), ws = pc->n;
  int64_t m = x1.shape.dims[0], k = x1.shape.dims[1];
  char *stage[2] = {io->arena + pc->stage_addr, io->arena + pc->stage_addr + pc->stage_bytes};
  cf_status st = CF_OK;
  /* one chunk: gathered straight into the gathered output ([ws][m][k] is
   * its layout), then one GEMM per x2 */
  bool whole = pc->chunks == 1;
  /* chunk i: rows [i*cb, ..) of every rank's x1, gathered as [ws][len][k] */
  for (int i = 0; i < pc->chunks && !st; i++) {
    int64_t row = (int64_t)i * pc->chunk_rows;
    int64_t len = row + pc->chunk_rows > m ? m - row : pc->chunk_rows;
    chunk_call(p, pc, tmpl, &calls[i], &segs[i], (char *)x1.data + row * k * es,
               whole ? gathered.data : stage[i & 1], len * k, len * k);
  }
  if (whole) {
    if ((st = io->run ? io->run(io->impl, &calls[0])
                      : io->wait(io->impl, io->start(io->impl, &calls[0]))))
      return st;
    for (int j = 1; j < n->n_in && !st; j++) {
      cf_tensor x2 = value(p, io, n->in[j]);
      cf_tensor o = output(p, io, pc->node, j - 1);
      st = watched_product(p, io, n, &gathered, &x2, NULL, NULL, NULL, &o);
    }
    return st;
  }
  if (pc->chunks > 0) tickets[0] = io->start(io->impl, &calls[0]);
  for (int i = 0; i < pc->chunks && !st; i++) {
    int64_t row = (int64_t)i * pc->chunk_rows;
    int64_t len = row + pc->chunk_rows > m ? m - row : pc->chunk_rows;
    if ((st = io->wait(io->impl, tickets[i]))) break;
    if (i + 1 < pc->chunks) tickets[i + 1] = io->start(io->impl, &calls[i + 1]);
    char *buf = stage[i & 1];
    for (int b = 0; b < ws && !st; b++) {
      const char *part = buf + (int64_t)b * len * k * es;
      int64_t grow = (int64_t)b * m + row; /* row in the gathered x1 */
      io->dev->ops->copy(io->dev, (char *)gathered.data + grow * k * es, part, (size_t)(len * k * es));
      cf_tensor a = {.data = (void *)part, .dtype = x1.dtype, .shape = {.rank = 2, .dims = {len, k}},
                     .count = len * k};
      for (int j = 1; j < n->n_in && !st; j++) {
        cf_tensor x2 = value(p, io, n->in[j]);
        cf_tensor o = output(p, io, pc->node, j - 1);
        cf_tensor ob = rows_of(&o, grow, len);
        st = watched_product(p, io, n, &a, &x2, NULL, NULL, NULL, &ob);
      }
    }
  }
  for (int i = 0; i < pc->chunks; i++)
    if (tickets[i]) {
      cf_status s2 = io->wait(io->impl, tickets[i]);
      if (!st) st = s2;
    }
  return st;
}

cf_status cf_fused_matmul_run(const cf_plan *p, int c, cf_rank_io *io, const cf_coll_call *tmpl) {
  const cf_pcoll *pc = &p->colls[c];
  if (tmpl->me < 0) return CF_OK; /* not in the op's group */
  cf_coll_call *calls = calloc((size_t)pc->chunks + 1, sizeof *calls);
  cf_coll_seg *segs = calloc((size_t)pc->chunks + 1, sizeof *segs);
  uint64_t *tickets = calloc((size_t)pc->chunks + 1, sizeof *tickets);
  cf_status st;
  if (!calls || !segs || !tickets)
    st = cf_error(io->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  else if (pc->desc.op == CF_OP_ALLGATHER)
    st = gather_pipeline(p, pc, io, tmpl, calls, segs, tickets);
  else
    st = reduce_pipeline(p, pc, io, tmpl, calls, segs, tickets);
  free(calls);
  free(segs);
  free(tickets);
  return st;
}
