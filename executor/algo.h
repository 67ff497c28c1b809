/* algo.h - collective algorithms as rows of one table, and the policies
 * that choose among them (algo.c), in the manner of UCC's algorithm tables
 * (tl/ucp/allreduce/: name, description, run, scratch, supports).
 *
 * An algorithm is a row of cf_algo_table: its name (what --algo, the C
 * API's `algo` option, bench allreduce's columns and docs/executor.md's
 * table show), what it does, how it runs one call, how much scratch a call
 * needs, which calls it supports, and what runs instead where it does not.
 * A policy (`auto` on the threads transport, or on an MPI job over shared
 * memory or a network) is a short list of measured rules, data in
 * cf_algo_policies next to the table, that picks a row by rank count and
 * bytes per rank. A request names either a policy or one row; a policy
 * may carry a measured profile's rules (api/profile.c), tried first.
 *
 * Adding an algorithm: write its run (and scratch and supports) functions
 * in algo.c, or in a file of its own declared in algorithms.h, and add one row at
 * the end of cf_algo_table. Nothing else lists algorithms; only the rows
 * the selection rules and the tests refer to by name have a cf_algo
 * constant.
 *
 * Layering: coll.c (checks, dispatch) -> algo.c (the table, selection) ->
 * algo_*.c (the algorithms) -> reduce.c (the ordered reduction). Nothing
 * calls upward.
 */
#ifndef CF_EXECUTOR_ALGO_H
#define CF_EXECUTOR_ALGO_H

#include "algorithms.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cf_algo_info {
  const char *name;        /* --algo's word */
  const char *alias;       /* another accepted spelling, or NULL */
  const char *description; /* what it does (docs/executor.md's table) */
  const char *steps;       /* its message rounds, in words (the same table) */
  const char *order;       /* the order each element is reduced in (the same table) */
  bool rank_order;         /* reduces each element from all ranks in rank order in one n-ary
                            * call: bitwise the same for any chunking (--deterministic) */
  bool exact_mean;         /* integer mean sums in int64 (else partial sums round to the type) */
  bool native;             /* the transport's own collectives, not collfuse's (run only) */
  bool segmented;          /* a large AllReduce runs as CF_ALGO_SEGMENT_BYTES pieces */
  int fallback;            /* the row that runs where this one may not; -1: the auto policy */
  /* Run one call on this rank (call->algo is this row). */
  cf_status (*run)(cf_comm *c, cf_device *dev, const cf_coll_call *call);
  /* Scratch bytes a call on n ranks needs; zero_copy: recv() reads in place. */
  size_t (*scratch_bytes)(const cf_coll_desc *d, int n, bool zero_copy);
  /* Whether it runs a collective of this kind on this many ranks and bytes per rank. */
  bool (*supports)(cf_op kind, int ranks, int64_t bytes);
} cf_algo_info;

extern const cf_algo_info cf_algo_table[];
extern const int cf_algo_count; /* rows of cf_algo_table */

/* What chooses the algorithm of a call. */
typedef enum cf_algo_policy {
  CF_POLICY_AUTO,         /* by size and ranks, as measured on the threads transport */
  CF_POLICY_AUTO_MPI_SHM, /* as measured on MPI, every rank reaching every other through shm */
  CF_POLICY_AUTO_MPI_NET, /* as measured on MPI over a network: MPI's own AllReduce where it won */
  CF_POLICY_FORCED,       /* the row asked for (or its fallback where it may not run) */
} cf_algo_policy;

typedef struct cf_algo_rule cf_algo_rule;

/* A request: a policy, or (CF_POLICY_FORCED) one row. Zero is auto. A
 * policy may carry measured rules (a profile's, api/profile.c) that are
 * tried before its own; the caller keeps them alive as long as the plan. */
typedef struct cf_algo_req {
  cf_algo_policy policy;
  int algo;                     /* a row of cf_algo_table; CF_POLICY_FORCED only */
  const cf_algo_rule *measured; /* policies only: rules tried first, or NULL */
  int n_measured;
  /* policies only: the cores the world's ranks share where they are fewer
   * than its ranks (cf_comm.cores, the same on every rank: the shm world
   * agrees on it at start-up), else 0; set by the run's set-up */
  int cores;
} cf_algo_req;

/* Forcing row a. */
static inline cf_algo_req cf_algo_forced(int a) {
  return (cf_algo_req){.policy = CF_POLICY_FORCED, .algo = a};
}

/* One measured rule of a policy: calls on min_ranks..max_ranks ranks with
 * min_bytes..max_bytes per rank (0: unbounded) run algo. */
struct cf_algo_rule {
  int min_ranks, max_ranks;
  int64_t min_bytes, max_bytes;
  int algo;
  int in_place; /* 1: in-place calls only, -1: out-of-place calls only, 0: both */
  bool oversubscribed; /* only where the ranks outnumber the request's cores */
};

/* A policy's AllReduce rules, first match wins; a rule whose algorithm may
 * not run the call (MPI's own under --deterministic) is passed over. When
 * none matches, otherwise runs (direct when there are fewer elements than
 * ranks). Other kinds run the first row that supports them. */
typedef struct cf_algo_policy_info {
  const char *name;     /* what --algo calls it */
  const char *measured; /* where the thresholds come from */
  const cf_algo_rule *rules;
  int n_rules;
  int otherwise;
} cf_algo_policy_info;

extern const cf_algo_policy_info cf_algo_policies[CF_POLICY_FORCED];

/* ---------------- algo.c: names and selection ---------------- */

/* Row a's name ("?" when out of range). */
const char *cf_algo_name(int a);
/* "auto" for a policy, else the forced row's name. */
const char *cf_algo_req_name(cf_algo_req r);
/* A policy or row by name (or alias); false when unknown. with_native:
 * the transport's own rows are accepted. */
bool cf_algo_parse(const char *s, bool with_native, cf_algo_req *out);
/* The accepted words joined by sep ("auto|direct|rd|..."), auto first,
 * then collfuse's rows alphabetically, then (with_native) the transport's:
 * into buf, truncated to len. Returns buf. */
const char *cf_algo_choices(bool with_native, const char *sep, const char *last_sep, char *buf,
                            size_t len);
/* The row a request resolves to for desc on n ranks (a pure function of
 * desc, n and the mode, so every rank picks the same). */
int cf_coll_select(const cf_coll_desc *d, int n, bool deterministic, cf_algo_req req);
/* Scratch bytes row a needs for a call (so the plan can size it). */
size_t cf_coll_scratch_bytes(const cf_coll_desc *d, int n, int a, bool zero_copy);

/* ---------------- coll.c: checks and dispatch ---------------- */

/* Run one collective call on this rank. */
cf_status cf_coll_run(cf_comm *c, cf_device *dev, const cf_coll_call *call);

#endif
