/* coll.c - one collective call on one rank: the descriptor checks that
 * turn a cross-rank disagreement into a message naming both ranks, the
 * root check, and the dispatch to the call's row of the algorithm table
 * (algo.c), large AllReduce calls in segments.
 *
 * Which algorithm a call runs is decided by the plan (cf_coll_select in
 * algo.c) before the ranks start; this file only runs it.
 */
#include "algo.h"

#include <stdio.h>
#include <string.h>

static const char *red_text(int red) {
  return red >= 0 ? cf_reduction_name((cf_reduction)red) : "-";
}

static void segment_text(int64_t segment, char *buf, size_t len) {
  if (segment > 0)
    snprintf(buf, len, "%lld elements", (long long)segment);
  else
    snprintf(buf, len, "none (one piece)");
}

bool cf_coll_desc_mismatch(const cf_coll_desc *a, int ra, const cf_coll_desc *b, int rb, char *text,
                           size_t len) {
  if (rb < ra) return cf_coll_desc_mismatch(b, rb, a, ra, text, len); /* the lower rank first */
  char va[128], vb[128];
  const char *what = NULL;
  /* NULL: a message of no collective, exec.c's checks before a run (a
   * kept rank's later runs skip them, but a new executable's first does
   * them, and cf_exec_meet before it: its peer runs another executable) */
  if (!a || !b || a->op == CF_OP_INVALID || b->op == CF_OP_INVALID) { /* or exec.c's barriers */
    if (!a || !b ? a == b : a->op == b->op) return false;
    snprintf(text, len,
             "cross-rank mismatch: rank %d is at %s but rank %d is at %s (the ranks run different "
             "collective sequences%s)",
             ra,
             !a                     ? "the plan checks before a run"
             : a->op == CF_OP_INVALID ? "an iteration barrier"
             : a->node              ? a->node
                                    : "a collective",
             rb,
             !b                     ? "the plan checks before a run"
             : b->op == CF_OP_INVALID ? "an iteration barrier"
             : b->node              ? b->node
                                    : "a collective",
             (!a && b->op != CF_OP_INVALID) || (!b && a->op != CF_OP_INVALID)
                 ? ": one starts a run while the other is inside one, as when one process starts a "
                   "new executable while another repeats a kept one"
                 : "");
    return true;
  }
  if (a->op != b->op || strcmp(a->group, b->group) != 0 || a->seq != b->seq) {
    what = "collective";
    snprintf(va, sizeof va, "%s #%lld of group '%s'", cf_op_table[a->op].name, (long long)a->seq,
             a->group);
    snprintf(vb, sizeof vb, "%s #%lld of group '%s'", cf_op_table[b->op].name, (long long)b->seq,
             b->group);
  } else if (a->dtype != b->dtype) {
    what = "dtype";
    snprintf(va, sizeof va, "%s", cf_dtype_name(a->dtype));
    snprintf(vb, sizeof vb, "%s", cf_dtype_name(b->dtype));
  } else if (a->algo != b->algo) {
    what = "algorithm";
    snprintf(va, sizeof va, "%s", cf_algo_name(a->algo));
    snprintf(vb, sizeof vb, "%s", cf_algo_name(b->algo));
  } else if (a->chunks != b->chunks) {
    what = "pipeline chunks";
    snprintf(va, sizeof va, "%d", a->chunks);
    snprintf(vb, sizeof vb, "%d", b->chunks);
  } else if (a->segment != b->segment) {
    what = "segment size";
    segment_text(a->segment, va, sizeof va);
    segment_text(b->segment, vb, sizeof vb);
  } else if (a->count != b->count) {
    what = "count";
    snprintf(va, sizeof va, "%lld", (long long)a->count);
    snprintf(vb, sizeof vb, "%lld", (long long)b->count);
  } else if (a->red != b->red) {
    what = "reduction";
    snprintf(va, sizeof va, "%s", red_text(a->red));
    snprintf(vb, sizeof vb, "%s", red_text(b->red));
  } else if (a->op == CF_OP_ALLTOALL && (a->root != b->root || a->layout != b->layout)) {
    what = "split/concat dimensions";
    snprintf(va, sizeof va, "%d/%d", a->root, a->layout);
    snprintf(vb, sizeof vb, "%d/%d", b->root, b->layout);
  } else if (a->op == CF_OP_COLLECTIVEPERMUTE && a->layout != b->layout) {
    what = "source_target_pairs";
    snprintf(va, sizeof va, "#%08x", (unsigned)a->layout);
    snprintf(vb, sizeof vb, "#%08x", (unsigned)b->layout);
  } else if (a->root != b->root) {
    what = "root";
    snprintf(va, sizeof va, "%d", a->root);
    snprintf(vb, sizeof vb, "%d", b->root);
  } else if (a->layout != b->layout) {
    what = "layout";
    snprintf(va, sizeof va, "%s", a->layout >= 0 ? cf_layout_name((cf_layout)a->layout) : "-");
    snprintf(vb, sizeof vb, "%s", b->layout >= 0 ? cf_layout_name((cf_layout)b->layout) : "-");
  }
  if (!what) return false;
  snprintf(text, len,
           "cross-rank mismatch in %s '%s' (collective #%lld of group '%s'): %s is %s on rank %d "
           "but %s on rank %d",
           cf_op_table[a->op].name, a->node ? a->node : "?", (long long)a->seq, a->group, what, va,
           ra, vb, rb);
  return true;
}

void cf_coll_size_mismatch(char *text, size_t len, int me, size_t bytes, int peer, long long got,
                           const cf_coll_desc *d) {
  snprintf(text, len, "cross-rank mismatch: rank %d expected %zu bytes from rank %d, which sent %lld%s%s%s",
           me, bytes, peer, got, d ? " (in '" : "", d && d->node ? d->node : "", d ? "')" : "");
}

/* A large AllReduce runs as segments of CF_ALGO_SEGMENT_BYTES, one after
 * the other (for the rows marked segmented): what a peer reads in the
 * all-gather was written moments before and is still in the shared cache,
 * where one pass over 100 MiB would fetch it from DRAM twice (bench fusion:
 * one 97 MiB call was slower than four 25 MiB buckets). Each element's
 * reduction is unchanged. */
static cf_status allreduce_segments(cf_comm *c, cf_device *dev, const cf_coll_call *call,
                                    const cf_algo_info *row) {
  int64_t seg = call->desc.segment, es = cf_dtype_size(call->desc.dtype);
  if (call->desc.count <= 2 * seg) return row->run(c, dev, call);
  cf_coll_call part = *call;
  /* the whole call's data is what stays around each part */
  part.working_set = cf_coll_working_set(&call->desc, call->n, call->working_set);
  cf_status st = CF_OK;
  for (int64_t off = 0; off < call->desc.count && !st; off += seg) {
    part.desc.count = call->desc.count - off < seg ? call->desc.count - off : seg;
    part.in = (const char *)call->in + off * es;
    part.out = (char *)call->out + off * es;
    st = row->run(c, dev, &part);
  }
  return st;
}

cf_status cf_coll_run(cf_comm *c, cf_device *dev, const cf_coll_call *call) {
  if (cf_op_rooted(call->desc.op) && (call->desc.root < 0 || call->desc.root >= call->n))
    return cf_error(c->ctx, CF_ERR_INVALID, NULL, 0,
                    "%s '%s': root %d is not a rank of group '%s' (%d rank%s)",
                    cf_op_table[call->desc.op].name, call->desc.node ? call->desc.node : "?",
                    call->desc.root, call->desc.group, call->n, cf_s(call->n));
  const cf_algo_info *row =
      &cf_algo_table[call->algo >= 0 && call->algo < cf_algo_count ? call->algo : CF_ALGO_DIRECT];
  /* a row that does not run this kind (the plan resolves every call, so
   * only a caller that skipped cf_coll_select gets here) runs direct */
  if (!row->supports(call->desc.op, call->n, call->desc.count * cf_dtype_size(call->desc.dtype)))
    row = &cf_algo_table[CF_ALGO_DIRECT];
  /* in place, every collfuse row runs in segments: its scratch holds one
   * segment's result (algo_allreduce.c), not the whole call's. Except rsag
   * on a single-copy transport (rsag_put): in place it takes no scratch and
   * reads nothing a peer wrote, so segments would only add two waits for
   * the peers each, and a wait costs a scheduler slice where the ranks'
   * threads share cores with the caller's compute (a DDP bucket averaged
   * during the backward pass: 25 MiB took 5-17 ms in one piece against
   * 13-56 ms in 4 MiB segments, medians of 20 calls in 2 runs each, two
   * processes on two cores, each with a thread computing beside it). So
   * does pool there (rsag_put in pieces; on device memory it runs rsag). */
  bool whole = call->desc.in_place && c->ops->zero_copy &&
               (row == &cf_algo_table[CF_ALGO_RSAG] || row == &cf_algo_table[CF_ALGO_POOL]);
  bool segments = (row->segmented || (call->desc.in_place && !row->native)) && !whole &&
                  call->desc.op == CF_OP_ALLREDUCE;
  /* what runs is what every message says (the peers compare it) */
  cf_coll_call run = *call;
  run.algo = run.desc.algo = (int)(row - cf_algo_table);
  run.desc.segment = segments ? CF_ALGO_SEGMENT_BYTES / cf_dtype_size(call->desc.dtype) : 0;
  return segments ? allreduce_segments(c, dev, &run, row) : row->run(c, dev, &run);
}
