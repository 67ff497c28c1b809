/* api.c - the embedding API: options, pipelines, executables and runs with
 * caller-owned buffers.
 *
 * This is the library's top layer, doing what tools/run.c does for the
 * command line: verify, run a pipeline, plan, run. An executable is a plan
 * over a held graph plus the lists of its Input and Output nodes in graph
 * order, which number the caller's buffers. The plan reads the graph's nodes
 * when it runs, so the executable records the graph's generation and refuses
 * (CF_ERR_USAGE) to run or describe itself once the graph has changed, and
 * its hold keeps the graph alive past the caller's cf_graph_destroy. A run hands the caller's buffers
 * to the executor as they are (cf_inputs.borrow and .outputs): the plan says
 * which ones it can use in place (cf_plan_binds) and copies only the others,
 * into a fused bucket or out of one, because a bucket is one contiguous
 * buffer that the collective moves in one call.
 */
#include "../executor/executor.h"
#include "../executor/transports/transports.h"

#include "../ir/trace.h"
#include "../passes/passes.h"
#include "api.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================= options ================= */

struct cf_options {
  cf_context *ctx;
  char *passes, *split, *cost, *target; /* NULL: default */
  char *profile;                        /* NULL: $COLLFUSE_PROFILE or the user's; "none" */
  char *trace;                          /* each cf_executable_run's timeline, NULL: none */
  bool explain, deterministic;
  int ranks; /* 0: the graph's world_size */
  cf_algo_req algo;
  double timeout_s;
  uint64_t seed;
  int64_t max_memory; /* 0: what the machine has available */
  bool shm;           /* backend shm: cf_executable_run_rank's world */
  char *job;          /* its job's name (NULL: the launcher's, from the environment) */
};

cf_status cf_options_create(cf_context *ctx, cf_options **out) {
  if (!out) return CF_ERR_USAGE;
  *out = NULL;
  if (!ctx) return CF_ERR_USAGE;
  cf_options *o = calloc(1, sizeof *o);
  if (!o) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  o->ctx = ctx;
  o->timeout_s = 60;
  *out = o;
  return CF_OK;
}

void cf_options_destroy(cf_options *o) {
  if (!o) return;
  free(o->passes);
  free(o->split);
  free(o->cost);
  free(o->target);
  free(o->profile);
  free(o->trace);
  free(o->job);
  free(o);
}

static bool parse_bool(const char *v, bool *out) {
  static const char *yes[] = {"1", "true", "yes", "on"}, *no[] = {"0", "false", "no", "off"};
  for (int i = 0; i < 4; i++) {
    if (strcmp(v, yes[i]) == 0) return *out = true;
    if (strcmp(v, no[i]) == 0) return !(*out = false);
  }
  return false;
}

static cf_status check_passes(cf_context *ctx, const char *v) {
  char why[640];
  bool unknown;
  if (cf_pass_list_check(cf_pipeline_list(v), why, sizeof why, &unknown)) return CF_OK;
  return cf_error(ctx, CF_ERR_USAGE, NULL, 0, "option passes: %s%s", why,
                  unknown ? "; or the pipelines default, O0" : "");
}

static cf_status set_str(cf_options *o, char **slot, const char *v) {
  char *c = strdup(v);
  if (!c) return cf_error(o->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  free(*slot);
  *slot = c;
  return CF_OK;
}

cf_status cf_options_set(cf_options *o, const char *key, const char *value) {
  if (!o) return CF_ERR_USAGE;
  if (!key || !value)
    return cf_error(o->ctx, CF_ERR_USAGE, NULL, 0, "cf_options_set: key and value are required");
  char why[256];
  int64_t x;
  cf_status st;
  if (strcmp(key, "passes") == 0) {
    if ((st = check_passes(o->ctx, value))) return st;
    return set_str(o, &o->passes, value);
  }
  if (strcmp(key, "split") == 0) {
    cf_split sp;
    if (!cf_split_parse(value, &sp, why, sizeof why))
      return cf_error(o->ctx, CF_ERR_USAGE, NULL, 0, "option split: %s", why);
    return set_str(o, &o->split, value);
  }
  if (strcmp(key, "cost") == 0) {
    cf_cost c;
    if (!cf_cost_parse(value, &c, why, sizeof why))
      return cf_error(o->ctx, CF_ERR_USAGE, NULL, 0, "option cost: %s", why);
    return set_str(o, &o->cost, value);
  }
  if (strcmp(key, "profile") == 0) {
    /* read now, so a malformed or missing file is refused where it is named */
    cf_profile *p = NULL;
    char path[4096];
    cf_status ps = cf_profile_find(o->ctx, value, &p, path, sizeof path);
    cf_profile_destroy(p);
    return ps ? ps : set_str(o, &o->profile, value);
  }
  if (strcmp(key, "target") == 0) {
    if (!cf_target_find(value))
      return cf_error(o->ctx, CF_ERR_USAGE, NULL, 0, "option target: %s",
                      cf_target_unknown(value, why, sizeof why));
    return set_str(o, &o->target, value);
  }
  if (strcmp(key, "trace") == 0) {
    if (!*value || strcmp(value, "-") == 0)
      return cf_error(o->ctx, CF_ERR_USAGE, NULL, 0, "option trace wants a file (FILE.json), got '%s'",
                      value);
    return set_str(o, &o->trace, value);
  }
  if (strcmp(key, "explain") == 0 || strcmp(key, "deterministic") == 0) {
    bool *b = key[0] == 'e' ? &o->explain : &o->deterministic;
    if (!parse_bool(value, b))
      return cf_error(o->ctx, CF_ERR_USAGE, NULL, 0, "option %s wants 1 or 0, got '%s'", key,
                      value);
    return CF_OK;
  }
  if (strcmp(key, "backend") == 0) {
    if (!cf_option_choice("option backend", "mpi|shm", value, why, sizeof why))
      return cf_error(o->ctx, CF_ERR_USAGE, NULL, 0, "%s", why);
    o->shm = strcmp(value, "shm") == 0;
    return CF_OK;
  }
  if (strcmp(key, "job") == 0) {
    if (!*value || strlen(value) >= 128)
      return cf_error(o->ctx, CF_ERR_USAGE, NULL, 0, "option job wants a name of 1 to 127 bytes");
    return set_str(o, &o->job, value);
  }
  /* the checks the driver's options share (options.c) */
  bool ok = true;
  if (strcmp(key, "ranks") == 0) {
    ok = cf_option_int("option ranks", value, 1, CF_MAX_WORLD, &x, why, sizeof why);
    if (ok) o->ranks = (int)x;
  } else if (strcmp(key, "algo") == 0) {
    ok = cf_option_algo("option algo", value, true, &o->algo, why, sizeof why);
  } else if (strcmp(key, "timeout") == 0) {
    ok = cf_option_timeout("option timeout", value, &o->timeout_s, why, sizeof why);
  } else if (strcmp(key, "max_memory") == 0) {
    ok = cf_option_size("option max_memory", value, 1, CF_MAX_MEMORY, &o->max_memory, why,
                        sizeof why);
  } else if (strcmp(key, "seed") == 0) {
    ok = cf_option_seed("option seed", value, &o->seed, why, sizeof why);
  } else {
    return cf_error(
        o->ctx, CF_ERR_USAGE, NULL, 0,
        "unknown option '%s' (passes, split, cost, profile, target, explain, ranks, deterministic, "
        "algo, timeout, seed, max_memory, backend, job, trace)",
        key);
  }
  return ok ? CF_OK : cf_error(o->ctx, CF_ERR_USAGE, NULL, 0, "%s", why);
}

/* ================= pipelines ================= */

static void explain_to_log(void *user, const char *line) {
  cf_log(user, CF_LOG_INFO, "explain: %s", line);
}

/* The run's world: the "ranks" option sizes the graph as `collfuse run
 * --ranks` does, and is named when the graph is for another size. */
static cf_status size_world(cf_graph *g, const cf_options *opt) {
  if (!opt || opt->ranks <= 0) return CF_OK;
  char job[48];
  snprintf(job, sizeof job, "option ranks=%d", opt->ranks);
  int64_t before = g->world_size;
  cf_status st = cf_graph_size_world(g, opt->ranks, job);
  if (g->world_size != before) g->generation++; /* resized: types change */
  return st;
}

cf_status cf_graph_run_pipeline(cf_graph *g, const char *pipeline, const cf_options *opt) {
  if (!g) return CF_ERR_USAGE;
  const char *p = pipeline ? pipeline : opt && opt->passes ? opt->passes : "default";
  cf_status st = check_passes(g->ctx, p);
  if (st) return st;
  g->generation++; /* the passes rewrite g: executables made before are stale */
  cf_compile_options co = {.pipeline = p,
                           .pass = {.split = opt ? opt->split : NULL,
                                    .cost = opt ? opt->cost : NULL,
                                    .target = opt ? opt->target : NULL,
                                    .explain = opt && opt->explain ? explain_to_log : NULL,
                                    .explain_user = g->ctx}};
  st = size_world(g, opt);
  cf_cost measured;
  if (!st)
    st = cf_profile_compile_cost(g->ctx, opt ? opt->profile : NULL, g, &measured,
                                 &co.pass.measured_cost);
  if (!st) st = cf_compile(g, &co);
  return st;
}

/* ================= executables ================= */

struct cf_executable {
  cf_context *ctx;
  cf_graph *g;         /* held (cf_graph_hold) */
  uint64_t generation; /* g's when the plan was made */
  cf_plan *plan;
  int ranks;
  int n_io[2];     /* Inputs, Outputs */
  int *io_node[2]; /* their node indices, graph order */
  double last_ms;
  cf_run_options ro; /* what plan was built with */
  /* cf_executable_run_rank: this process's MPI world and a plan for its
   * staging transport, made by the first call */
  cf_world *mpi;   /* MPI's or (backend shm) the shm world */
  cf_plan *mpi_plan;
  bool mpi_failed; /* a run failed: the job's ranks have stopped */
  bool shm;        /* the option backend is shm */
  char *job;       /* the option job */
  /* buckets: the plan colls that are buckets, in schedule order, and the
   * whole buffers bound to them, [(rank * n_colls + c) * 2 + io] (NULL: in
   * the arena), each either the caller's or the executable's own */
  int n_buckets;
  int *bucket_coll;
  cf_plan *bplan; /* plan's twin with no room for buckets, for runs that give them all */
  void **buckets;
  bool *owned;
  int64_t last_copies, last_copy_bytes;
  char *trace; /* the "trace" option: where each cf_executable_run writes its timeline */
  /* runs started on a runner and not yet ended (cf_executable_start_rank) */
  pthread_mutex_t pending_lock;
  pthread_cond_t pending_done;
  int pending;
  /* the profile (its measured rules the plans' auto reads, kept as long as
   * they) and the memory limit; mpi_setup joins MPI's world with a copy */
  cf_run_setup setup;
};

/* Refuse a run of ranks of e's ranks in this process that needs more memory
 * than the machine has (or the max_memory option allows), before its arenas
 * are allocated. Caller buffers are the caller's: only the arenas count. */
static cf_status check_memory(const cf_executable *e, int ranks, const char *hint) {
  cf_mem_need need = {.file = e->g->file,
                      .ranks = ranks,
                      .world = e->ranks,
                      .per_rank = cf_plan_run_bytes(e->plan, true),
                      .reserved = cf_plan_reserved_bytes(e->plan, ranks),
                      .hint = hint};
  return cf_run_check_memory(e->ctx, &e->setup, &need);
}

cf_status cf_executable_create(cf_graph *g, const cf_options *opt, cf_executable **out) {
  if (!out) return CF_ERR_USAGE;
  *out = NULL;
  if (!g) return CF_ERR_USAGE;
  cf_context *ctx = g->ctx;
  cf_executable *e = calloc(1, sizeof *e);
  if (!e) return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  e->ctx = ctx;
  e->g = g;
  pthread_mutex_init(&e->pending_lock, NULL);
  pthread_cond_init(&e->pending_done, NULL);
  cf_graph_hold(g);
  cf_status st = size_world(g, opt);
  if (g->world_size <= 0) {
    g->world_size = 1;
    g->generation++;
  }
  e->ranks = (int)g->world_size;
  e->shm = opt && opt->shm;
  if (!st && opt && opt->job && !(e->job = strdup(opt->job)))
    st = cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  if (!st) st = cf_verify_for_target(g, opt ? opt->target : NULL);
  cf_run_options ro = {.ranks = e->ranks,
                       .iters = 1,
                       .seed = opt ? opt->seed : 0,
                       .deterministic = opt && opt->deterministic,
                       .timeout_s = opt ? opt->timeout_s : 60,
                       .algo = opt ? opt->algo : (cf_algo_req){.policy = CF_POLICY_AUTO},
                       .lent_inputs = true};
  e->setup = (cf_run_setup){.profile = opt ? opt->profile : NULL,
                            .timeout_s = ro.timeout_s,
                            .max_memory = opt ? opt->max_memory : 0,
                            .max_memory_what = "the max_memory option"};
  if (!st) st = cf_run_prepare(ctx, &e->setup, &ro);
  if (st) goto fail;
  e->ro = ro;
  if (opt && opt->trace && !(e->trace = strdup(opt->trace))) {
    st = cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
    goto fail;
  }
  if ((st = cf_plan_build(ctx, g, &ro, &e->plan))) goto fail;
  /* every way to run it needs one rank's memory in a process */
  if ((st = check_memory(e, 1, NULL))) goto fail;
  for (int io = 0; io < 2; io++) {
    cf_op want = io == CF_IO_INPUT ? CF_OP_INPUT : CF_OP_OUTPUT;
    e->io_node[io] = malloc(sizeof(int) * ((size_t)g->n_nodes + 1));
    if (!e->io_node[io]) {
      st = cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
      goto fail;
    }
    for (int i = 0; i < g->n_nodes; i++)
      if (g->nodes[i].op == want) e->io_node[io][e->n_io[io]++] = i;
  }
  e->bucket_coll = malloc(sizeof(int) * ((size_t)cf_plan_colls(e->plan) + 1));
  size_t slots = (size_t)e->ranks * 2 * (size_t)cf_plan_colls(e->plan) + 1;
  e->buckets = calloc(slots, sizeof *e->buckets);
  e->owned = calloc(slots, sizeof *e->owned);
  if (!e->bucket_coll || !e->buckets || !e->owned) {
    st = cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
    goto fail;
  }
  for (int c = 0; c < cf_plan_colls(e->plan); c++)
    if (cf_plan_bucket_bytes(e->plan, c, 0) > 0 || cf_plan_bucket_bytes(e->plan, c, 1) > 0)
      e->bucket_coll[e->n_buckets++] = c;
  e->generation = g->generation;
  *out = e;
  return CF_OK;
fail:
  cf_executable_destroy(e);
  return st;
}

void cf_executable_destroy(cf_executable *e) {
  if (!e) return;
  pthread_mutex_lock(&e->pending_lock); /* its runs on a runner end first */
  while (e->pending) pthread_cond_wait(&e->pending_done, &e->pending_lock);
  pthread_mutex_unlock(&e->pending_lock);
  pthread_mutex_destroy(&e->pending_lock);
  pthread_cond_destroy(&e->pending_done);
  for (size_t i = 0; e->plan && e->buckets && e->owned &&
                     i < (size_t)e->ranks * 2 * (size_t)cf_plan_colls(e->plan);
       i++)
    if (e->owned[i]) free(e->buckets[i]);
  free(e->buckets);
  free(e->owned);
  free(e->bucket_coll);
  free(e->trace);
  cf_plan_destroy(e->bplan);
  cf_plan_destroy(e->mpi_plan);
  cf_world_destroy(e->mpi, 0);
  cf_plan_destroy(e->plan);
  free(e->io_node[0]);
  free(e->io_node[1]);
  cf_graph_unhold(e->g);
  cf_run_setup_free(&e->setup, 0);
  free(e->job);
  free(e);
}

static bool fresh(const cf_executable *e) { return e->generation == e->g->generation; }

cf_status cf_executable_check(const cf_executable *e) {
  if (!e) return CF_ERR_USAGE;
  if (fresh(e)) return CF_OK;
  return cf_error(e->ctx, CF_ERR_USAGE, NULL, 0,
                  "graph '%s' was changed after this executable was made from it (a node added, "
                  "an attribute set, passes run or the world resized); make the executable again",
                  e->g->name);
}

int cf_executable_ranks(const cf_executable *e) { return e ? e->ranks : 0; }

double cf_executable_last_time_ms(const cf_executable *e) { return e ? e->last_ms : 0; }

static bool io_ok(const cf_executable *e, cf_io io) {
  return e && fresh(e) && (io == CF_IO_INPUT || io == CF_IO_OUTPUT);
}

size_t cf_executable_io_count(const cf_executable *e, cf_io io) {
  return io_ok(e, io) ? (size_t)e->n_io[io] : 0;
}

/* The value input/output k stands for: the Input's own, an Output's operand. */
static const cf_value *io_value(const cf_executable *e, cf_io io, size_t k, const cf_node **node) {
  if (!io_ok(e, io) || k >= (size_t)e->n_io[io]) return NULL;
  const cf_node *n = &e->g->nodes[e->io_node[io][k]];
  if (node) *node = n;
  if (io == CF_IO_INPUT) return &n->out[0];
  return &e->g->nodes[n->in[0].node].out[n->in[0].port];
}

int cf_executable_io_find(const cf_executable *e, cf_io io, const char *name) {
  if (!io_ok(e, io) || !name) return -1;
  for (int k = 0; k < e->n_io[io]; k++)
    if (strcmp(e->g->nodes[e->io_node[io][k]].name, name) == 0) return k;
  return -1;
}

const char *cf_executable_io_name(const cf_executable *e, cf_io io, size_t k) {
  const cf_node *n = NULL;
  return io_value(e, io, k, &n) ? n->name : NULL;
}

const char *cf_executable_io_dtype(const cf_executable *e, cf_io io, size_t k) {
  const cf_value *v = io_value(e, io, k, NULL);
  return v ? cf_dtype_name(v->dtype) : NULL;
}

int cf_executable_io_shape(const cf_executable *e, cf_io io, size_t k, int64_t *dims) {
  const cf_value *v = io_value(e, io, k, NULL);
  if (!v || !dims) return -1;
  for (int i = 0; i < v->shape.rank; i++)
    dims[i] = v->shape.dims[i];
  return v->shape.rank;
}

size_t cf_executable_io_bytes(const cf_executable *e, cf_io io, size_t k) {
  const cf_value *v = io_value(e, io, k, NULL);
  int64_t b = 0;
  return v && cf_value_bytes(v, &b) ? (size_t)b : 0;
}

/* The bucket slot (2 * coll + io) holding input/output k, its offset in
 * *off; -1 when none (or k out of range). */
static int io_slot(const cf_executable *e, cf_io io, size_t k, int64_t *off) {
  const cf_node *n = NULL;
  *off = 0;
  if (!io_value(e, io, k, &n)) return -1;
  int node = io == CF_IO_INPUT ? (int)(n - e->g->nodes) : n->in[0].node;
  return cf_plan_value_bucket(e->plan, node, io == CF_IO_INPUT ? 0 : n->in[0].port, off);
}

/* Bucket slot 2 * coll + io bound on every rank. */
static bool bound_everywhere(const cf_executable *e, int slot) {
  for (int r = 0; r < e->ranks; r++)
    if (!e->buckets[(size_t)r * 2 * (size_t)cf_plan_colls(e->plan) + (size_t)slot]) return false;
  return true;
}

int cf_executable_io_in_place(const cf_executable *e, cf_io io, size_t k) {
  int64_t off;
  if (!io_value(e, io, k, NULL)) return 0;
  if (cf_plan_binds(e->plan, e->io_node[io][k])) return 1;
  int slot = io_slot(e, io, k, &off);
  if (slot < 0 || !bound_everywhere(e, slot)) return 0;
  /* an Output of an Input or Constant, or one an earlier Output has, is
   * still a copy out */
  if (io == CF_IO_OUTPUT) {
    const cf_node *n = &e->g->nodes[e->io_node[io][k]];
    cf_op src = e->g->nodes[n->in[0].node].op;
    if (src == CF_OP_INPUT || src == CF_OP_CONSTANT) return 0;
    for (size_t j = 0; j < k; j++) {
      const cf_node *o = &e->g->nodes[e->io_node[io][j]];
      if (o->in[0].node == n->in[0].node && o->in[0].port == n->in[0].port) return 0;
    }
  }
  return 1;
}

/* ================= buckets ================= */

size_t cf_executable_bucket_count(const cf_executable *e) {
  return e && fresh(e) ? (size_t)e->n_buckets : 0;
}

/* Bucket b's plan collective, -1 when out of range. */
static int bucket_at(const cf_executable *e, size_t b) {
  return e && fresh(e) && b < (size_t)e->n_buckets ? e->bucket_coll[b] : -1;
}

const char *cf_executable_bucket_name(const cf_executable *e, size_t b) {
  int c = bucket_at(e, b);
  return c >= 0 ? e->g->nodes[cf_plan_coll_node(e->plan, c)].name : NULL;
}

size_t cf_executable_bucket_bytes(const cf_executable *e, size_t b, cf_io io) {
  int c = bucket_at(e, b);
  return c >= 0 ? (size_t)cf_plan_bucket_bytes(e->plan, c, (int)io) : 0;
}

int cf_executable_io_bucket(const cf_executable *e, cf_io io, size_t k, size_t *offset) {
  int64_t off;
  int slot = io_slot(e, io, k, &off);
  if (offset) *offset = 0;
  if (slot < 0 || slot % 2 != (int)io) return -1;
  for (int b = 0; b < e->n_buckets; b++)
    if (e->bucket_coll[b] == slot / 2) {
      if (offset) *offset = (size_t)off;
      return b;
    }
  return -1;
}

cf_status cf_executable_bucket_bind(cf_executable *e, int rank, size_t b, cf_io io, void *buffer) {
  cf_status st = cf_executable_check(e);
  if (st) return st;
  int c = bucket_at(e, b);
  if (c < 0 || (io != CF_IO_INPUT && io != CF_IO_OUTPUT) || rank < 0 || rank >= e->ranks)
    return cf_error(e->ctx, CF_ERR_USAGE, NULL, 0,
                    "cf_executable_bucket_bind: no bucket %zu %s on rank %d (the executable has %d "
                    "bucket%s and %d rank%s)",
                    b, io == CF_IO_OUTPUT ? "output" : "input", rank, e->n_buckets,
                    cf_s(e->n_buckets), e->ranks, cf_s(e->ranks));
  const char *name = cf_executable_bucket_name(e, b);
  if (buffer && (uintptr_t)buffer % CF_BUFFER_ALIGN)
    return cf_error(e->ctx, CF_ERR_USAGE, NULL, 0,
                    "bucket '%s' %s on rank %d: the buffer is not aligned to %d bytes", name,
                    io == CF_IO_OUTPUT ? "output" : "input", rank, CF_BUFFER_ALIGN);
  size_t at = (size_t)rank * 2 * (size_t)cf_plan_colls(e->plan) + 2 * (size_t)c + io;
  if (!buffer && e->owned[at]) return CF_OK; /* the executable's own already */
  bool own = !buffer;
  if (own) {
    size_t bytes = (size_t)cf_plan_bucket_bytes(e->plan, c, (int)io);
    buffer = aligned_alloc(CF_BUFFER_ALIGN, bytes ? bytes : CF_BUFFER_ALIGN);
    if (!buffer) {
      char t[32];
      return cf_error(e->ctx, CF_ERR_NO_MEMORY, NULL, 0,
                      "cannot allocate %s for bucket '%s' on rank %d: out of memory",
                      cf_bytes_text((int64_t)bytes, t, sizeof t), name, rank);
    }
    memset(buffer, 0, bytes);
  }
  if (e->owned[at]) free(e->buckets[at]);
  e->owned[at] = own;
  e->buckets[at] = buffer;
  return CF_OK;
}

void *cf_executable_bucket_buffer(const cf_executable *e, int rank, size_t b, cf_io io) {
  if (bucket_at(e, b) < 0 || rank < 0 || rank >= e->ranks ||
      (io != CF_IO_INPUT && io != CF_IO_OUTPUT))
    return NULL;
  return e->buckets[(size_t)rank * 2 * (size_t)cf_plan_colls(e->plan) +
                    2 * (size_t)e->bucket_coll[b] + io];
}

cf_status cf_executable_set_trace(cf_executable *e, const char *path) {
  if (!e) return CF_ERR_USAGE;
  if (path && (!*path || strcmp(path, "-") == 0))
    return cf_error(e->ctx, CF_ERR_USAGE, NULL, 0,
                    "cf_executable_set_trace: the trace goes to a file (FILE.json), not '%s'", path);
  char *c = path ? strdup(path) : NULL;
  if (path && !c) return cf_error(e->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  free(e->trace);
  e->trace = c;
  return CF_OK;
}

size_t cf_executable_last_copies(const cf_executable *e, size_t *bytes) {
  if (bytes) *bytes = e ? (size_t)e->last_copy_bytes : 0;
  return e ? (size_t)e->last_copies : 0;
}

/* The executor's view of the caller's buffers. rank < 0: every rank's,
 * inputs[r * n_in + k]; else that rank's only, inputs[k]. An input given
 * for no rank is made from the seed. */
typedef struct io_buffers {
  cf_inputs in;
  cf_tensor *outs;
} io_buffers;

static void io_free(io_buffers *b) {
  free(b->in.names);
  free(b->in.data);
  free(b->outs);
}

static cf_status tensor_for(cf_executable *e, cf_io io, size_t k, int rank, const void *p,
                            cf_tensor *t) {
  const cf_node *n;
  const cf_value *v = io_value(e, io, k, &n);
  int es = cf_dtype_size(v->dtype);
  if (p && (uintptr_t)p % (uintptr_t)es)
    return cf_error(e->ctx, CF_ERR_USAGE, NULL, 0,
                    "%s '%s' on rank %d: the buffer is not aligned to its %d-byte %s elements",
                    io == CF_IO_INPUT ? "input" : "output", n->name, rank, es,
                    cf_dtype_name(v->dtype));
  *t = (cf_tensor){.data = (void *)p, .dtype = v->dtype, .shape = v->shape};
  cf_shape_elements(&v->shape, &t->count);
  return CF_OK;
}

static cf_status io_make(cf_executable *e, int rank, const void *const *inputs,
                         void *const *outputs, io_buffers *b) {
  int R = e->ranks, ni = e->n_io[CF_IO_INPUT], no = e->n_io[CF_IO_OUTPUT];
  int r0 = rank < 0 ? 0 : rank, r1 = rank < 0 ? R : rank + 1;
  memset(b, 0, sizeof *b);
  b->in = (cf_inputs){.ranks = R, .borrow = true, .buckets = e->buckets};
  b->in.names = calloc((size_t)ni + 1, sizeof *b->in.names);
  b->in.data = calloc((size_t)ni * (size_t)R + 1, sizeof *b->in.data);
  b->outs = calloc((size_t)no * (size_t)R + 1, sizeof *b->outs);
  if (!b->in.names || !b->in.data || !b->outs)
    return cf_error(e->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  b->in.outputs = b->outs;
#define AT(arr, r, k, n)                                                                           \
  ((arr) ? (arr)[rank < 0 ? (size_t)(r) * (size_t)(n) + (size_t)(k) : (size_t)(k)] : NULL)
  /* which inputs the caller gives: for every rank or for none */
  int *given = calloc((size_t)ni + 1, sizeof *given);
  if (!given) return cf_error(e->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  cf_status st = CF_OK;
  for (int k = 0; k < ni && !st; k++) {
    int have = 0, missing = -1;
    for (int r = r0; r < r1; r++) {
      if (AT(inputs, r, k, ni))
        have++;
      else if (missing < 0)
        missing = r;
    }
    if (have && missing >= 0)
      st = cf_error(e->ctx, CF_ERR_USAGE, NULL, 0,
                    "input '%s': no buffer for rank %d (give one for every rank, or none to make "
                    "it from the seed)",
                    cf_executable_io_name(e, CF_IO_INPUT, (size_t)k), missing);
    given[k] = have > 0;
  }
  for (int k = 0; k < ni && !st; k++) {
    if (!given[k]) continue;
    int slot = b->in.n++;
    b->in.names[slot] = cf_executable_io_name(e, CF_IO_INPUT, (size_t)k);
    for (int r = r0; r < r1 && !st; r++)
      st = tensor_for(e, CF_IO_INPUT, (size_t)k, r, AT(inputs, r, k, ni),
                      &b->in.data[(size_t)r * (size_t)ni + (size_t)slot]);
  }
  /* cf_inputs wants data[r * in.n + slot]: close the gaps left by inputs not given */
  for (int r = 1; r < R && !st && b->in.n < ni; r++)
    memmove(&b->in.data[(size_t)r * (size_t)b->in.n], &b->in.data[(size_t)r * (size_t)ni],
            sizeof *b->in.data * (size_t)b->in.n);
  for (int j = 0; j < no && !st; j++)
    for (int r = r0; r < r1 && !st; r++)
      st = tensor_for(e, CF_IO_OUTPUT, (size_t)j, r, AT(outputs, r, j, no),
                      &b->outs[(size_t)r * (size_t)no + (size_t)j]);
#undef AT
  free(given);
  return st;
}

static void record(cf_executable *e, const cf_run_result *res) {
  e->last_ms = res->time_ms_median;
  e->last_copies = res->copies;
  e->last_copy_bytes = res->copy_bytes;
}

/* The plan a threads run uses: while every bucket is bound on every rank,
 * the plan's twin without room for them (made once), which saves each run
 * allocating and clearing the buckets' share of every rank's arena. */
static cf_status run_plan(cf_executable *e, cf_plan **out) {
  *out = e->plan;
  if (!e->n_buckets) return CF_OK;
  for (int b = 0; b < e->n_buckets; b++)
    if (!bound_everywhere(e, 2 * e->bucket_coll[b]) ||
        !bound_everywhere(e, 2 * e->bucket_coll[b] + 1))
      return CF_OK;
  if (!e->bplan) {
    cf_run_options ro = e->ro;
    ro.external_buckets = true;
    cf_status st = cf_plan_build(e->ctx, e->g, &ro, &e->bplan);
    if (st) return st;
  }
  *out = e->bplan;
  return CF_OK;
}

/* The "trace" option (cf_executable_set_trace): a trace on e's context for
 * the run to come, *t NULL when none is asked for. */
static cf_status trace_begin(cf_executable *e, cf_trace **t) {
  *t = NULL;
  if (e->trace && cf_trace_create(e->ranks, CF_TRACE_EVENTS, t))
    return cf_error(e->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  e->ctx->trace = *t;
  return CF_OK;
}

/* ... written after the run, which returned st, failed or not (rank >= 0:
 * one process's rank, to FILE.rank<R>.json); returns st, else the write's
 * status. */
static cf_status trace_end(cf_executable *e, cf_trace *t, int rank, cf_status st) {
  e->ctx->trace = NULL;
  if (!t) return st;
  char *why = st ? cf_error_take(e->ctx) : NULL;
  if (st) cf_trace_fail(t, why);
  char path[4096];
  size_t n = strlen(e->trace);
  bool json = n > 5 && strcmp(e->trace + n - 5, ".json") == 0;
  if (rank >= 0)
    snprintf(path, sizeof path, "%.*s.rank%d.json", (int)(json ? n - 5 : n), e->trace, rank);
  cf_status ws = cf_trace_write(e->ctx, t, rank >= 0 ? path : e->trace);
  if (st) cf_error_put(e->ctx, why); /* the run's failure is the one to report */
  cf_trace_destroy(t);
  return st ? st : ws;
}

cf_status cf_executable_run(cf_executable *e, const void *const *inputs, void *const *outputs) {
  if (!e) return CF_ERR_USAGE;
  io_buffers b = {0};
  cf_run_result res = {0};
  cf_plan *plan = NULL;
  cf_status st = cf_executable_check(e);
  if (!st) st = check_memory(
      e, e->ranks, "use fewer ranks, or one rank per process with cf_executable_run_rank");
  if (!st) st = run_plan(e, &plan);
  if (!st) st = io_make(e, -1, inputs, outputs, &b);
  cf_trace *t = NULL;
  if (!st) st = trace_begin(e, &t);
  if (!st) st = cf_exec_run(e->ctx, plan, &b.in, &res);
  st = trace_end(e, t, -1, st);
  if (!st) record(e, &res);
  cf_run_result_free(&res);
  io_free(&b);
  return st;
}

/* The first cf_executable_run_rank: join MPI's world (initializing MPI
 * unless the application did) or the shm world (backend shm: the job the
 * option job names, else the launcher's), check that it is this
 * executable's, and plan for its transport (MPI's stages what it receives). */
static cf_status mpi_setup(cf_executable *e, int rank) {
  /* the same set-up, now on the job's world (the profile read at creation) */
  cf_run_setup ms = e->setup;
  ms.mpi = !e->shm;
  ms.shm = e->shm;
  ms.shm_job = e->job;
  ms.shm_rank = rank;
  ms.shm_size = e->ranks;
  cf_run_options ro = e->ro;
  ro.keep_rank = true; /* this process's rank runs again and again: kept from call to call */
  cf_status st = cf_run_prepare(e->ctx, &ms, &ro);
  e->mpi = ms.world;
  if (st) return st;
  const cf_world *w = e->mpi;
  if (w->size != e->ranks)
    return cf_error(e->ctx, CF_ERR_USAGE, NULL, 0,
                    "cf_executable_run_rank: the executable has %d rank%s, but this %s job has %d "
                    "process%s (start %d)",
                    e->ranks, cf_s(e->ranks), e->shm ? "shm" : "MPI", w->size,
                    w->size == 1 ? "" : "es", e->ranks);
  /* first, on the channels a kept executable's runs use: a peer running
   * one meanwhile fails here, not at the timeout (cf_exec_meet) */
  if ((st = cf_exec_meet(e->ctx, e->mpi, e->g))) {
    e->mpi_failed = true; /* as a run's failure: the job's ranks have stopped */
    return st;
  }
  /* every rank must have read the same profile (its rules for the
   * transport): checked while every rank is still here, before the
   * one-sided checks */
  double h = (double)cf_profile_hash(e->setup.prof, cf_run_transport(&ms)), v[2] = {h, -h};
  /* a world another executable joined first reports to that one's context
   * otherwise (a rank that dies meanwhile is named here) */
  cf_comm *c = cf_world_comm(e->mpi, e->mpi->first);
  cf_context *was = c ? c->ctx : NULL;
  if (c) c->ctx = e->ctx;
  st = cf_world_max(e->mpi, v, 2);
  if (c) c->ctx = was;
  if (st) return st;
  if (v[0] != -v[1])
    return cf_error(e->ctx, CF_ERR_INVALID, NULL, 0,
                    "profile: the ranks read different profiles (every process must see the "
                    "same file, or set the option profile to none)");
  if (w->first != rank)
    return cf_error(e->ctx, CF_ERR_USAGE, NULL, 0,
                    "cf_executable_run_rank: rank %d asked for, but this process is rank %d of "
                    "the %s job",
                    rank, w->first, e->shm ? "shm" : "MPI");
  if ((st = cf_plan_build(e->ctx, e->g, &ro, &e->mpi_plan))) return st;
  if (c) c->ctx = e->ctx; /* MPI's native groups report there too (one world per process) */
  st = cf_exec_prepare(e->ctx, e->mpi, e->mpi_plan);
  if (c) c->ctx = was;
  return st;
}

cf_status cf_executable_check_rank(const cf_executable *e, int rank) {
  cf_status st = cf_executable_check(e);
  if (st) return st;
  if (rank < 0 || rank >= e->ranks)
    return cf_error(e->ctx, CF_ERR_USAGE, NULL, 0,
                    "rank %d is not a rank of this %d-rank executable", rank, e->ranks);
  return CF_OK;
}

cf_status cf_executable_run_rank(cf_executable *e, int rank, const void *const *inputs,
                                 void *const *outputs) {
  cf_status st = cf_executable_check_rank(e, rank);
  if (st) return st;
  if (e->mpi_failed)
    return cf_error(e->ctx, CF_ERR_RUNTIME, NULL, 0,
                    "cf_executable_run_rank: an earlier run of this executable failed and stopped "
                    "the job's ranks; destroy it");
  if (!e->mpi_plan) {
    /* a failed setup is not retried: MPI may be half way */
    if (e->mpi) return cf_error(e->ctx, CF_ERR_USAGE, NULL, 0, "cf_executable_run_rank: %s",
                                "this executable could not join the job (its first error)");
    if ((st = mpi_setup(e, rank))) return st;
  }
  if (e->mpi->first != rank)
    return cf_error(e->ctx, CF_ERR_USAGE, NULL, 0,
                    "cf_executable_run_rank: rank %d asked for, but this process is rank %d", rank,
                    e->mpi->first);
  io_buffers b;
  cf_run_result res = {0};
  st = io_make(e, rank, inputs, outputs, &b);
  cf_trace *t = NULL;
  if (!st) st = trace_begin(e, &t);
  if (!st) {
    st = cf_exec_run_world(e->ctx, e->mpi_plan, e->mpi, &b.in, &res);
    if (st) e->mpi_failed = true;
  }
  st = trace_end(e, t, rank, st);
  if (!st) record(e, &res);
  cf_run_result_free(&res);
  io_free(&b);
  return st;
}

cf_context *cf_executable_ctx(const cf_executable *e) { return e->ctx; }

void cf_executable_pending(cf_executable *e, int d) {
  pthread_mutex_lock(&e->pending_lock);
  e->pending += d;
  if (!e->pending) pthread_cond_broadcast(&e->pending_done);
  pthread_mutex_unlock(&e->pending_lock);
}
