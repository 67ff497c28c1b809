/* trace.h - a run's timeline (trace.c), apart from ir.h.
 *
 * Only the code that records or writes a trace includes it: the executor's
 * rank and communication threads, the transports and algorithms that mark
 * their phases, the JIT's kernel lookups, the driver and the API. ir.h
 * keeps the opaque cf_trace a context carries (and cf_trace_lane, which
 * codegen's table passes), so ir.h itself names nothing of trace.c.
 */
#ifndef COLLFUSE_IR_TRACE_H
#define COLLFUSE_IR_TRACE_H

#include "ir.h"

/* One complete event (begin and end) on a lane. Strings outlive the
 * writing of the trace (static, or the graph's). */
typedef struct cf_trace_ev {
  int64_t t0, t1;        /* cf_trace_clock nanoseconds */
  const char *name;      /* what ran: a node's name, a phase, an algorithm's phase */
  const char *cat;       /* static: "compute", "copy", "collective", "wait", "start",
                          * "algorithm", "transport", "iteration", "phase", "kernel" */
  const struct cf_node *node; /* args: its op, group and members; NULL: none */
  const char *algo;      /* args: the algorithm; NULL: none */
  int64_t bytes;         /* args: bytes moved; 0: none */
  const char *arg_name;  /* args: one more integer (static name); NULL: none */
  int64_t arg;
} cf_trace_ev;
/* A thread's ring buffer: the last cap events of the n it recorded. */
struct cf_trace_lane {
  cf_trace_ev *v; /* cap events, allocated on the first */
  int64_t cap, n;
  int pid, tid;      /* Chrome's process (a rank; -1: the driver, written as pid ranks) and thread */
  bool failed_alloc; /* v could not be allocated: every event is dropped */
};
struct cf_trace {
  int ranks, n_lanes;   /* lanes: the driver's, then 2 per rank (thread 0 compute, 1 collectives);
                         * ranks may be set below what the lanes were made for */
  cf_trace_lane *lanes;
  int64_t t0;           /* cf_trace_clock when made: the trace's time 0 */
  char *failed;         /* the run's failure (cf_trace_fail), written with the trace */
};
/* The calling thread's lane, NULL when it records nothing: set by a thread
 * that records (the executor's rank and communication threads, the driver)
 * and read by code deep in its calls (transports, algorithms, the JIT). */
extern _Thread_local cf_trace_lane *cf_trace_here;
/* The events each lane keeps unless a caller asks for other (the newest win). */
#define CF_TRACE_EVENTS ((int64_t)1 << 16)
cf_status cf_trace_create(int ranks, int64_t events_per_lane, cf_trace **out);
void cf_trace_destroy(cf_trace *t);
cf_trace_lane *cf_trace_lane_of(cf_trace *t, int rank, int thread); /* NULL when t is */
cf_trace_lane *cf_trace_driver(cf_trace *t);                        /* NULL when t is */
/* The run turned out to have ranks ranks (at most those t was made for). */
void cf_trace_set_ranks(cf_trace *t, int ranks);
int64_t cf_trace_clock(void);                         /* monotonic nanoseconds */
int64_t cf_trace_ns(const cf_trace *t, double secs); /* a cf_now time on that clock */
void cf_trace_put(cf_trace_lane *l, const cf_trace_ev *e);
/* Record e on lane l (its own thread only); nothing when l is NULL. */
static inline void cf_trace_record(cf_trace_lane *l, const cf_trace_ev *e) {
  if (l) cf_trace_put(l, e);
}
/* Events lost to full (or unallocated) ring buffers, over every lane. */
int64_t cf_trace_dropped(const cf_trace *t);
/* The events lane l kept, oldest first: event i of the count returned is
 * (*first)[(*start + i) % l->cap]. */
int64_t cf_trace_events(const cf_trace_lane *l, const cf_trace_ev **first, int64_t *start);
/* The run failed with message why (the first call counts). */
void cf_trace_fail(cf_trace *t, const char *why);
/* What a rank's events say over its timed iterations (those from
 * iteration first_iter on), in microseconds summed over them. */
typedef struct cf_trace_rank {
  int iters;         /* timed iterations seen */
  double iter_us;    /* their time */
  double compute_us; /* compute steps, copies and fused MatMul ops on the rank thread */
  double comm_us;    /* collectives, wherever they ran */
  double exposed_us; /* the rank thread waiting on collectives or running them inline: the
                      * communication no compute of the rank hides */
} cf_trace_rank;
/* One plan collective over every rank's timed iterations (runs of it). */
typedef struct cf_trace_bucket {
  const char *name;         /* NULL: never seen */
  const struct cf_node *node;
  const char *algo;
  int64_t bytes;
  int runs;
  double start_after_us; /* from its START step's end (its last member produced) to its run
                          * on the communication thread; 0 for runs inline */
  double duration_us;    /* its runs */
  double wait_us;        /* the rank thread waiting on it (or running it inline) */
} cf_trace_bucket;
/* Sum t's events per rank (ranks[t->ranks]) and per plan collective
 * (buckets[n_colls], by the events' "coll" argument). CF_ERR_NO_MEMORY
 * when the scratch cannot be had. */
cf_status cf_trace_summarize(const cf_trace *t, int first_iter, int n_colls, cf_trace_rank *ranks,
                             cf_trace_bucket *buckets);
/* Write t to path as Chrome trace event JSON (traceEvents, one process per
 * rank and one for the driver, a thread per lane, otherData with the ranks,
 * dropped_events and the failure). */
cf_status cf_trace_write(cf_context *ctx, const cf_trace *t, const char *path);

#endif
