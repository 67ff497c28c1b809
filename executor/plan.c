/* plan.c - from a compiled graph to a schedule and a memory plan.
 *
 * Schedule: the graph's topological order, with every collective split into
 * START (as soon as its operands exist) and WAIT (just before its first
 * consumer), so compute between the two overlaps communication. A START
 * directly followed by its WAIT with nothing else in flight runs inline on
 * the rank thread (no hand-off latency).
 *
 * Memory: every collective has an input and an output block. A fused
 * bucket's block holds its members at their offsets (the `offsets` the
 * combiner wrote), and each member's producer is given its slot in the
 * block as its own output buffer, so producers write straight into the
 * bucket and consumers read straight out of it: no pack or unpack copies.
 * Only a value that two collectives both want in their bucket is copied (a
 * COPY step) into the second. Blocks get addresses in one arena per rank by
 * first-fit over their live intervals (defined at their first producer,
 * dead after their last reader; a collective reads its input until its
 * WAIT). Inputs, constants and what Output nodes read stay for the whole
 * run, so iterations can repeat.
 *
 * In place: an AllReduce (plain or a bucket) writes its output over its
 * input block when nothing reads the input afterwards (in_place_ok). A
 * plain AllGather or ReduceScatter goes in place as NCCL defines it, its
 * input being the rank's block of its output (AllGather: sendbuff ==
 * recvbuff + rank * sendcount) or its output the rank's block of its input
 * (ReduceScatter: recvbuff == sendbuff + rank * recvcount), when nothing
 * reads the input after the collective starts (rsag_in_place_ok). The plan
 * is one for every rank, so that value is a per-rank view: one block, and
 * the value lies rank_stride bytes further per position in the group
 * (cf_plan_value_shift; exec.c binds each rank's pointer), which every
 * rank of a group covering the world has. A fused bucket does the same
 * member by member: member j's input (AllGather) lies at its output
 * offset plus the rank's position times its size, and has no input bucket
 * (so every member must be produced there: none copied in, none twice);
 * member j's output (ReduceScatter) at its input offset plus the rank's
 * position times its size. Going in place moves
 * a block's life, not just its size: an AllGather's output is then live
 * from its input's producer, a ReduceScatter's input as long as its
 * output. So the plan is built with each kind in place and without
 * (cf_plan_build), and the smallest peak per rank wins (ties: in place).
 */
#include "../ir/trace.h"
#include "plan.h"
#include "transports/transports.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FOREVER INT_MAX

typedef struct block {
  int64_t bytes, addr;
  int first, last; /* live interval in steps; -1 .. FOREVER for permanent */
} block;

typedef struct builder {
  cf_plan *p;
  const cf_graph *g;
  block *blocks;
  int n_blocks, cap_blocks;
  int *val_block;    /* value -> block */
  int64_t *val_off;  /* value -> offset in its block */
  int *coll_in, *coll_out, *coll_scratch; /* coll -> block */
  int64_t *coll_in_off;  /* coll -> offset of its input in coll_in (plain ops reading in place) */
  int64_t **member_off;  /* coll -> its members' offsets in the input block */
  int *coll_of_node;   /* node -> coll index or -1 */
  int steps_cap; /* p->steps' room */
  int *last_read; /* value -> topological position of its last reader (-1: none) */
  bool *kept;     /* value -> an Output reads it, or it is a Constant */
  int scratch;    /* the block every collective's scratch shares, -1 until one needs it */
  unsigned rsag;  /* RSAG_*: the kinds this build puts in place where allowed */
  unsigned seen;  /* RSAG_*: the kinds some collective could have gone in place */
} builder;

enum { RSAG_AG = 1, RSAG_RS = 2 }; /* AllGather, ReduceScatter in place */

static cf_status oom(cf_plan *p) { return cf_error(p->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory"); }

static int64_t align_up(int64_t x) {
  return (x + CF_BUFFER_ALIGN - 1) / CF_BUFFER_ALIGN * CF_BUFFER_ALIGN;
}

static int new_block(builder *b, int64_t bytes) {
  if (b->n_blocks == b->cap_blocks) {
    int cap = b->cap_blocks ? b->cap_blocks * 2 : 64;
    block *nb = realloc(b->blocks, sizeof *nb * (size_t)cap);
    if (!nb) return -1;
    b->blocks = nb;
    b->cap_blocks = cap;
  }
  b->blocks[b->n_blocks] = (block){.bytes = bytes, .addr = -1, .first = FOREVER, .last = -1};
  return b->n_blocks++;
}

/* The collectives' scratch: one block for all of them, as big as the
 * biggest needs. A rank runs one collective call at a time (its
 * communication thread takes them in order, and an inline call waits for
 * those in flight), so calls in flight together never use it at once. */
static int scratch_block(builder *b, int64_t bytes) {
  if (b->scratch < 0) b->scratch = new_block(b, 0);
  if (b->scratch >= 0 && bytes > b->blocks[b->scratch].bytes) b->blocks[b->scratch].bytes = bytes;
  return b->scratch;
}

static int val_index(const cf_plan *p, cf_ref r) { return p->val_base[r.node] + r.port; }

static void live(block *bl, int first, int last) {
  if (first < bl->first) bl->first = first;
  if (last > bl->last) bl->last = last;
}

/* plain and fused collectives; the fused matmul ops run their own pipeline */
static bool is_coll(cf_op op) {
  return cf_op_is_collective(op) && cf_op_table[op].cat != CF_CAT_FUSED_MATMUL;
}

static bool is_fused_mm(cf_op op) { return cf_op_table[op].cat == CF_CAT_FUSED_MATMUL; }

/* Member byte offsets of a collective's input bucket: its `offsets` (the
 * verifier checked one per member, in order, none overlapping) when each
 * is at a CF_BUFFER_ALIGN line, as the combiner writes them; else (a
 * file's own, aligned to the element only) the members packed at lines. */
static void member_offsets(const cf_plan *p, const cf_node *n, int64_t *off, int64_t *total) {
  cf_ints offs = cf_node_ints(n, CF_A_OFFSETS);
  bool given = offs.n == n->n_in && n->n_in > 1;
  for (int j = 0; j < n->n_in && given; j++)
    given = offs.v[j] % CF_BUFFER_ALIGN == 0;
  int64_t end = 0;
  for (int j = 0; j < n->n_in; j++) {
    int64_t bytes = p->vals[val_index(p, n->in[j])].bytes;
    off[j] = given ? offs.v[j] : end;
    end = given ? off[j] + bytes : align_up(end + bytes);
  }
  *total = n->n_in == 1 ? p->vals[val_index(p, n->in[0])].bytes : align_up(end);
}

/* The world ranks of n's group, part after part (a partitioned group is
 * one communicator per part: each rank runs with the part that holds it,
 * exec.c), the size of one part and the number of parts. */
static cf_status group_ranks(cf_plan *p, const cf_node *n, const int **ranks, int *size,
                             int *parts) {
  const char *name = cf_node_group(n);
  const cf_group *gr = cf_graph_group(p->g, name);
  if (!gr) {
    if (strcmp(name, CF_WORLD_GROUP) != 0)
      return cf_node_error(p->g, n, CF_ERR_INVALID, "unknown group '%s'", name);
    *ranks = p->world_ranks;
    *size = p->ranks;
    *parts = 1;
    return CF_OK;
  }
  for (int i = 0; i < gr->n_ranks * gr->n_parts; i++)
    if (gr->ranks[i] < 0 || gr->ranks[i] >= p->ranks)
      return cf_node_error(p->g, n, CF_ERR_INVALID,
                           "group '%s' has rank %d but the run has %d rank%s", name, gr->ranks[i],
                           p->ranks, cf_s(p->ranks));
  *ranks = gr->ranks;
  *size = gr->n_ranks;
  *parts = gr->n_parts;
  return CF_OK;
}

/* AllToAll's blocks (runtime.h, algo_alltoall.c): the array form's
 * members (one, or a FusedAllToAll's), each with its rows from its shape
 * and the split and concat dims, where it sits in the buckets; the tuple
 * form's operands and results where they sit in the buckets. A bucket of
 * several dtypes is one of bytes (es 1): its members' elements count
 * their bytes. */
static cf_status alltoall_blocks(cf_plan *p, const cf_node *n, cf_pcoll *c, const int64_t *off,
                                 const int64_t *oo, int es) {
  if (n->op == CF_OP_ALLTOALL && n->n_in > 1) {
    c->segs = calloc((size_t)c->n, sizeof *c->segs);
    if (!c->segs) return oom(p);
    c->n_segs = c->n;
    for (int j = 0; j < c->n; j++)
      c->segs[j] = (cf_coll_seg){off[j] / es, oo[j] / es, p->vals[val_index(p, n->in[j])].count};
    return CF_OK;
  }
  int sd = (int)cf_node_int(n, CF_A_SPLIT_DIMENSION, 0),
      cd = (int)cf_node_int(n, CF_A_CONCAT_DIMENSION, 0);
  c->a2a = calloc((size_t)n->n_in, sizeof *c->a2a);
  if (!c->a2a) return oom(p);
  c->n_a2a = n->n_in;
  uint32_t h = 2166136261u; /* the members' blocks, so ranks that disagree fail */
  for (int j = 0; j < n->n_in; j++) {
    const cf_pvalue *v = &p->vals[val_index(p, n->in[j])];
    int64_t scale = cf_dtype_size(v->dtype) / es, count = scale, in_row = scale, out_row = scale;
    for (int d = v->shape.rank - 1; d >= 0; d--) {
      int64_t dim = d == sd ? v->shape.dims[d] / c->n : v->shape.dims[d];
      count *= dim;
      if (d >= sd) in_row *= dim;
      if (d >= cd) out_row *= dim;
    }
    c->a2a[j] = (cf_a2a_part){off[j] / es, oo[j] / es, count, in_row, out_row};
    h = (h ^ (uint32_t)count) * 16777619u;
    h = (h ^ (uint32_t)in_row) * 16777619u;
  }
  c->desc.root = sd;
  c->desc.layout = n->n_in == 1 ? cd : (int)(h & 0x7fffffff);
  return CF_OK;
}

/* AllGather's and ReduceScatter's segments (runtime.h): a member along
 * dim 0 is one segment; along dim d it is one segment per row of the dims
 * before d (XLA's all_gather_dimension / scatter_dimension), each a block
 * of the dims from d on: gathering row q of every rank puts rank p's block
 * at row q's place p, which is what a segment says. */
static cf_status rsag_segments(cf_plan *p, const cf_node *n, cf_pcoll *c, const int64_t *off,
                               const int64_t *oo, int es) {
  cf_op op = cf_op_coll(n->op);
  int64_t total = 0;
  for (int j = 0; j < n->n_in; j++) {
    const cf_shape *s = &p->vals[val_index(p, n->in[j])].shape;
    int d = (int)cf_node_member_dim(n, j);
    int64_t rows = 1;
    for (int k = 0; k < d && k < s->rank; k++) rows *= s->dims[k];
    total += rows > 0 ? rows : 1;
  }
  if (total > INT32_MAX)
    return cf_node_error(p->g, n, CF_ERR_INVALID, "%lld rows before the dims: too many to place",
                         (long long)total);
  c->segs = calloc((size_t)total, sizeof *c->segs);
  if (!c->segs) return oom(p);
  c->n_segs = 0;
  for (int j = 0; j < n->n_in; j++) {
    const cf_pvalue *iv = &p->vals[val_index(p, n->in[j])];
    int d = (int)cf_node_member_dim(n, j);
    int64_t rows = 1;
    for (int k = 0; k < d && k < iv->shape.rank; k++) rows *= iv->shape.dims[k];
    /* in the bucket's elements (bytes when its members' dtypes differ) */
    int64_t count = (op == CF_OP_ALLGATHER ? iv->bytes : iv->bytes / c->n) / es;
    if (rows <= 0) rows = 1;
    count /= rows; /* a row's block: the rank's part of it */
    for (int64_t q = 0; q < rows; q++)
      c->segs[c->n_segs++] = (cf_coll_seg){
          off[j] / es + q * (op == CF_OP_ALLGATHER ? count : count * c->n),
          oo[j] / es + q * (op == CF_OP_ALLGATHER ? count * c->n : count), count};
  }
  return CF_OK;
}

/* CollectivePermute's pairs as positions in the group, and their hash in
 * the descriptor (so ranks that disagree on them fail). */
static cf_status permute_pairs(cf_plan *p, const cf_node *n, cf_pcoll *c) {
  char why[128];
  c->pairs = malloc(sizeof *c->pairs * 2 * (size_t)c->n);
  if (!c->pairs) return oom(p);
  if (!cf_pairs_parse(cf_node_str(n, CF_A_SOURCE_TARGET_PAIRS, ""), c->n, c->pairs, c->pairs + c->n,
                      why, sizeof why))
    return cf_node_error(p->g, n, CF_ERR_INVALID, "source_target_pairs: %s", why);
  uint32_t h = 2166136261u;
  for (int k = 0; k < c->n; k++) h = (h ^ (uint32_t)(c->pairs[k] + 1)) * 16777619u;
  c->desc.layout = (int)(h & 0x7fffffff);
  return CF_OK;
}

/* Describe collective node n as plan coll c (desc, group, segments). */
static cf_status describe(builder *b, const cf_node *n, cf_pcoll *c, const int64_t *off,
                          int64_t in_bytes, int64_t *out_bytes, int64_t **out_off) {
  cf_plan *p = b->p;
  cf_status st = group_ranks(p, n, &c->ranks, &c->n, &c->n_parts);
  if (st) return st;
  cf_op op = cf_op_coll(n->op);
  const cf_pvalue *v0 = &p->vals[val_index(p, n->in[0])];
  cf_dtype dt = v0->dtype;
  for (int j = 1; j < n->n_in; j++)
    if (p->vals[val_index(p, n->in[j])].dtype != dt) dt = CF_DT_UINT8; /* an AllGather of bytes */
  int es = cf_dtype_size(dt);
  c->node = (int)(n - p->g->nodes);
  c->desc = (cf_coll_desc){.op = op, .dtype = dt, .count = in_bytes / es, .red = -1,
                           .root = -1, .layout = -1, .group = cf_node_group(n), .node = n->name};
  if (cf_op_reduces(op)) c->desc.red = (int)cf_node_reduction(n);
  if (cf_op_rooted(op)) {
    c->desc.root = (int)cf_node_int(n, CF_A_ROOT, 0);
    if (c->desc.root < 0 || c->desc.root >= c->n)
      return cf_node_error(p->g, n, CF_ERR_INVALID, "root %d is not a rank of group '%s' (size %d)",
                           c->desc.root, c->desc.group, c->n);
  }
  if (op == CF_OP_ALLGATHER) c->desc.layout = (int)cf_node_layout(n);
  /* output offsets: AllReduce keeps the input layout; AllGather and
   * ReduceScatter lay their member outputs out at 64-byte lines */
  int64_t *oo = calloc((size_t)n->n_in, sizeof *oo);
  if (!oo) return oom(p);
  int64_t end = 0;
  for (int j = 0; j < n->n_in; j++) {
    const cf_pvalue *ov = &p->vals[p->val_base[c->node] + j];
    oo[j] = op == CF_OP_ALLREDUCE ? off[j] : end;
    end = align_up(oo[j] + ov->bytes);
  }
  *out_bytes = op == CF_OP_ALLREDUCE ? in_bytes : (n->n_in == 1 ? p->vals[p->val_base[c->node]].bytes : end);
  *out_off = oo;
  if (op == CF_OP_ALLTOALL) return alltoall_blocks(p, n, c, off, oo, es);
  if (op == CF_OP_COLLECTIVEPERMUTE) return permute_pairs(p, n, c);
  if (op == CF_OP_ALLGATHER || op == CF_OP_REDUCESCATTER) return rsag_segments(p, n, c, off, oo, es);
  return CF_OK;
}

static cf_status push_step(builder *b, cf_step s) {
  cf_plan *p = b->p;
  if (p->n_steps == b->steps_cap) {
    int cap = b->steps_cap ? b->steps_cap * 2 : 64;
    cf_step *ns = realloc(p->steps, sizeof *ns * (size_t)cap);
    if (!ns) return oom(p);
    p->steps = ns;
    b->steps_cap = cap;
  }
  p->steps[p->n_steps++] = s;
  return CF_OK;
}

/* Emit the WAIT of every started collective that node n reads or runs
 * after (a control predecessor ends before its successor starts). */
static cf_status waits_for(builder *b, const cf_node *n, bool *waited) {
  for (int j = 0; j < cf_node_n_deps(n); j++) {
    int c = b->coll_of_node[cf_node_dep(n, j)];
    if (c >= 0 && !waited[c] && !b->p->colls[c].fused_mm) {
      waited[c] = true;
      cf_status st = push_step(b, (cf_step){.kind = CF_STEP_WAIT, .coll = c});
      if (st) return st;
    }
  }
  return CF_OK;
}

/* First-fit placement of blocks over their live intervals. */
static bool permanent(const block *bl) { return bl->first < 0 && bl->last == FOREVER; }

static cf_status place(builder *b) {
  int *order = malloc(sizeof *order * (size_t)(b->n_blocks ? b->n_blocks : 1));
  int *placed = malloc(sizeof *placed * (size_t)(b->n_blocks ? b->n_blocks : 1));
  if (!order || !placed) {
    free(order);
    free(placed);
    return oom(b->p);
  }
  for (int i = 0; i < b->n_blocks; i++) order[i] = i;
  /* blocks live for the whole run first (they fence off what nothing else
   * can share: a transient block placed among them would leave a hole
   * beside it for the whole run), then biggest first, then earliest
   * (insertion sort keeps it dependency-free) */
  for (int i = 1; i < b->n_blocks; i++) {
    int x = order[i], j = i - 1;
    while (j >= 0 && (permanent(&b->blocks[order[j]]) < permanent(&b->blocks[x]) ||
                      (permanent(&b->blocks[order[j]]) == permanent(&b->blocks[x]) &&
                       (b->blocks[order[j]].bytes < b->blocks[x].bytes ||
                        (b->blocks[order[j]].bytes == b->blocks[x].bytes &&
                         b->blocks[order[j]].first > b->blocks[x].first))))) {
      order[j + 1] = order[j];
      j--;
    }
    order[j + 1] = x;
  }
  int n_placed = 0;
  int64_t peak = 0;
  for (int i = 0; i < b->n_blocks; i++) {
    block *bl = &b->blocks[order[i]];
    if (bl->bytes == 0) { /* nothing is ever read or written there */
      bl->addr = 0;
      continue;
    }
    if (bl->last < bl->first) bl->first = bl->last = 0; /* never used: still give it room */
    int64_t addr = 0;
    for (bool moved = true; moved;) {
      moved = false;
      for (int k = 0; k < n_placed; k++) {
        const block *o = &b->blocks[placed[k]];
        bool time = o->first <= bl->last && bl->first <= o->last;
        bool space = o->addr < addr + align_up(bl->bytes ? bl->bytes : 1) &&
                     addr < o->addr + align_up(o->bytes ? o->bytes : 1);
        if (time && space) {
          addr = o->addr + align_up(o->bytes ? o->bytes : 1);
          moved = true;
        }
      }
    }
    bl->addr = addr;
    if (addr + align_up(bl->bytes) > peak) peak = addr + align_up(bl->bytes);
    placed[n_placed++] = order[i];
  }
  b->p->arena_bytes = peak;
  free(order);
  free(placed);
  return CF_OK;
}

/* ---- fused MatMul+collective ops: how many chunks (fused_matmul.c runs them) ---- */

#define CHUNK_BYTES ((int64_t)512 << 10) /* aim: each chunk's collective moves >= this */
#define MAX_CHUNKS 8
#define MIN_CHUNK_ROWS 32 /* automatic chunks keep their GEMMs this tall */
/* ... and on the CPU for float16/bfloat16/int8, whose every product call
 * converts the whole x2 (k x n) to float32 (compute.c): forced 8 chunks of
 * 64-128 rows ran 5-12x slower than one at k or n = 8192 (bench mmrs) */
#define MIN_CHUNK_ROWS_CONVERTED 256

/* Whether the communication of chunk i can run while chunk i+1 multiplies.
 * On the CPU device with the threads transport every rank's GEMM runs on
 * the cores (exec.c gives each of the ranks cores/ranks BLAS threads, or
 * OPENBLAS_NUM_THREADS), and the communication threads' copies and
 * reductions run on the same cores: unless some core is left over, a chunk
 * "overlaps" only by taking turns with the GEMMs, and chunking just adds
 * thinner GEMMs and one synchronisation per chunk (bench mmrs on 2 cores,
 * 8 chunks forced: float32 1.16-1.41x the time of MatMul then
 * ReduceScatter with 1024 rows; one chunk is on par). On a GPU the products
 * run on the device's own stream, so they overlap. Under MPI every process
 * plans for itself and all must choose the same chunks, so nothing local
 * (cores, other processes on the node) may decide: those keep chunking. */
bool cf_fused_matmul_overlaps(const cf_run_options *opt, int ranks) {
  if (opt->device != CF_DEVICE_CPU || opt->staged) return true;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores <= 0 || ranks <= 0) return false;
  const char *env = cf_env(CF_ENV_BLAS_THREADS);
  long blas = env && atol(env) > 0 ? atol(env) : cores / ranks > 1 ? cores / ranks : 1;
  return cores - ranks * blas >= 1; /* a core no GEMM uses */
}

int64_t cf_fused_matmul_min_rows(const cf_run_options *opt, int ranks, cf_dtype dt) {
  if (!cf_fused_matmul_overlaps(opt, ranks)) return 0;
  bool converted = opt->device == CF_DEVICE_CPU && dt != CF_DT_FLOAT32 && dt != CF_DT_FLOAT64;
  return converted ? MIN_CHUNK_ROWS_CONVERTED : MIN_CHUNK_ROWS;
}

int cf_fused_matmul_chunks(const cf_node *n, int64_t rows, int64_t row_bytes, int64_t min_rows) {
  if (rows <= 0) return 1;
  int64_t turn = cf_node_int(n, CF_A_COMM_TURN, 0);
  int64_t c = turn > 0 ? turn : min_rows > 0 ? (rows * row_bytes) / CHUNK_BYTES : 1;
  if (turn <= 0) {
    if (c > MAX_CHUNKS) c = MAX_CHUNKS;
    if (min_rows > 0 && c > rows / min_rows) c = rows / min_rows;
  }
  if (c < 1) c = 1;
  if (c > rows) c = rows;
  return (int)c;
}

/* A fused MatMul+collective op: one chunk collective template, the
 * chunking, a double-buffered stage and the algorithm's scratch. */
static cf_status plan_fused_mm(builder *b, const cf_node *n, cf_pcoll *c, int nc, int64_t *seq) {
  cf_plan *p = b->p;
  const cf_graph *g = b->g;
  cf_status st = group_ranks(p, n, &c->ranks, &c->n, &c->n_parts);
  if (st) return st;
  int64_t ws = c->n;
  const cf_pvalue *x1 = &p->vals[val_index(p, n->in[0])];
  cf_op op = cf_op_coll(n->op);
  cf_dtype dt = op == CF_OP_ALLGATHER ? x1->dtype : n->out[0].dtype;
  int es = cf_dtype_size(dt);
  int64_t m = x1->shape.dims[0], k = x1->shape.dims[1];
  int64_t cols = op == CF_OP_ALLGATHER ? k : n->out[0].shape.dims[1];
  /* rows the pipeline walks, and the bytes one of them sends */
  int64_t rows = op == CF_OP_REDUCESCATTER ? m / ws : m;
  int64_t row_elems = (op == CF_OP_ALLREDUCE ? 1 : ws) * cols;
  c->node = (int)(n - g->nodes);
  c->fused_mm = true;
  c->in_val = c->out_val = -1;
  c->chunks = cf_fused_matmul_chunks(n, rows, row_elems * es,
                                     cf_fused_matmul_min_rows(&p->opt, p->ranks, x1->dtype));
  c->chunk_rows = rows ? (rows + c->chunks - 1) / c->chunks : 0;
  c->chunks = c->chunk_rows ? (int)((rows + c->chunk_rows - 1) / c->chunk_rows) : 0;
  c->desc = (cf_coll_desc){.op = op,
                           .dtype = dt,
                           .count = (op == CF_OP_REDUCESCATTER ? m : rows) * cols,
                           .red = cf_op_reduces(op) ? CF_RED_SUM : -1,
                           .root = -1,
                           .layout = op == CF_OP_ALLGATHER ? CF_LAYOUT_CONCAT : -1,
                           .chunks = c->chunks,
                           .group = cf_node_group(n),
                           .node = n->name};
  const cf_group *gr = cf_graph_group(g, cf_node_group(n));
  c->desc.seq = seq[gr ? gr - g->groups : g->n_groups]++;
  c->algo = -1; /* each chunk resolves p->opt.algo (fused_matmul.c) */
  c->stage_bytes = align_up(c->chunk_rows * row_elems * es);
  /* scratch: enough for any algorithm the first or the last chunk picks */
  size_t scratch = 0;
  int64_t last = rows - (int64_t)(c->chunks > 0 ? c->chunks - 1 : 0) * c->chunk_rows;
  int64_t per_call[2] = {c->chunk_rows, last};
  for (int i = 0; i < 2; i++) {
    cf_coll_desc d = c->desc;
    d.count = per_call[i] * (op == CF_OP_ALLGATHER ? cols : row_elems);
    int a = c->chunk_algo[i] = cf_coll_select(&d, c->n, p->opt.deterministic, p->opt.algo);
    size_t sb = cf_coll_scratch_bytes(&d, c->n, a, !p->opt.staged);
    if (sb > scratch) scratch = sb;
  }
  c->scratch_bytes = scratch;
  /* double-buffered; one chunk needs one buffer (none for AllGatherMatmul,
   * which then gathers straight into its gathered output) */
  int64_t stage = c->chunks > 1 ? 2 * c->stage_bytes : op == CF_OP_ALLGATHER ? 0 : c->stage_bytes;
  int bs = new_block(b, stage), bsc = bs < 0 ? -1 : scratch_block(b, (int64_t)scratch);
  if (bs < 0 || bsc < 0) return oom(p);
  b->coll_in[nc] = bs;
  b->coll_out[nc] = bs;
  b->coll_scratch[nc] = bsc;
  return CF_OK;
}

/* Readers of every value, in topological positions: what decides whether a
 * collective may overwrite its input. */
static cf_status find_readers(builder *b) {
  const cf_graph *g = b->g;
  cf_plan *p = b->p;
  b->last_read = malloc(sizeof(int) * ((size_t)p->n_vals + 1));
  b->kept = calloc((size_t)p->n_vals + 1, sizeof *b->kept);
  if (!b->last_read || !b->kept) return oom(p);
  for (int v = 0; v < p->n_vals; v++)
    b->last_read[v] = -1;
  for (int t = 0; t < g->n_nodes; t++) {
    const cf_node *n = &g->nodes[g->topo[t]];
    if (n->op == CF_OP_CONSTANT) b->kept[p->val_base[g->topo[t]]] = true;
    for (int j = 0; j < n->n_in; j++) {
      int v = val_index(p, n->in[j]);
      b->last_read[v] = t;
      if (n->op == CF_OP_OUTPUT) b->kept[v] = true;
    }
  }
  return CF_OK;
}

/* In place: an AllReduce (plain or a fused bucket) at topological position
 * t whose input block is its own may write its output over it when every
 * value that lives there (each operand it claims) has no reader after it
 * and is neither a Constant nor read by an Output. An Input may be
 * overwritten: iterations after the first then run on the previous results
 * (docs/executor.md). On the CUDA backend too: its launches and copies wait
 * for their streams, so the algorithms' order holds on device memory. */
static bool in_place_ok(const builder *b, const cf_node *n, int t, bool own_block) {
  const cf_plan *p = b->p;
  if (!own_block || p->opt.out_of_place || cf_op_coll(n->op) != CF_OP_ALLREDUCE ||
      n->n_in != n->n_out)
    return false;
  /* a plain op on an Input the caller lends keeps it where it lies (read
   * only, cf_plan_binds): in place, input and output would cost a copy each */
  if (p->opt.lent_inputs && n->n_in == 1 && b->g->nodes[n->in[0].node].op == CF_OP_INPUT) return false;
  for (int j = 0; j < n->n_in; j++) {
    int v = val_index(p, n->in[j]);
    if (b->val_block[v] >= 0) continue; /* lives elsewhere: copied in */
    if (b->kept[v] || b->last_read[v] > t) return false;
  }
  return true;
}

/* In place, NCCL's way (the head comment): an AllGather or ReduceScatter
 * (plain or a bucket) at topological position t whose block is its own may
 * share one block between input and output when no operand that would
 * live there has a reader after it or is a Constant or read by an Output,
 * and its group gives every rank a position (so every rank has a block). Returns
 * the kind (RSAG_*), 0 when not allowed. An Input may be reduced in place
 * as for AllReduce; an AllGather never changes its input. Not under the
 * C API (lent_inputs), which reports one place per value for every rank. */
static unsigned rsag_in_place_ok(const builder *b, const cf_node *n, const cf_pcoll *c, int t,
                                 bool own_block) {
  const cf_plan *p = b->p;
  cf_op op = cf_op_coll(n->op);
  if ((op != CF_OP_ALLGATHER && op != CF_OP_REDUCESCATTER) || !own_block ||
      (n->n_in > 1 && p->opt.external_buckets) || p->opt.out_of_place || p->opt.lent_inputs ||
      c->n * c->n_parts != p->ranks || c->n_segs != n->n_in)
    return 0; /* (a member along dim > 0 is no block of its output) */
  for (int j = 0; j < n->n_in; j++) {
    int v = val_index(p, n->in[j]);
    /* a member that lives elsewhere is copied into a ReduceScatter's
     * bucket; an AllGather's has no input bucket to copy it to */
    if (b->val_block[v] >= 0 && op == CF_OP_REDUCESCATTER) continue;
    if (b->val_block[v] >= 0 || b->kept[v] || b->last_read[v] > t) return 0;
    for (int k = 0; k < j && op == CF_OP_ALLGATHER; k++)
      if (val_index(p, n->in[k]) == v) return 0; /* one value, two blocks */
  }
  return op == CF_OP_ALLGATHER ? RSAG_AG : RSAG_RS;
}

int64_t cf_plan_value_shift(const cf_plan *p, int v, int rank) {
  const cf_pvalue *pv = &p->vals[v];
  if (!pv->rank_stride) return 0;
  const cf_pcoll *c = &p->colls[pv->stride_coll];
  for (int i = 0; i < c->n * c->n_parts; i++)
    if (c->ranks[i] == rank) return pv->rank_stride * (i % c->n);
  return 0;
}

/* Values alone in their block (no other value, not a bucket's block) may
 * live in a caller's buffer instead (cf_plan_binds): every access to them
 * goes through the value, or through a collective whose in_val/out_val it
 * is. An Input is bound when the caller lends it; an Output's value when it
 * is computed (not an Input or Constant) and no earlier Output has it. */
static cf_status mark_own(builder *b) {
  cf_plan *p = b->p;
  const cf_graph *g = b->g;
  int *users = calloc((size_t)b->n_blocks + 1, sizeof *users);
  bool *taken = calloc((size_t)p->n_vals + 1, sizeof *taken);
  p->binds = calloc((size_t)g->n_nodes + 1, sizeof *p->binds);
  if (!users || !taken || !p->binds) {
    free(users);
    free(taken);
    return oom(p);
  }
  for (int v = 0; v < p->n_vals; v++) users[b->val_block[v]]++;
  for (int c = 0; c < p->n_colls; c++) {
    if (p->colls[c].fused_mm) continue; /* stage and scratch hold no values */
    if (p->colls[c].in_val < 0) users[b->coll_in[c]] += 2;
    if (p->colls[c].out_val < 0) users[b->coll_out[c]] += 2;
  }
  for (int v = 0; v < p->n_vals; v++) p->vals[v].own = users[b->val_block[v]] == 1 && b->val_off[v] == 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const cf_node *n = &g->nodes[i];
    if (n->op == CF_OP_INPUT) {
      p->binds[i] = p->vals[p->val_base[i]].own;
    } else if (n->op == CF_OP_OUTPUT) {
      int v = val_index(p, n->in[0]);
      cf_op src = g->nodes[n->in[0].node].op;
      p->binds[i] = p->vals[v].own && !taken[v] && src != CF_OP_INPUT && src != CF_OP_CONSTANT;
      taken[v] = true;
    }
  }
  free(users);
  free(taken);
  return CF_OK;
}

static void touch(int *first, int *last, int s) {
  if (s < *first) *first = s;
  if (s > *last) *last = s;
}

/* What the graph's tensors would take with a buffer each (no bucket, no
 * value sharing its block): the most bytes live at one step, each value
 * from the step that produces it to the last that reads it (Inputs,
 * Constants and what Outputs read: the whole run); and the copies the plan
 * makes per iteration. */
static cf_status tally(builder *b) {
  cf_plan *p = b->p;
  const cf_graph *g = b->g;
  int *first = malloc(sizeof(int) * ((size_t)p->n_vals + 1)),
      *last = malloc(sizeof(int) * ((size_t)p->n_vals + 1));
  int64_t *delta = calloc((size_t)p->n_steps + 2, sizeof *delta);
  if (!first || !last || !delta) {
    free(first);
    free(last);
    free(delta);
    return oom(p);
  }
  for (int v = 0; v < p->n_vals; v++)
    first[v] = FOREVER, last[v] = -1;
  for (int i = 0; i < g->n_nodes; i++) {
    const cf_node *n = &g->nodes[i];
    if (n->op == CF_OP_INPUT || n->op == CF_OP_CONSTANT)
      for (int k = 0; k < n->n_out; k++)
        first[p->val_base[i] + k] = -1, last[p->val_base[i] + k] = FOREVER;
    if (n->op == CF_OP_OUTPUT) last[val_index(p, n->in[0])] = FOREVER;
  }
  for (int s = 0; s < p->n_steps; s++) {
    const cf_step *sp = &p->steps[s];
    if (sp->kind == CF_STEP_COPY) {
      touch(&first[sp->val], &last[sp->val], s);
      p->n_copies++;
      p->copy_bytes += sp->bytes;
      continue;
    }
    int node = sp->kind == CF_STEP_COMPUTE || sp->kind == CF_STEP_FUSED ? sp->node
                                                                        : p->colls[sp->coll].node;
    const cf_node *n = &g->nodes[node];
    if (sp->kind != CF_STEP_START) /* a collective reads its input until its WAIT */
      for (int j = 0; j < n->n_in; j++)
        touch(&first[val_index(p, n->in[j])], &last[val_index(p, n->in[j])], s);
    if (sp->kind != CF_STEP_WAIT)
      for (int k = 0; k < n->n_out; k++)
        touch(&first[p->val_base[node] + k], &last[p->val_base[node] + k], s);
  }
  for (int v = 0; v < p->n_vals; v++) {
    if (first[v] == FOREVER) continue; /* never produced on a rank (a pruned branch) */
    int64_t bytes = align_up(p->vals[v].bytes);
    delta[first[v] + 1] += bytes;
    if (last[v] != FOREVER) delta[(last[v] < first[v] ? first[v] : last[v]) + 2] -= bytes;
  }
  int64_t now = 0;
  for (int s = 0; s <= p->n_steps; s++) {
    now += delta[s];
    if (now > p->live_bytes) p->live_bytes = now;
  }
  for (int c = 0; c < p->n_colls; c++) {
    const cf_node *n = &g->nodes[p->colls[c].node];
    if (!p->colls[c].desc.in_place) continue;
    p->n_in_place++;
    if (cf_op_coll(n->op) == CF_OP_ALLGATHER) continue; /* never changes its input */
    for (int j = 0; j < n->n_in; j++)
      if (g->nodes[n->in[j].node].op == CF_OP_INPUT &&
          b->val_block[val_index(p, n->in[j])] == b->coll_in[c])
        p->overwrites_inputs = true;
  }
  free(first);
  free(last);
  free(delta);
  return CF_OK;
}

/* Values: one per output port, with its size (overflow-checked); the
 * collectives counted. */
static cf_status plan_values(builder *b) {
  cf_plan *p = b->p;
  const cf_graph *g = b->g;
  p->val_base = calloc((size_t)g->n_nodes + 1, sizeof *p->val_base);
  if (!p->val_base) return oom(p);
  for (int i = 0; i < g->n_nodes; i++) p->val_base[i + 1] = p->val_base[i] + g->nodes[i].n_out;
  p->n_vals = p->val_base[g->n_nodes];
  p->vals = calloc((size_t)p->n_vals + 1, sizeof *p->vals);
  b->val_block = malloc(sizeof(int) * ((size_t)p->n_vals + 1));
  b->val_off = calloc((size_t)p->n_vals + 1, sizeof(int64_t));
  b->coll_of_node = malloc(sizeof(int) * ((size_t)g->n_nodes + 1));
  if (!p->vals || !b->val_block || !b->val_off || !b->coll_of_node) return oom(p);
  for (int i = 0; i < g->n_nodes; i++) {
    const cf_node *n = &g->nodes[i];
    b->coll_of_node[i] = -1;
    for (int k = 0; k < n->n_out; k++) {
      cf_pvalue *v = &p->vals[p->val_base[i] + k];
      v->addr = -1;
      v->bucket = -1;
      v->dtype = n->out[k].dtype;
      v->shape = n->out[k].shape;
      if (!cf_shape_elements(&v->shape, &v->count) || !cf_value_bytes(&n->out[k], &v->bytes))
        return cf_node_error(g, n, CF_ERR_INVALID, "output %d is too large", k);
      if (!cf_add_i64(p->naive_bytes, align_up(v->bytes), &p->naive_bytes))
        return cf_node_error(g, n, CF_ERR_INVALID, "the graph's buffers overflow");
      b->val_block[p->val_base[i] + k] = -1;
    }
    if (is_coll(n->op) || is_fused_mm(n->op)) p->n_colls++;
  }
  return CF_OK;
}

/* One plain or fused collective n (at topological position t) as plan
 * coll nc: its descriptor, whether it goes in place, its input, output and
 * scratch blocks, and the blocks its members and results live in. */
static cf_status plan_coll(builder *b, const cf_node *n, int t, int nc, int64_t *seq) {
  cf_plan *p = b->p;
  const cf_graph *g = b->g;
  cf_status st;
  cf_pcoll *c = &p->colls[nc];
  int64_t *off = calloc((size_t)n->n_in, sizeof *off), *oo = NULL, in_bytes = 0, out_bytes = 0;
  if (!off) return oom(p);
  b->member_off[nc] = off;
  member_offsets(p, n, off, &in_bytes);
  st = describe(b, n, c, off, in_bytes, &out_bytes, &oo);
  if (!st) {
    const cf_group *gr = cf_graph_group(g, cf_node_group(n));
    c->desc.seq = seq[gr ? gr - g->groups : g->n_groups]++;
    int v0 = val_index(p, n->in[0]);
    int bi, bo;
    c->in_val = n->n_in == 1 ? v0 : -1;
    c->out_val = n->n_out == 1 ? p->val_base[g->topo[t]] : -1;
    bool own_block = !(n->n_in == 1 && b->val_block[v0] >= 0);
    /* a bucket whose buffers the runs give stays out of place (two buffers) */
    bool external = n->n_in > 1 && p->opt.external_buckets;
    c->desc.in_place = !external && in_place_ok(b, n, t, own_block);
    unsigned rsag = rsag_in_place_ok(b, n, c, t, own_block);
    b->seen |= rsag;
    rsag &= b->rsag;
    if (rsag) c->desc.in_place = true;
    if (!own_block) { /* a plain op reads its operand in place */
      bi = b->val_block[v0];
      b->coll_in_off[nc] = b->val_off[v0];
    } else { /* a bucket whose buffers the runs give takes no room here */
      bi = new_block(b, external ? 0 : rsag == RSAG_AG ? out_bytes : in_bytes);
    }
    bo = bi < 0 || c->desc.in_place ? bi : new_block(b, external ? 0 : out_bytes);
    if (bi < 0 || bo < 0) st = oom(p);
    b->coll_in[nc] = bi;
    b->coll_out[nc] = bo;
    bool bucket = n->n_in > 1;
    if (bucket) {
      c->bucket_bytes[0] = in_bytes;
      c->bucket_bytes[1] = out_bytes;
    }
    if (rsag == RSAG_AG) /* each member is produced into its block of the output */
      for (int j = 0; j < n->n_in; j++)
        off[j] = oo[j];
    for (int j = 0; j < n->n_in && !st; j++) {
      int v = val_index(p, n->in[j]);
      if (b->val_block[v] < 0) { /* the producer writes straight into the bucket */
        b->val_block[v] = bi;
        b->val_off[v] = off[j];
        p->vals[v].bucket = bucket ? 2 * nc + (rsag == RSAG_AG) : -1;
        p->vals[v].boff = off[j];
        if (rsag == RSAG_AG) /* the rank's block of the output */
          p->vals[v].rank_stride = p->vals[v].bytes, p->vals[v].stride_coll = nc;
      }
    }
    for (int j = 0; j < n->n_out && !st; j++) {
      int v = p->val_base[g->topo[t]] + j;
      int64_t at = rsag == RSAG_RS ? off[j] : oo[j];
      b->val_block[v] = bo;
      b->val_off[v] = at;
      p->vals[v].bucket = bucket ? 2 * nc + (rsag != RSAG_RS) : -1;
      p->vals[v].boff = at;
      if (rsag == RSAG_RS) /* the rank's block of the input */
        p->vals[v].rank_stride = p->vals[v].bytes, p->vals[v].stride_coll = nc;
    }
    c->algo = cf_coll_select(&c->desc, c->n, p->opt.deterministic, p->opt.algo);
    c->scratch_bytes = cf_coll_scratch_bytes(&c->desc, c->n, c->algo, !p->opt.staged);
    if (!st && (b->coll_scratch[nc] = scratch_block(b, (int64_t)c->scratch_bytes)) < 0)
      st = oom(p);
  }
  free(oo);
  if (!st) b->coll_of_node[g->topo[t]] = nc;
  return st;
}

/* The collectives in schedule order: buckets first claim their members. */
static cf_status plan_colls(builder *b) {
  cf_plan *p = b->p;
  const cf_graph *g = b->g;
  cf_status st = CF_OK;
  p->colls = calloc((size_t)p->n_colls + 1, sizeof *p->colls);
  b->coll_in = malloc(sizeof(int) * ((size_t)p->n_colls + 1));
  b->coll_out = malloc(sizeof(int) * ((size_t)p->n_colls + 1));
  b->coll_scratch = malloc(sizeof(int) * ((size_t)p->n_colls + 1));
  b->coll_in_off = calloc((size_t)p->n_colls + 1, sizeof(int64_t));
  b->member_off = calloc((size_t)p->n_colls + 1, sizeof(int64_t *));
  if (!p->colls || !b->coll_in || !b->coll_out || !b->coll_scratch || !b->coll_in_off || !b->member_off)
    return oom(p);
  int nc = 0;
  int64_t *seq = calloc((size_t)g->n_groups + 1, sizeof *seq); /* world group last */
  if (!seq) return oom(p);
  for (int t = 0; t < g->n_nodes && !st; t++) {
    const cf_node *n = &g->nodes[g->topo[t]];
    if (is_fused_mm(n->op)) {
      if (!(st = plan_fused_mm(b, n, &p->colls[nc], nc, seq))) b->coll_of_node[g->topo[t]] = nc++;
    } else if (is_coll(n->op)) {
      st = plan_coll(b, n, t, nc++, seq);
    }
  }
  free(seq);
  return st;
}

/* Every value no collective placed gets a block of its own. */
static cf_status own_blocks(builder *b) {
  cf_plan *p = b->p;
  for (int v = 0; v < p->n_vals; v++)
    if (b->val_block[v] < 0 && (b->val_block[v] = new_block(b, p->vals[v].bytes)) < 0) return oom(p);
  return mark_own(b);
}

/* Copy into collective ci's input block whatever of node n's operands
 * lives elsewhere, then START it. */
static cf_status start_coll(builder *b, const cf_node *n, int ci) {
  cf_plan *p = b->p;
  cf_status st = CF_OK;
  const int64_t *off = b->member_off[ci];
  block *in = &b->blocks[b->coll_in[ci]];
  for (int j = 0; j < n->n_in && !st; j++) {
    int v = val_index(p, n->in[j]);
    if (b->val_block[v] == b->coll_in[ci] && (n->n_in == 1 || b->val_off[v] == off[j])) continue;
    /* the value lives elsewhere (another bucket): copy it in */
    live(&b->blocks[b->val_block[v]], p->n_steps, p->n_steps);
    live(in, p->n_steps, p->n_steps);
    st = push_step(b, (cf_step){.kind = CF_STEP_COPY, .coll = ci, .src = v, .dst = off[j],
                                .bytes = p->vals[v].bytes, .val = v});
  }
  if (st) return st;
  live(in, p->n_steps, p->n_steps);
  live(&b->blocks[b->coll_out[ci]], p->n_steps, p->n_steps);
  live(&b->blocks[b->coll_scratch[ci]], p->n_steps, p->n_steps);
  return push_step(b, (cf_step){.kind = CF_STEP_START, .coll = ci});
}

/* Per collective, the topological position after which its START may be
 * issued: that of its last operand's producer and of every other reader
 * of its operands (so nothing reads an operand a collective in place
 * overwrites); its own position when an operand comes from a collective
 * (ready at that one's WAIT) or it is a fused MatMul (a step of the rank
 * thread); control predecessors count as operands. Returns NULL when out
 * of memory. */
static int *ready_at(const builder *b) {
  const cf_plan *p = b->p;
  const cf_graph *g = b->g;
  int *read = malloc(sizeof *read * ((size_t)p->n_vals + 1)); /* value -> its latest reader so far */
  int *ready = malloc(sizeof *ready * ((size_t)p->n_colls + 1));
  int *pos = malloc(sizeof *pos * ((size_t)g->n_nodes + 1)); /* node -> its topological position */
  if (!read || !ready || !pos) {
    free(read);
    free(ready);
    free(pos);
    return NULL;
  }
  for (int v = 0; v < p->n_vals; v++) read[v] = -1;
  for (int t = 0; t < g->n_nodes; t++) {
    int i = g->topo[t], ci = b->coll_of_node[i];
    const cf_node *n = &g->nodes[i];
    if (ci >= 0) {
      int r = -1;
      for (int j = 0; j < n->n_in; j++) {
        int v = val_index(p, n->in[j]);
        r = read[v] > r ? read[v] : r;
        if (b->coll_of_node[n->in[j].node] >= 0) r = t;
      }
      /* a control predecessor runs first: a compute one before the START,
       * a collective one to its end (its WAIT, at this one's turn) */
      for (int j = 0; j < n->n_ctl; j++) {
        int u = n->ctl[j];
        if (b->coll_of_node[u] >= 0) r = t;
        else if (pos[u] > r) r = pos[u];
      }
      ready[ci] = p->colls[ci].fused_mm ? t : r;
    }
    pos[i] = t;
    for (int j = 0; j < n->n_in; j++) read[val_index(p, n->in[j])] = t;
    for (int k = 0; k < n->n_out; k++) read[p->val_base[i] + k] = t; /* produced here */
  }
  free(read);
  free(pos);
  return ready;
}

/* The schedule and the blocks' live intervals. Compute runs in
 * topological order; a collective STARTs as soon as ready_at allows (the
 * STARTs keep their topological order: the communication thread runs them
 * one after another), and WAITs just before its first consumer that
 * computes (an Output only reads it after the iteration: WAITs for those
 * come last), so the compute between the two (a backward pass's next
 * layers after a bucket's last gradient) overlaps the communication. */
static cf_status schedule(builder *b) {
  cf_plan *p = b->p;
  const cf_graph *g = b->g;
  bool *waited = calloc((size_t)p->n_colls + 1, sizeof *waited);
  int *ready = ready_at(b), *coll_node = malloc(sizeof(int) * ((size_t)p->n_colls + 1));
  if (!waited || !ready || !coll_node) {
    free(waited);
    free(ready);
    free(coll_node);
    return oom(p);
  }
  for (int i = 0; i < g->n_nodes; i++)
    if (b->coll_of_node[i] >= 0) coll_node[b->coll_of_node[i]] = i;
  cf_status st = CF_OK;
  int next = 0; /* the first collective not started */
  for (int t = 0; t < g->n_nodes && !st; t++) {
    int i = g->topo[t];
    const cf_node *n = &g->nodes[i];
    int ci = b->coll_of_node[i];
    if (n->op == CF_OP_INPUT || n->op == CF_OP_CONSTANT) {
      for (int k = 0; k < n->n_out; k++) live(&b->blocks[b->val_block[p->val_base[i] + k]], -1, FOREVER);
    } else if (ci >= 0 && ci < next) {
      /* started already */
    } else if (n->op == CF_OP_OUTPUT) { /* read after the iteration: its WAIT comes last */
      live(&b->blocks[b->val_block[val_index(p, n->in[0])]], p->n_steps, FOREVER);
    } else if ((st = waits_for(b, n, waited))) {
      break;
    } else if (ci >= 0 && p->colls[ci].fused_mm) { /* runs on the rank thread, chunks on its comm thread */
      for (int j = 0; j < n->n_in; j++) live(&b->blocks[b->val_block[val_index(p, n->in[j])]], p->n_steps, p->n_steps);
      for (int k = 0; k < n->n_out; k++) live(&b->blocks[b->val_block[p->val_base[i] + k]], p->n_steps, p->n_steps);
      live(&b->blocks[b->coll_in[ci]], p->n_steps, p->n_steps);
      live(&b->blocks[b->coll_scratch[ci]], p->n_steps, p->n_steps);
      st = push_step(b, (cf_step){.kind = CF_STEP_FUSED, .node = i, .coll = ci});
      next = ci + 1;
    } else if (ci < 0) { /* compute */
      for (int j = 0; j < n->n_in; j++) live(&b->blocks[b->val_block[val_index(p, n->in[j])]], p->n_steps, p->n_steps);
      for (int k = 0; k < n->n_out; k++) live(&b->blocks[b->val_block[p->val_base[i] + k]], p->n_steps, p->n_steps);
      st = push_step(b, (cf_step){.kind = CF_STEP_COMPUTE, .node = i});
    } else {
      st = start_coll(b, n, ci); /* the first not started: its turn */
      next = ci + 1;
    }
    /* the collectives next in line whose operands are all there */
    while (!st && next < p->n_colls && !p->colls[next].fused_mm && ready[next] <= t) {
      const cf_node *c = &g->nodes[coll_node[next]];
      if (!(st = waits_for(b, c, waited))) st = start_coll(b, c, next);
      next++;
    }
  }
  free(ready);
  free(coll_node);
  for (int c = 0; c < p->n_colls && !st; c++)
    if (!waited[c] && !p->colls[c].fused_mm) {
      waited[c] = true;
      st = push_step(b, (cf_step){.kind = CF_STEP_WAIT, .coll = c});
    }
  free(waited);
  if (st) return st;
  /* a collective's blocks live from START to WAIT. A collective with no
   * compute between its START and WAIT has nothing to overlap with: it runs
   * inline on the rank thread (after whatever is still in flight), which
   * saves the hand-off to the communication thread (two context switches) */
  for (int s = 0; s < p->n_steps; s++) {
    cf_step *sp = &p->steps[s];
    if (sp->kind == CF_STEP_START) {
      bool alone = true;
      int w = s + 1;
      for (; w < p->n_steps && !(p->steps[w].kind == CF_STEP_WAIT && p->steps[w].coll == sp->coll); w++)
        if (p->steps[w].kind != CF_STEP_START && p->steps[w].kind != CF_STEP_WAIT) alone = false;
      p->colls[sp->coll].inline_ok = alone;
    } else if (sp->kind == CF_STEP_WAIT) {
      int c = sp->coll;
      live(&b->blocks[b->coll_in[c]], s, s);
      live(&b->blocks[b->coll_out[c]], s, s);
      live(&b->blocks[b->coll_scratch[c]], s, s);
    }
  }
  return CF_OK;
}

/* Every value, collective buffer and copy at its arena address. */
static void addresses(builder *b) {
  cf_plan *p = b->p;
  for (int v = 0; v < p->n_vals; v++) p->vals[v].addr = b->blocks[b->val_block[v]].addr + b->val_off[v];
  for (int c = 0; c < p->n_colls; c++) {
    if (p->colls[c].fused_mm) {
      p->colls[c].stage_addr = b->blocks[b->coll_in[c]].addr;
      p->colls[c].scratch_addr = b->blocks[b->coll_scratch[c]].addr;
      continue;
    }
    p->colls[c].in_addr = b->blocks[b->coll_in[c]].addr + b->coll_in_off[c];
    p->colls[c].out_addr = b->blocks[b->coll_out[c]].addr;
    p->colls[c].scratch_addr = b->blocks[b->coll_scratch[c]].addr;
  }
  for (int s = 0; s < p->n_steps; s++) {
    cf_step *sp = &p->steps[s];
    if (sp->kind != CF_STEP_COPY) continue;
    sp->dst += p->colls[sp->coll].in_addr;
    sp->src = p->vals[sp->src].addr;
  }
}

/* The phases in order; whatever they allocated, plan_make frees. */
static cf_status build(builder *b) {
  cf_status st = plan_values(b);
  if (!st) st = find_readers(b);
  if (!st) st = plan_colls(b);
  if (!st) st = own_blocks(b);
  if (!st) st = schedule(b);
  /* values produced into a block make it live from their producer */
  if (!st) st = place(b);
  if (!st) st = tally(b);
  if (!st) addresses(b);
  return st;
}

static cf_status prepare_kernels(cf_plan *p) {
  for (int c = 0; c < p->n_colls; c++) {
    cf_kernel_key keys[16];
    int k = cf_coll_kernels(&p->colls[c].desc, p->colls[c].n, keys, 16);
    for (int i = 0; i < k; i++) {
      cf_status st = p->dev->ops->prepare(p->dev, &keys[i]);
      if (st) return st;
      cf_beat(); /* generating a kernel takes a while: a sign of life */
    }
  }
  for (int i = 0; i < p->g->n_nodes; i++) {
    const cf_node *n = &p->g->nodes[i];
    bool quant_mmrs = n->op == CF_OP_MATMULREDUCESCATTER && n->n_in >= 4;
    if (n->op != CF_OP_QUANTMATMUL && !quant_mmrs) continue;
    cf_kernel_key q = {.kind = CF_K_QUANT, .dtype = n->out[0].dtype};
    void *fn;
    cf_status st = cf_codegen_kernel(p->ctx, &q, &fn, NULL);
    if (st) return st;
  }
  return CF_OK;
}

/* The plan of g for opt with the kinds in rsag (RSAG_*) in place where
 * allowed; *seen: the kinds that could have been. No device yet. */
static cf_status plan_make(cf_context *ctx, const cf_graph *g, const cf_run_options *opt,
                           unsigned rsag, unsigned *seen, cf_plan **out) {
  *out = NULL;
  cf_plan *p = calloc(1, sizeof *p);
  builder b = {.scratch = -1, .rsag = rsag};
  int p_colls = 0;
  if (!p) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  p->ctx = ctx;
  p->g = g;
  p->opt = *opt;
  if (p->opt.timeout_s <= 0) p->opt.timeout_s = 60;
  p->ranks = opt->ranks > 0 ? opt->ranks : (int)g->world_size;
  cf_status st = CF_OK;
  if (p->ranks < 1 || p->ranks > CF_MAX_WORLD) {
    st = cf_error(ctx, CF_ERR_INVALID, g->file, 0, "%d ranks: collfuse runs 1 to %d ranks",
                  p->ranks, CF_MAX_WORLD);
    goto fail;
  }
  if (g->world_size > 0 && g->world_size != p->ranks) {
    st = cf_error(ctx, CF_ERR_USAGE, g->file, 0, "the graph is compiled for world_size %lld, not %d rank%s",
                  (long long)g->world_size, p->ranks, cf_s(p->ranks));
    goto fail;
  }
  p->world_ranks = malloc(sizeof(int) * (size_t)p->ranks);
  if (!p->world_ranks) {
    st = oom(p);
    goto fail;
  }
  for (int r = 0; r < p->ranks; r++) p->world_ranks[r] = r;
  cf_graph_fingerprint(g, p->fingerprint);
  b.p = p;
  b.g = g;
  if ((st = build(&b))) goto fail;
  *out = p;
  *seen = b.seen;
  p_colls = p->n_colls;
  goto done;
fail:
  p_colls = p->n_colls;
  cf_plan_destroy(p);
done:
  free(b.blocks);
  free(b.val_block);
  free(b.val_off);
  free(b.coll_in);
  free(b.coll_out);
  free(b.coll_scratch);
  free(b.coll_of_node);
  free(b.coll_in_off);
  free(b.last_read);
  free(b.kept);
  if (b.member_off)
    for (int c = 0; c < p_colls; c++) free(b.member_off[c]);
  free(b.member_off);
  return st;
}

/* plan_make, and with a trace each plan it makes as an event on the
 * calling thread's lane (cat "plan", which kinds go in place; args: the
 * arena's bytes). */
static cf_status traced_plan_make(cf_context *ctx, const cf_graph *g, const cf_run_options *opt,
                                  unsigned rsag, unsigned *seen, cf_plan **out) {
  static const char *const what[] = {"plan: AllReduce in place", "plan: AllReduce, AllGather in place",
                                     "plan: AllReduce, ReduceScatter in place",
                                     "plan: AllReduce, AllGather, ReduceScatter in place"};
  cf_trace_lane *l = cf_trace_here;
  int64_t t0 = l ? cf_trace_clock() : 0;
  cf_status st = plan_make(ctx, g, opt, rsag, seen, out);
  if (l && !st)
    cf_trace_record(l, &(cf_trace_ev){.t0 = t0, .t1 = cf_trace_clock(), .name = what[rsag & 3], .cat = "plan",
                                      .arg_name = "arena_bytes", .arg = (*out)->arena_bytes});
  return st;
}

cf_status cf_plan_build(cf_context *ctx, const cf_graph *g, const cf_run_options *opt,
                        cf_plan **out) {
  *out = NULL;
  if (!g->topo) return cf_error(ctx, CF_ERR_USAGE, NULL, 0, "plan: the graph is not verified");
  cf_status st = cf_graph_regions_refuse(g); /* a loop or branch body is not one dataflow pass */
  if (st) return st;
  cf_phase_begin(ctx, "plan", 0);
  unsigned seen = 0, unused;
  cf_plan *p;
  st = traced_plan_make(ctx, g, opt, RSAG_AG | RSAG_RS, &seen, &p);
  if (st) return st;
  /* AllGather/ReduceScatter in place moves blocks' lives (the head
   * comment): each smaller set of kinds in place, down to none, replaces
   * the plan only with a smaller peak */
  static const unsigned fewer[] = {RSAG_AG, RSAG_RS, 0};
  for (int i = 0; i < 3 && seen; i++) {
    if ((fewer[i] & seen) != fewer[i] || fewer[i] == seen) continue;
    cf_plan *q;
    if ((st = traced_plan_make(ctx, g, opt, fewer[i], &unused, &q))) goto fail;
    if (q->arena_bytes < p->arena_bytes) {
      cf_plan_destroy(p);
      p = q;
    } else {
      cf_plan_destroy(q);
    }
  }
  st = opt->device == CF_DEVICE_CUDA ? cf_device_cuda_create(ctx, -1, &p->dev)
                                     : cf_device_cpu_create(ctx, &p->dev);
  if (st) goto fail;
  cf_phase_begin(ctx, "kernels", 0);
  if ((st = prepare_kernels(p))) goto fail;
  cf_phase_begin(ctx, "plan", 0);
  *out = p;
  return CF_OK;
fail:
  cf_plan_destroy(p);
  return st;
}

int64_t cf_plan_peak_bytes(const cf_plan *p) { return p ? p->arena_bytes : 0; }

bool cf_plan_binds(const cf_plan *p, int node) {
  return p && p->binds && node >= 0 && node < p->g->n_nodes && p->binds[node];
}

int cf_plan_colls(const cf_plan *p) { return p ? p->n_colls : 0; }

int cf_plan_coll_node(const cf_plan *p, int c) { return p && c >= 0 && c < p->n_colls ? p->colls[c].node : -1; }

int64_t cf_plan_bucket_bytes(const cf_plan *p, int c, int io) {
  return p && c >= 0 && c < p->n_colls && (io == 0 || io == 1) ? p->colls[c].bucket_bytes[io] : 0;
}

int cf_plan_value_bucket(const cf_plan *p, int node, int port, int64_t *off) {
  *off = 0;
  if (!p || node < 0 || node >= p->g->n_nodes || port < 0 || port >= p->g->nodes[node].n_out) return -1;
  const cf_pvalue *v = &p->vals[p->val_base[node] + port];
  if (v->bucket >= 0) *off = v->boff;
  return v->bucket;
}

void cf_plan_destroy(cf_plan *p) {
  if (!p || p->abandoned) return; /* a rank's thread may still use it (exec.c join_ranks) */
  if (p->solo) p->solo_free(p->solo); /* exec.c's kept rank: it lives above the plan */
  p->solo = NULL;
  for (int c = 0; p->colls && c < p->n_colls; c++) {
    free(p->colls[c].segs);
    free(p->colls[c].pairs);
    free(p->colls[c].a2a);
  }
  free(p->colls);
  free(p->vals);
  free(p->val_base);
  free(p->steps);
  free(p->world_ranks);
  free(p->binds);
  if (p->dev) p->dev->ops->destroy(p->dev);
  free(p);
}
