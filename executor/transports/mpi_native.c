/* transports/mpi_native.c - `--algo mpi-native` (and AUTO's picks over a
 * network): whole collectives as MPI's own MPI_Allreduce,
 * MPI_Reduce_scatter_block, MPI_Allgather, MPI_Reduce and MPI_Bcast, for
 * comparison with collfuse's algorithms over the same transport.
 *
 * Groups map to communicators, one per graph group, made with
 * MPI_Comm_create_group in plan order before the run (group order is the
 * communicator's rank order, so root and ReduceScatter blocks mean the
 * same). A partitioned group is one communicator per part: each rank
 * creates its own part's (the call is collective over the part only, so
 * the parts never wait on each other). The world, and so its
 * communicators, is the process's (every executable of it shares one), so
 * a communicator is keyed by its members in order, not by the group's name:
 * two executables may name different members alike ("tp" over {0,1}, then
 * over {0,2}), or the same members differently (one communicator serves
 * both). Every member of a part has seen the same earlier parts (every
 * rank makes the same executables in the same order), so all make it or
 * none, with a tag from the members. float16/bfloat16 reduce through
 * user-defined MPI_Ops computing in float32; mean is MPI_SUM then the
 * scale kernel; integer mean sums in int64 as collfuse's kernels do. Fused
 * AllGather and ReduceScatter buckets are packed into the call's scratch
 * and moved in one call. In place (desc.in_place, NCCL's layouts, member
 * by member): an AllGather is MPI_Allgather with MPI_IN_PLACE (MPI's
 * in-place layout is NCCL's; a bucket's members are packed into scratch
 * first); a ReduceScatter reduces into scratch and copies to its block,
 * since MPI_IN_PLACE would put the result at block 0, not block me.
 *
 * MPI's collectives block inside MPI, where no deadline or abort check can
 * run: a watchdog thread does it for them, and ends the whole job
 * (MPI_Abort, exit 3) with the reason if a native collective outlives the
 * run's timeout or another rank fails meanwhile.
 */
#define _GNU_SOURCE
#include "../host.h"
#include "mpi_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static float half_load(uint16_t h, bool bf) { return bf ? cf_bf16_to_f32(h) : cf_f16_to_f32(h); }
static uint16_t half_store(float f, bool bf) { return bf ? cf_f32_to_bf16(f) : cf_f32_to_f16(f); }

/* inout[i] = in[i] op inout[i] in float32, rounded once to the type. */
static void half_reduce(const void *in, void *inout, int len, bool bf, int red) {
  const uint16_t *a = in;
  uint16_t *b = inout;
  for (int i = 0; i < len; i++) {
    float x = half_load(a[i], bf), y = half_load(b[i], bf), r;
    switch (red) {
    case CF_RED_MAX: r = isnan(x) || isnan(y) ? x + y : x > y ? x : y; break;
    case CF_RED_MIN: r = isnan(x) || isnan(y) ? x + y : x < y ? x : y; break;
    case CF_RED_PROD: r = x * y; break;
    default: r = x + y; break; /* sum; mean sums and scales after */
    }
    b[i] = half_store(r, bf);
  }
}

static void f16_sum(void *in, void *io, int *n, MPI_Datatype *t) { (void)t; half_reduce(in, io, *n, false, CF_RED_SUM); }
static void f16_max(void *in, void *io, int *n, MPI_Datatype *t) { (void)t; half_reduce(in, io, *n, false, CF_RED_MAX); }
static void f16_min(void *in, void *io, int *n, MPI_Datatype *t) { (void)t; half_reduce(in, io, *n, false, CF_RED_MIN); }
static void f16_prod(void *in, void *io, int *n, MPI_Datatype *t) { (void)t; half_reduce(in, io, *n, false, CF_RED_PROD); }
static void bf16_sum(void *in, void *io, int *n, MPI_Datatype *t) { (void)t; half_reduce(in, io, *n, true, CF_RED_SUM); }
static void bf16_max(void *in, void *io, int *n, MPI_Datatype *t) { (void)t; half_reduce(in, io, *n, true, CF_RED_MAX); }
static void bf16_min(void *in, void *io, int *n, MPI_Datatype *t) { (void)t; half_reduce(in, io, *n, true, CF_RED_MIN); }
static void bf16_prod(void *in, void *io, int *n, MPI_Datatype *t) { (void)t; half_reduce(in, io, *n, true, CF_RED_PROD); }

static MPI_Datatype mpi_type(const cf_mpi_world *w, cf_dtype dt) {
  switch (dt) {
  case CF_DT_INT8: return MPI_INT8_T;
  case CF_DT_UINT8: return MPI_UINT8_T;
  case CF_DT_INT16: return MPI_INT16_T;
  case CF_DT_INT32: return MPI_INT32_T;
  case CF_DT_INT64: return MPI_INT64_T;
  case CF_DT_UINT16: return MPI_UINT16_T;
  case CF_DT_UINT32: return MPI_UINT32_T;
  case CF_DT_UINT64: return MPI_UINT64_T;
  case CF_DT_BOOL: return MPI_UINT8_T; /* 0 and 1, reduced by max and min */
  case CF_DT_FLOAT32: return MPI_FLOAT;
  case CF_DT_FLOAT64: return MPI_DOUBLE;
  case CF_DT_FLOAT16:
  case CF_DT_BFLOAT16: return w->half;
  default: return MPI_DATATYPE_NULL;
  }
}

static MPI_Op mpi_op(const cf_mpi_world *w, cf_dtype dt, int red) {
  red = cf_dtype_reduction(dt, (cf_reduction)red);
  if (dt == CF_DT_FLOAT16 || dt == CF_DT_BFLOAT16)
    return w->half_op[dt == CF_DT_BFLOAT16][red == CF_RED_MEAN ? CF_RED_SUM : red];
  switch (red) {
  case CF_RED_MAX: return MPI_MAX;
  case CF_RED_MIN: return MPI_MIN;
  case CF_RED_PROD: return MPI_PROD;
  default: return MPI_SUM;
  }
}

static bool is_int(cf_dtype dt) { return !cf_dtype_is_float(dt); }

/* Integer mean sums exactly in 64 bits (like collfuse's kernels; uint64 wraps as
 * unsigned) and truncates. */
static bool wide_mean(const cf_coll_desc *d) { return d->red == CF_RED_MEAN && is_int(d->dtype); }

static void widen(int64_t *dst, const void *src, cf_dtype dt, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = cf_load_i64(src, dt, i);
}

static void narrow_mean(void *dst, const int64_t *src, cf_dtype dt, int64_t n, int ranks) {
  bool u = cf_dtype_is_unsigned(dt); /* uint64: its bits, divided unsigned */
  for (int64_t i = 0; i < n; i++)
    cf_store_i64(dst, dt, i, u ? (int64_t)((uint64_t)src[i] / (uint64_t)ranks) : src[i] / ranks);
}

static void scale_mean(cf_device *dev, const cf_coll_call *call, void *buf, int64_t n) {
  cf_kernel_key k = {.kind = CF_K_SCALE, .dtype = call->desc.dtype};
  if (n > 0 && call->n > 1) dev->ops->scale(dev, &k, buf, n, (double)call->n);
}

static char *at(const void *base, int64_t elems, int es) { return (char *)base + elems * (int64_t)es; }

/* Where a ReduceScatter member's result goes: its place in out, or in
 * place my block of its input. */
static void *rs_block(const cf_coll_call *call, const cf_coll_seg *s, int es) {
  return call->desc.in_place ? at(call->in, s->in_off + call->me * s->count, es)
                             : at(call->out, s->out_off, es);
}

/* The communicator made for members ranks[0..n), or NULL. */
static const native_group *find_group(const cf_mpi_world *w, const int *ranks, int n) {
  for (int i = 0; i < w->n_groups; i++)
    if (w->groups[i].n == n && memcmp(w->groups[i].ranks, ranks, sizeof(int) * (size_t)n) == 0)
      return &w->groups[i];
  return NULL;
}

static MPI_Comm group_comm(const cf_mpi_world *w, const cf_coll_call *call) {
  const native_group *g = find_group(w, call->ranks, call->n);
  if (g) return g->comm;
  bool identity = call->n == w->comm.size;
  for (int i = 0; i < call->n && identity; i++) identity = call->ranks[i] == i;
  return identity ? w->world : MPI_COMM_NULL;
}

static int native_call(cf_mpi_world *w, cf_device *dev, const cf_coll_call *call, MPI_Comm comm) {
  const cf_coll_desc *d = &call->desc;
  int es = cf_dtype_size(d->dtype), n = call->n, me = call->me;
  MPI_Datatype t = mpi_type(w, d->dtype);
  MPI_Op op = d->red >= 0 ? mpi_op(w, d->dtype, d->red) : MPI_OP_NULL;
  int count = (int)d->count;
  bool wide = wide_mean(d);
  int64_t *wbuf = call->scratch;
  switch (d->op) {
  case CF_OP_ALLREDUCE:
    if (wide) {
      widen(wbuf, call->in, d->dtype, d->count);
      int rc = MPI_Allreduce(MPI_IN_PLACE, wbuf, count, MPI_UINT64_T, MPI_SUM, comm);
      if (rc == MPI_SUCCESS) narrow_mean(call->out, wbuf, d->dtype, d->count, n);
      return rc;
    } else {
      int rc = MPI_Allreduce(call->in == call->out ? MPI_IN_PLACE : call->in, call->out, count, t, op, comm);
      if (rc == MPI_SUCCESS && d->red == CF_RED_MEAN) scale_mean(dev, call, call->out, d->count);
      return rc;
    }
  case CF_OP_REDUCE: {
    bool root = me == d->root;
    if (wide) {
      widen(wbuf, call->in, d->dtype, d->count);
      int rc = MPI_Reduce(root ? MPI_IN_PLACE : wbuf, root ? wbuf : NULL, count, MPI_UINT64_T, MPI_SUM, d->root, comm);
      if (rc == MPI_SUCCESS && root) narrow_mean(call->out, wbuf, d->dtype, d->count, n);
      return rc;
    }
    int rc = MPI_Reduce(call->in, root ? call->out : NULL, count, t, op, d->root, comm);
    if (rc == MPI_SUCCESS && root && d->red == CF_RED_MEAN) scale_mean(dev, call, call->out, d->count);
    return rc;
  }
  case CF_OP_BROADCAST:
    if (me == d->root) dev->ops->copy(dev, call->out, call->in, (size_t)d->count * (size_t)es);
    return MPI_Bcast(call->out, count * es, MPI_BYTE, d->root, comm);
  case CF_OP_ALLGATHER: {
    const cf_coll_seg *s = call->segs;
    size_t bytes = (size_t)d->count * (size_t)es;
    if (call->n_segs == 1 && s->in_off == 0 && s->out_off == 0 && s->count == d->count) {
      /* in place, my input is my block of the output: MPI's own in-place form */
      if (d->in_place)
        return MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, call->out, (int)bytes, MPI_BYTE,
                             comm);
      return MPI_Allgather(call->in, (int)bytes, MPI_BYTE, call->out, (int)bytes, MPI_BYTE, comm);
    }
    /* a fused bucket: gather whole input buckets, then place the members
     * (in place, my bucket is packed from my blocks of the output first) */
    int rc;
    if (d->in_place) {
      for (int j = 0; j < call->n_segs; j++)
        dev->ops->copy(dev, at(call->scratch, me * d->count + s[j].in_off, es),
                       at(call->out, s[j].out_off + me * s[j].count, es),
                       (size_t)s[j].count * (size_t)es);
      rc = MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, call->scratch, (int)bytes, MPI_BYTE,
                         comm);
    } else {
      rc = MPI_Allgather(call->in, (int)bytes, MPI_BYTE, call->scratch, (int)bytes, MPI_BYTE, comm);
    }
    for (int p = 0; p < n && rc == MPI_SUCCESS; p++)
      for (int j = 0; j < call->n_segs && !(d->in_place && p == me); j++)
        dev->ops->copy(dev, at(call->out, call->segs[j].out_off + p * call->segs[j].count, es),
                       at(call->scratch, p * d->count + call->segs[j].in_off, es),
                       (size_t)call->segs[j].count * (size_t)es);
    return rc;
  }
  case CF_OP_REDUCESCATTER: {
    const cf_coll_seg *s = call->segs;
    if (call->n_segs == 1 && !wide) {
      /* in place, out is my block of in, which MPI may not write while it
       * reads (MPI_IN_PLACE would put the result at block 0): into scratch */
      void *to = rs_block(call, s, es), *recv = d->in_place ? call->scratch : to;
      int rc =
          MPI_Reduce_scatter_block(at(call->in, s->in_off, es), recv, (int)s->count, t, op, comm);
      if (rc == MPI_SUCCESS && recv != to)
        dev->ops->copy(dev, to, recv, (size_t)s->count * (size_t)es);
      if (rc == MPI_SUCCESS && d->red == CF_RED_MEAN) scale_mean(dev, call, to, s->count);
      return rc;
    }
    /* pack every member's block p together (widened for integer mean),
     * reduce-scatter once, unpack */
    int64_t per = 0;
    for (int j = 0; j < call->n_segs; j++) per += s[j].count;
    int ws = wide ? 8 : es;
    char *packed = call->scratch, *mine = at(packed, (int64_t)n * per, ws);
    for (int p = 0; p < n; p++) {
      int64_t o = (int64_t)p * per;
      for (int j = 0; j < call->n_segs; j++) {
        const void *from = at(call->in, s[j].in_off + p * s[j].count, es);
        if (wide) widen((int64_t *)packed + o, from, d->dtype, s[j].count);
        else dev->ops->copy(dev, at(packed, o, es), from, (size_t)s[j].count * (size_t)es);
        o += s[j].count;
      }
    }
    int rc = MPI_Reduce_scatter_block(packed, mine, (int)per, wide ? MPI_UINT64_T : t, wide ? MPI_SUM : op, comm);
    int64_t o = 0;
    for (int j = 0; j < call->n_segs && rc == MPI_SUCCESS; j++) {
      void *to = rs_block(call, &s[j], es);
      if (wide) narrow_mean(to, (int64_t *)mine + o, d->dtype, s[j].count, n);
      else {
        dev->ops->copy(dev, to, at(mine, o, es), (size_t)s[j].count * (size_t)es);
        if (d->red == CF_RED_MEAN) scale_mean(dev, call, to, s[j].count);
      }
      o += s[j].count;
    }
    return rc;
  }
  default: return MPI_ERR_OP;
  }
}

/* End the job from the watchdog: this rank's message, then MPI_Abort (the
 * blocked collective can neither return nor be interrupted). */
static void dog_bite(cf_mpi_world *w, const char *text) {
  fprintf(stderr, "error: %s\n", text);
  fflush(stdout);
  fflush(stderr);
  MPI_Abort(w->world, 3);
  _exit(3);
}

static void *dog_main(void *arg) {
  cf_mpi_world *w = arg;
  pthread_mutex_lock(&w->dog_lock);
  for (;;) {
    while (!w->dog_stop && w->native_deadline == 0) pthread_cond_wait(&w->dog_cond, &w->dog_lock);
    if (w->dog_stop) break;
    double deadline = w->native_deadline;
    char what[sizeof w->native_what];
    snprintf(what, sizeof what, "%s", w->native_what);
    pthread_mutex_unlock(&w->dog_lock);
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    bool gone = cf_mpi_poll_abort(w), late = cf_now() > deadline;
    pthread_mutex_lock(&w->dog_lock);
    if (w->native_deadline != deadline) continue; /* that call has returned */
    if (gone) dog_bite(w, w->msg);
    if (late) {
      char text[512];
      snprintf(text, sizeof text,
               "rank %d timed out after %g s in %s: a rank of the group did not join (or has failed)",
               w->comm.rank, w->timeout_s, what);
      cf_mpi_world_abort(w, text);
      dog_bite(w, text);
    }
  }
  pthread_mutex_unlock(&w->dog_lock);
  return NULL;
}

/* Arm (what != NULL) or disarm the watchdog around a native collective. */
static bool dog_watch(cf_mpi_world *w, const char *what) {
  pthread_mutex_lock(&w->dog_lock);
  if (what && !w->dog_started) w->dog_started = pthread_create(&w->dog, NULL, dog_main, w) == 0;
  bool ok = !what || w->dog_started;
  if (what) snprintf(w->native_what, sizeof w->native_what, "%s", what);
  w->native_deadline = what ? cf_now() + w->timeout_s : 0;
  pthread_cond_broadcast(&w->dog_cond);
  pthread_mutex_unlock(&w->dog_lock);
  return ok;
}

cf_status cf_mpi_native(cf_comm *c, cf_device *dev, const cf_coll_call *call) {
  cf_mpi_world *w = c->impl;
  const cf_coll_desc *d = &call->desc;
  if (atomic_load(&w->aborted)) return cf_mpi_aborted_error(c);
  if (call->me < 0) return CF_OK;
  MPI_Comm comm = group_comm(w, call);
  if (comm == MPI_COMM_NULL)
    return cf_error(c->ctx, CF_ERR_RUNTIME, NULL, 0,
                    "mpi-native: group '%s' has no MPI communicator (cf_exec_prepare was not called)",
                    d->group);
  int64_t bytes = d->count * cf_dtype_size(d->dtype);
  if (d->count > INT32_MAX / 8 || bytes > INT32_MAX)
    return cf_error(c->ctx, CF_ERR_UNSUPPORTED, NULL, 0,
                    "mpi-native: %s '%s' moves %lld bytes, more than one MPI call can count (2 GiB)",
                    cf_op_table[d->op].name, d->node ? d->node : "?", (long long)bytes);
  if (call->scratch_bytes < cf_coll_scratch_bytes(d, call->n, CF_ALGO_MPI_NATIVE, false))
    return cf_error(c->ctx, CF_ERR_RUNTIME, NULL, 0, "mpi-native: %s '%s': the plan gave too little scratch",
                    cf_op_table[d->op].name, d->node ? d->node : "?");
  char what[256];
  snprintf(what, sizeof what, "MPI's %s '%s' (#%lld of group %s, mpi-native)", cf_op_table[d->op].name,
           d->node ? d->node : "?", (long long)d->seq, d->group);
  if (!dog_watch(w, what))
    return cf_error(c->ctx, CF_ERR_RUNTIME, NULL, 0, "mpi-native: cannot start the watchdog thread");
  cf_mpi_lock(w);
  int rc = native_call(w, dev, call, comm);
  cf_mpi_unlock(w);
  dog_watch(w, NULL);
  if (rc != MPI_SUCCESS) {
    char e[MPI_MAX_ERROR_STRING], text[768];
    snprintf(text, sizeof text, "rank %d: MPI's %s failed in '%s' (group %s): %s", c->rank,
             cf_op_table[d->op].name, d->node ? d->node : "?", d->group, cf_mpi_error_text(rc, e));
    return cf_mpi_fail_all(c, text);
  }
  return CF_OK;
}


void cf_mpi_native_init(cf_mpi_world *w) {
  MPI_Type_contiguous(2, MPI_BYTE, &w->half);
  MPI_Type_commit(&w->half);
  MPI_User_function *fns[2][CF_RED_COUNT] = {
      {f16_sum, f16_sum, f16_max, f16_min, f16_prod}, {bf16_sum, bf16_sum, bf16_max, bf16_min, bf16_prod}};
  for (int b = 0; b < 2; b++)
    for (int r = 0; r < CF_RED_COUNT; r++) MPI_Op_create(fns[b][r], 1, &w->half_op[b][r]);
}

void cf_mpi_native_stop(cf_mpi_world *w) {
  pthread_mutex_lock(&w->dog_lock);
  w->dog_stop = true;
  pthread_cond_broadcast(&w->dog_cond);
  pthread_mutex_unlock(&w->dog_lock);
  if (w->dog_started) pthread_join(w->dog, NULL);
  w->dog_started = false;
}

void cf_mpi_native_free(cf_mpi_world *w) {
  for (int i = 0; i < w->n_groups; i++) {
    if (w->groups[i].comm != MPI_COMM_NULL) MPI_Comm_free(&w->groups[i].comm);
    free(w->groups[i].ranks);
  }
  for (int b = 0; b < 2; b++)
    for (int r = 0; r < CF_RED_COUNT; r++)
      if (w->half_op[b][r] != MPI_OP_NULL && w->half_op[b][r]) MPI_Op_free(&w->half_op[b][r]);
  if (w->half != MPI_DATATYPE_NULL) MPI_Type_free(&w->half);
}

cf_status cf_mpi_native_groups(cf_mpi_world *w, const cf_world_group *groups, int n) {
  cf_context *ctx = w->comm.ctx;
  MPI_Group world_group;
  MPI_Comm_group(w->world, &world_group);
  cf_status st = CF_OK;
  for (int c = 0; c < n && !st; c++) {
    const cf_world_group *pc = &groups[c];
    bool member = false, identity = pc->n == w->comm.size && pc->n_parts == 1;
    const int *part = pc->ranks; /* a partitioned group: the part that holds this rank */
    for (int i = 0; i < pc->n * pc->n_parts; i++) {
      if (pc->ranks[i] == w->comm.rank) {
        member = true;
        part = pc->ranks + i / pc->n * pc->n;
      }
      identity &= pc->ranks[i] == i;
    }
    /* only the part's ranks make it, once per process */
    if (!member || identity || find_group(w, part, pc->n)) continue;
    native_group *ng = realloc(w->groups, sizeof *ng * (size_t)(w->n_groups + 1));
    int *ranks = malloc(sizeof(int) * (size_t)pc->n);
    if (ng) w->groups = ng;
    if (!ng || !ranks) {
      free(ranks);
      st = cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "mpi transport: out of memory");
      break;
    }
    memcpy(ranks, part, sizeof(int) * (size_t)pc->n);
    uint32_t h = 2166136261u; /* the tag: every member computes the same */
    for (int i = 0; i < pc->n; i++)
      h = (h ^ (uint32_t)part[i]) * 16777619u;
    MPI_Group grp;
    MPI_Comm comm = MPI_COMM_NULL;
    int rc = MPI_Group_incl(world_group, pc->n, part, &grp);
    if (rc == MPI_SUCCESS) {
      rc = MPI_Comm_create_group(w->world, grp, TAG_GROUP + (int)(h % TAG_GROUPS), &comm);
      MPI_Group_free(&grp);
    }
    if (rc != MPI_SUCCESS) {
      char e[MPI_MAX_ERROR_STRING];
      free(ranks);
      st = cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "mpi transport: MPI_Comm_create_group for group '%s': %s",
                    pc->name, cf_mpi_error_text(rc, e));
      break;
    }
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    w->groups[w->n_groups++] = (native_group){.ranks = ranks, .n = pc->n, .comm = comm};
  }
  MPI_Group_free(&world_group);
  return st;
}
