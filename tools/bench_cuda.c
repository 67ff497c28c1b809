/* bench_cuda.c - `collfuse bench reduce --device cuda` and `collfuse bench
 * allreduce --device cuda`: the CUDA backend's kernels and AllReduce on a
 * GPU, against the GPU's own device-to-device copy rate measured in the
 * same run (bench/README.md: a peer side by side; docs/executor.md, CUDA).
 *
 * reduce: for every dtype, sum and max, 2 and 8 sources (256 MiB per
 * buffer by default), the n-ary kernel (dst = op(src0..srcK-1), one pass,
 * (K+1)*bytes moved) and the accumulate kernel (K-1 in-place calls,
 * 3*(K-1)*bytes), timed with device events around back-to-back launches
 * (cf_device_time), median of --samples samples; copy = one cuMemcpyDtoD
 * of a buffer, 2*bytes. Sources hold random values of the dtype: a 4 MiB
 * random block, repeated by device copies; every kernel's result on that
 * block is checked against the CPU backend's kernel on the same data (bit
 * for bit, NaN = NaN) before anything is timed. torch.sum is not called
 * from C: bench/gpu-check.sh times it in the same job.
 *
 * allreduce: N rank threads on the threads transport, each with its own
 * stream (the device's view for its rank) and buffers on the GPU(s),
 * float32 sum out of place, every algorithm, measured by the CPU run's own
 * loop (bench_ar_loop.c) on the CUDA device: a loop is K back-to-back
 * calls between two barriers, timed on rank 0 (every call has finished on
 * the GPU when it returns: the backend waits for its streams), the columns
 * round-robin, the cell is the median loop / K. algbw = bytes / time, busbw
 * = algbw * 2(n-1)/n as nccl-tests define them, and busbw against the copy
 * rate, measured once here. The result of each algorithm is checked against
 * a float64 sum (a sample of elements).
 *
 * Without a CUDA driver both fail at once: "no CUDA driver (...)", exit 1
 * (cf_tool_fail of CF_ERR_UNSUPPORTED).
 */
#include "tools.h"

#include "../executor/executor.h"
#include "../executor/transports/transports.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_SIZES = 32, MAX_SAMPLES = 100 };
#define BLOCK_BYTES ((int64_t)4 << 20) /* the random block sources repeat */

static int usage(const char *what, const char *fmt, const char *arg) {
  char cmd[32];
  snprintf(cmd, sizeof cmd, "bench %s", what);
  return cf_tool_usage(cmd, fmt, arg);
}

/* An option of the CPU run given with --device cuda. */
static int cpu_only(const char *what, const char *opt) {
  return usage(what, "%s is not taken with --device cuda", opt);
}

static void print_gpu(cf_device *dev, cJSON *root) {
  char name[128] = "?";
  int major = 0, minor = 0;
  const char *sm = "?";
  cf_device_cuda_info(dev, name, sizeof name, &major, &minor, &sm);
  if (root) {
    cJSON_AddStringToObject(root, "gpu", name);
    char cc[16];
    snprintf(cc, sizeof cc, "%d.%d", major, minor);
    cJSON_AddStringToObject(root, "compute_capability", cc);
    cJSON_AddStringToObject(root, "ptx_target", sm);
  } else {
    printf("  GPU: %s, compute capability %d.%d, kernels: PTX for %s from codegen/\n", name, major, minor, sm);
  }
}

/* ---- the copy peer ---- */

typedef struct copy_job {
  cf_device *d;
  void *dst;
  const void *src;
  size_t bytes;
} copy_job;

static void run_copy(void *arg) {
  copy_job *j = arg;
  j->d->ops->copy(j->d, j->dst, j->src, j->bytes);
}

/* GB/s of a device-to-device copy of bytes (read + written), median of
 * samples; 0 on failure (ctx says why). */
static double copy_rate(cf_device *dev, void *dst, const void *src, size_t bytes, int samples, int reps) {
  copy_job j = {.d = dev, .dst = dst, .src = src, .bytes = bytes};
  double t[MAX_SAMPLES], ms;
  run_copy(&j);
  for (int s = 0; s < samples; s++) {
    if (cf_device_time(dev, run_copy, &j, reps, &ms)) return 0;
    t[s] = ms;
  }
  double m = cf_bench_median(t, samples);
  return m > 0 ? 2.0 * (double)bytes / (m * 1e6) : 0;
}

/* ================= bench reduce --device cuda ================= */

static const cf_dtype red_dtypes[] = {CF_DT_FLOAT32, CF_DT_FLOAT16, CF_DT_BFLOAT16, CF_DT_FLOAT64, CF_DT_INT8,
                                      CF_DT_UINT8,   CF_DT_INT16,   CF_DT_INT32,    CF_DT_INT64};
static const cf_reduction red_ops[] = {CF_RED_SUM, CF_RED_MAX};
static const int red_sources[] = {2, 8};

typedef struct red_job {
  cf_device *d;
  cf_kernel_key nary, acc;
  void *dst;
  const void *src[CF_MAX_ARITY];
  int k;
  int64_t n;
} red_job;

static void run_nary(void *arg) {
  red_job *j = arg;
  j->d->ops->nary(j->d, &j->nary, j->dst, j->src, j->n, j->k);
}

static void run_acc(void *arg) {
  red_job *j = arg;
  for (int s = 1; s < j->k; s++) j->d->ops->acc(j->d, &j->acc, j->dst, j->src[s], j->n);
}

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Random nonzero values of dt: floats +-[1, 2) (no NaN, no subnormal),
 * integers over their whole range (sums wrap, as the kernels promise). */
static void fill_block(void *p, cf_dtype dt, int64_t n, uint64_t seed) {
  uint64_t s = seed;
  int es = cf_dtype_size(dt);
  bool fl = dt == CF_DT_FLOAT16 || dt == CF_DT_BFLOAT16 || dt == CF_DT_FLOAT32 || dt == CF_DT_FLOAT64;
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = splitmix(&s);
    if (fl)
      cf_store_f64(p, dt, i, ((r >> 63) ? -1.0 : 1.0) * (1.0 + (double)(r & 0xfffff) / 1048576.0));
    else
      memcpy((char *)p + (size_t)i * (size_t)es, &r, (size_t)es);
  }
}

typedef struct red_row {
  cf_dtype dt;
  cf_reduction op;
  int k;
  int64_t bytes;
  double nary, acc, copy; /* GB/s */
  char error[256];
} red_row;

typedef struct red_bufs {
  void *src[CF_MAX_ARITY], *dst;
  void *hsrc[CF_MAX_ARITY], *hdst, *hwant;
  int64_t bytes;
} red_bufs;

/* Fill the device sources with dt's random block, repeated. */
static cf_status fill_sources(cf_context *ctx, cf_device *dev, red_bufs *b, cf_dtype dt) {
  int64_t blk = b->bytes < BLOCK_BYTES ? b->bytes : BLOCK_BYTES;
  int es = cf_dtype_size(dt);
  for (int j = 0; j < CF_MAX_ARITY; j++) {
    fill_block(b->hsrc[j], dt, blk / es, 0xbe5c0000u + (uint64_t)dt * 16 + (uint64_t)j);
    cf_status st = cf_device_upload(dev, b->src[j], b->hsrc[j], (size_t)blk);
    if (st) return st;
    for (int64_t off = blk; off < b->bytes; off += blk) {
      int64_t len = b->bytes - off < blk ? b->bytes - off : blk;
      dev->ops->copy(dev, (char *)b->src[j] + off, b->src[j], (size_t)len);
    }
  }
  return cf_device_error(dev, ctx);
}

/* The first block of dst against the CPU backend's kernel (nary: fresh;
 * acc: dst started as src0). */
static bool check_block(cf_device *dev, cf_device *cpu, red_bufs *b, const cf_kernel_key *k, int K, bool acc,
                        char *why, size_t len) {
  int es = cf_dtype_size(k->dtype);
  int64_t blk = (b->bytes < BLOCK_BYTES ? b->bytes : BLOCK_BYTES) / es;
  if (acc) {
    memcpy(b->hwant, b->hsrc[0], (size_t)(blk * es));
    for (int s = 1; s < K; s++) cpu->ops->acc(cpu, k, b->hwant, b->hsrc[s], blk);
  } else {
    cpu->ops->nary(cpu, k, b->hwant, (const void *const *)b->hsrc, blk, K);
  }
  if (cf_device_download(dev, b->hdst, b->dst, (size_t)(blk * es))) {
    snprintf(why, len, "%s", cf_context_errmsg(dev->ctx));
    return false;
  }
  for (int64_t i = 0; i < blk; i++)
    if (memcmp((char *)b->hdst + i * es, (char *)b->hwant + i * es, (size_t)es) != 0) {
      char name[96];
      snprintf(why, len, "%s differs from the CPU backend at element %lld: %.9g, expected %.9g",
               cf_kernel_name(k, name, sizeof name), (long long)i, cf_load_f64(b->hdst, k->dtype, i),
               cf_load_f64(b->hwant, k->dtype, i));
      return false;
    }
  return true;
}

static double time_gbps(cf_device *dev, void (*fn)(void *), red_job *j, int samples, int reps, double bytes) {
  double t[MAX_SAMPLES], ms;
  fn(j); /* warm up */
  for (int s = 0; s < samples; s++) {
    if (cf_device_time(dev, fn, j, reps, &ms)) return 0;
    t[s] = ms;
  }
  double m = cf_bench_median(t, samples);
  return m > 0 ? bytes / (m * 1e6) : 0;
}

static cJSON *red_row_json(const red_row *r) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "dtype", cf_dtype_name(r->dt));
  cJSON_AddStringToObject(o, "op", cf_reduction_name(r->op));
  cJSON_AddNumberToObject(o, "sources", r->k);
  cJSON_AddNumberToObject(o, "bytes", (double)r->bytes);
  cJSON *g = cJSON_AddObjectToObject(o, "gbps");
  cJSON_AddNumberToObject(g, "collfuse_nary", r->nary);
  cJSON_AddNumberToObject(g, "collfuse_acc", r->acc);
  cJSON_AddNumberToObject(g, "copy", r->copy);
  cJSON *q = cJSON_AddObjectToObject(o, "ratio");
  cJSON_AddNumberToObject(q, "nary_vs_copy", r->copy > 0 ? r->nary / r->copy : 0);
  cJSON_AddNumberToObject(q, "acc_vs_copy", r->copy > 0 ? r->acc / r->copy : 0);
  if (r->error[0])
    cJSON_AddStringToObject(o, "error", r->error);
  else
    cJSON_AddNullToObject(o, "error");
  return o;
}

int cf_bench_reduce_cuda(cf_context *ctx, const cf_red_args *a) {
  int64_t sizes[MAX_SIZES] = {(int64_t)256 << 20};
  int n_sizes = 1, samples = 7, reps = 10;
  bool json = a->json;
  if (a->quick) sizes[0] = (int64_t)1 << 20, n_sizes = 1, samples = 3, reps = 3;
  if (a->dtypes || a->ops || a->sources || a->min_ms || a->max_memory)
    return cpu_only("reduce", a->dtypes    ? "--dtypes"
                              : a->ops     ? "--ops"
                              : a->sources ? "--sources"
                              : a->min_ms  ? "--min-ms"
                                           : "--max-memory");
  if (a->sizes && !cf_bench_parse_sizes(a->sizes, (int64_t)4 << 30, sizes, MAX_SIZES, &n_sizes))
    return usage("reduce",
                 "--sizes takes up to 32 byte counts such as 64M,256M (multiples of 4, at most "
                 "4G), got '%s'",
                 a->sizes);
  char got[16];
  snprintf(got, sizeof got, "%d", a->reps);
  if (a->reps > 100000)
    return usage("reduce", "--reps takes 1..100000 with --device cuda, got '%s'", got);
  if (a->samples) samples = a->samples;
  if (a->reps) reps = a->reps;
  cf_device *dev = NULL, *cpu = NULL;
  cf_status st = cf_device_cuda_create(ctx, 0, &dev);
  if (st) return cf_tool_fail(ctx, st);
  if ((st = cf_device_cpu_create(ctx, &cpu))) {
    dev->ops->destroy(dev);
    return cf_tool_fail(ctx, st);
  }
  int64_t max_bytes = 0;
  for (int s = 0; s < n_sizes; s++) max_bytes = sizes[s] > max_bytes ? sizes[s] : max_bytes;
  red_bufs b = {0};
  int64_t blk = max_bytes < BLOCK_BYTES ? max_bytes : BLOCK_BYTES;
  for (int j = 0; j < CF_MAX_ARITY && !st; j++) {
    b.src[j] = dev->ops->alloc(dev, (size_t)max_bytes);
    b.hsrc[j] = malloc((size_t)blk);
    if (!b.src[j] || !b.hsrc[j]) st = cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "bench reduce: out of memory for %lld-byte buffers", (long long)max_bytes);
  }
  if (!st) {
    b.dst = dev->ops->alloc(dev, (size_t)max_bytes);
    b.hdst = malloc((size_t)blk);
    b.hwant = malloc((size_t)blk);
    if (!b.dst || !b.hdst || !b.hwant) st = cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "bench reduce: out of memory");
  }
  cJSON *root = cJSON_CreateObject(), *rows = NULL;
  cJSON_AddStringToObject(root, "bench", "reduce");
  cJSON_AddStringToObject(root, "device", "cuda");
  cJSON_AddStringToObject(root, "unit", "GB/s (1e9 bytes read + written per second)");
  cJSON_AddNumberToObject(root, "samples", samples);
  cJSON_AddNumberToObject(root, "reps", reps);
  print_gpu(dev, root);
  cJSON *bc = cJSON_AddObjectToObject(root, "bytes_counted");
  cJSON_AddStringToObject(bc, "collfuse_nary", "(K+1)*bytes per call");
  cJSON_AddStringToObject(bc, "collfuse_acc", "3*(K-1)*bytes per K-1 calls");
  cJSON_AddStringToObject(bc, "copy", "2*bytes per cuMemcpyDtoD");
  rows = cJSON_AddArrayToObject(root, "results");
  if (!json && !st) {
    printf("collfuse bench reduce --device cuda: GB/s = 1e9 bytes read + written per second, "
           "median of %d sample%s of %d "
           "back-to-back launch%s (device events)\n",
           samples, cf_s(samples), reps, reps == 1 ? "" : "es");
    print_gpu(dev, NULL);
    printf("  n-ary (K+1)*bytes/call; acc 3*(K-1)*bytes per K-1 in-place calls; copy: cuMemcpyDtoD, 2*bytes, same "
           "run\n");
    printf("%8s %-9s %-4s %2s | %9s %9s %9s | %7s %7s\n", "size", "dtype", "op", "K", "n-ary", "acc", "copy",
           "nary/cp", "acc/cp");
  }
  bool failed_row = false;
  for (int s = 0; s < n_sizes && !st; s++) {
    b.bytes = sizes[s];
    double copy = copy_rate(dev, b.dst, b.src[0], (size_t)b.bytes, samples, reps);
    if (copy <= 0 && !(st = cf_device_error(dev, ctx)))
      st = cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "bench reduce: cannot measure the copy rate");
    for (size_t d = 0; d < sizeof red_dtypes / sizeof *red_dtypes && !st; d++) {
      cf_dtype dt = red_dtypes[d];
      int es = cf_dtype_size(dt);
      if ((st = fill_sources(ctx, dev, &b, dt))) break;
      for (size_t o = 0; o < 2 && !st; o++)
        for (size_t kk = 0; kk < 2 && !st; kk++) {
          red_row r = {.dt = dt, .op = red_ops[o], .k = red_sources[kk], .bytes = b.bytes, .copy = copy};
          red_job j = {.d = dev, .k = r.k, .n = b.bytes / es, .dst = b.dst};
          j.nary = (cf_kernel_key){.kind = CF_K_NARY, .dtype = dt, .red = r.op, .arity = r.k};
          j.acc = (cf_kernel_key){.kind = CF_K_ACC, .dtype = dt, .red = r.op};
          for (int q = 0; q < r.k; q++) j.src[q] = b.src[q];
          if ((st = dev->ops->prepare(dev, &j.nary)) || (st = dev->ops->prepare(dev, &j.acc)) ||
              (st = cpu->ops->prepare(cpu, &j.nary)) || (st = cpu->ops->prepare(cpu, &j.acc)))
            break;
          double kb = (double)b.bytes;
          run_nary(&j);
          if (check_block(dev, cpu, &b, &j.nary, r.k, false, r.error, sizeof r.error)) {
            r.nary = time_gbps(dev, run_nary, &j, samples, reps, (r.k + 1) * kb);
            dev->ops->copy(dev, b.dst, b.src[0], (size_t)b.bytes);
            run_acc(&j);
            if (check_block(dev, cpu, &b, &j.acc, r.k, true, r.error, sizeof r.error))
              r.acc = time_gbps(dev, run_acc, &j, samples, reps, 3.0 * (r.k - 1) * kb);
          }
          if ((st = cf_device_error(dev, ctx))) break;
          if (r.error[0]) {
            failed_row = true;
            fprintf(stderr, "collfuse bench reduce --device cuda: %s %s K=%d: %s\n", cf_dtype_name(dt),
                    cf_reduction_name(r.op), r.k, r.error);
          }
          if (!json) {
            char sz[24];
            cf_bench_size_text(r.bytes, sz, sizeof sz);
            printf("%8s %-9s %-4s %2d | %9.1f %9.1f %9.1f | %7.3f %7.3f\n", sz, cf_dtype_name(dt),
                   cf_reduction_name(r.op), r.k, r.nary, r.acc, r.copy, copy > 0 ? r.nary / copy : 0,
                   copy > 0 ? r.acc / copy : 0);
            fflush(stdout);
          }
          cJSON_AddItemToArray(rows, red_row_json(&r));
        }
    }
  }
  for (int j = 0; j < CF_MAX_ARITY; j++) {
    if (b.src[j]) dev->ops->free(dev, b.src[j]);
    free(b.hsrc[j]);
  }
  if (b.dst) dev->ops->free(dev, b.dst);
  free(b.hdst);
  free(b.hwant);
  int rc = 0;
  if (st) {
    rc = cf_tool_fail(ctx, st);
  } else if (json) {
    char *text = cJSON_PrintUnformatted(root);
    if (text) puts(text);
    free(text);
  }
  cJSON_Delete(root);
  cpu->ops->destroy(cpu);
  dev->ops->destroy(dev);
  return rc ? rc : failed_row ? EXIT_RUNTIME : 0;
}

/* ================= bench allreduce --device cuda ================= */

enum { AR_COLS = CF_BENCH_MAX_COLS };

typedef struct ar_row {
  int64_t bytes;
  int iters;
  int run[AR_COLS];
  double us[AR_COLS];
} ar_row;

/* One size on the measuring loop (bench_ar_loop.c, no bound: the copy
 * peer is measured once); false with the loop's error. */
static bool ar_measure(cf_bench_ar *h, const cf_algo_req *cols, int n_cols, int only, int ranks,
                       int loops, ar_row *row) {
  cf_coll_desc desc = cf_bench_ar_desc(row->bytes / 4);
  cf_bench_ar_size s = {.bytes = row->bytes, .iters = row->iters, .loops = loops};
  int slot[AR_COLS];
  s.n_algos = cf_bench_ar_slots(cols, n_cols, only, &desc, ranks, NULL, row->run, slot, s.algos, 0);
  if (!cf_bench_ar_measure(h, &s)) return false;
  for (int k = 0; k < n_cols; k++)
    row->us[k] = slot[k] < 0 ? 0 : s.us[slot[k]];
  return true;
}

int cf_bench_allreduce_cuda(cf_context *ctx, const cf_ar_args *a) {
  static const int64_t defaults[] = {8,         64,        512,       4 << 10,   32 << 10,  256 << 10,
                                     1 << 20,   4 << 20,   16 << 20,  64 << 20,  256 << 20, (int64_t)1 << 30};
  int64_t sizes[MAX_SIZES];
  int n_sizes = (int)(sizeof defaults / sizeof *defaults), ranks = 8, loops = 10, iters = 0, only = -1;
  memcpy(sizes, defaults, sizeof defaults);
  bool json = a->json;
  if (a->quick) sizes[0] = 4096, sizes[1] = 1 << 20, n_sizes = 2, loops = 3;
  if (a->no_mpi || a->mpi_args || a->backend || a->max_memory)
    return cpu_only("allreduce", a->no_mpi     ? "--no-mpi"
                                 : a->mpi_args ? "--mpi-args"
                                 : a->backend  ? "--backend"
                                               : "--max-memory");
  if (a->ranks) ranks = a->ranks;
  if (a->sizes && !cf_bench_parse_sizes(a->sizes, (int64_t)4 << 30, sizes, MAX_SIZES, &n_sizes))
    return usage("allreduce",
                 "--sizes takes up to 32 byte counts such as 8,64K,256M (multiples of 4, at most "
                 "4G), got '%s'",
                 a->sizes);
  if (a->loops) loops = a->loops;
  char got[16];
  snprintf(got, sizeof got, "%d", a->iters);
  if (a->iters > 100000)
    return usage("allreduce", "--iters takes 1..100000 with --device cuda, got '%s'", got);
  if (a->iters) iters = a->iters;
  only = cf_bench_ar_only(a->algo);
  cf_algo_req cols[AR_COLS];
  int n_cols = cf_bench_ar_columns(cols, AR_COLS);
  cf_device *dev = NULL;
  cf_world *w = NULL;
  cf_bench_ar *h = NULL;
  cf_status st = cf_device_cuda_create(ctx, -1, &dev);
  if (st) return cf_tool_fail(ctx, st);
  int64_t max_bytes = 0;
  for (int s = 0; s < n_sizes; s++) max_bytes = sizes[s] > max_bytes ? sizes[s] : max_bytes;
  /* the copy peer: one buffer pair of the largest size (at most 1 GiB) on GPU 0 */
  int64_t cbytes = max_bytes < ((int64_t)256 << 20) ? (int64_t)256 << 20 : max_bytes;
  void *ca = dev->ops->alloc(dev, (size_t)cbytes), *cb = dev->ops->alloc(dev, (size_t)cbytes);
  double copy = ca && cb ? copy_rate(dev, cb, ca, (size_t)cbytes, 7, 10) : 0;
  if (ca) dev->ops->free(dev, ca);
  if (cb) dev->ops->free(dev, cb);
  if (copy <= 0) {
    st = cf_device_error(dev, ctx);
    if (!st) st = cf_error(ctx, CF_ERR_RUNTIME, NULL, 0, "bench allreduce: cannot measure the copy rate (GPU memory?)");
  }
  if (!st) st = cf_world_create(ctx, &cf_world_threads, ranks, 60, &w);
  if (!st) st = cf_bench_ar_open(ctx, w, dev, &h);
  int rc = 0;
  if (st) {
    rc = cf_tool_fail(ctx, st);
    goto done;
  }
  double f = ranks > 1 ? 2.0 * (ranks - 1) / ranks : 1;
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "bench", "allreduce");
  cJSON_AddStringToObject(root, "device", "cuda");
  cJSON_AddStringToObject(root, "transport", "threads");
  cJSON_AddNumberToObject(root, "ranks", ranks);
  cJSON_AddStringToObject(root, "dtype", "float32");
  cJSON_AddStringToObject(root, "reduction", "sum");
  cJSON_AddNumberToObject(root, "loops", loops);
  cJSON_AddNumberToObject(root, "busbw_factor", f);
  cJSON_AddNumberToObject(root, "copy_gbps", copy);
  print_gpu(dev, root);
  cJSON *results = cJSON_AddArrayToObject(root, "results");
  if (!json) {
    printf("collfuse bench allreduce --device cuda: %d rank%s (threads transport, a stream each), "
           "float32 sum, out of place\n",
           ranks, cf_s(ranks));
    print_gpu(dev, NULL);
    printf("  us: median over %d loop%s of K back-to-back calls; algbw = bytes/time, busbw = algbw "
           "* %.2f (GB/s);\n"
           "  copy: cuMemcpyDtoD on one GPU, %.1f GB/s (bytes read + written), busbw/copy against "
           "it\n",
           loops, cf_s(loops), f, copy);
    printf("%6s %5s | %6s %10s %8s %8s %7s |", "size", "K", "auto", "us", "algbw", "busbw",
           "bb/copy");
    for (int q = 1; q < n_cols; q++)
      printf(" %10s", cf_algo_req_name(cols[q]));
    printf("\n");
  }
  for (int s = 0; s < n_sizes; s++) {
    int64_t k = ((int64_t)256 << 20) / sizes[s];
    ar_row row = {.bytes = sizes[s], .iters = iters ? iters : (int)(k < 1 ? 1 : k > 200 ? 200 : k)};
    if (!ar_measure(h, cols, n_cols, only, ranks, loops, &row)) {
      fprintf(stderr, "collfuse bench allreduce --device cuda: %lld bytes: %s\n",
              (long long)sizes[s], cf_bench_ar_error(h));
      rc = EXIT_RUNTIME;
      break;
    }
    double ab = cf_bench_gbps(row.bytes, row.us[0]);
    if (!json) {
      char sz[24], c[AR_COLS][24];
      cf_bench_size_text(row.bytes, sz, sizeof sz);
      for (int q = 1; q < n_cols; q++) {
        if (row.us[q] > 0)
          snprintf(c[q], sizeof c[q], row.run[q] != cols[q].algo ? "%.1f*" : "%.1f", row.us[q]);
        else
          snprintf(c[q], sizeof c[q], "-");
      }
      printf("%6s %5d | %6s %10.1f %8.2f %8.2f %7.3f |", sz, row.iters, cf_algo_name(row.run[0]),
             row.us[0], ab, ab * f, copy > 0 ? ab * f / copy : 0);
      for (int q = 1; q < n_cols; q++)
        printf(" %10s", c[q]);
      printf("\n");
      fflush(stdout);
    }
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "bytes", (double)row.bytes);
    cJSON_AddNumberToObject(j, "iters", row.iters);
    cJSON_AddStringToObject(j, "auto_algo", cf_algo_name(row.run[0]));
    cJSON *cj = cJSON_AddObjectToObject(j, "collfuse");
    for (int q = 0; q < n_cols; q++) {
      if (row.us[q] <= 0) {
        cJSON_AddNullToObject(cj, cf_algo_req_name(cols[q]));
        continue;
      }
      cJSON *t = cJSON_AddObjectToObject(cj, cf_algo_req_name(cols[q]));
      cJSON_AddNumberToObject(t, "us", row.us[q]);
      cJSON_AddNumberToObject(t, "algbw_gbps", cf_bench_gbps(row.bytes, row.us[q]));
      cJSON_AddNumberToObject(t, "busbw_gbps", cf_bench_gbps(row.bytes, row.us[q]) * f);
      cJSON_AddNumberToObject(t, "busbw_vs_copy", copy > 0 ? cf_bench_gbps(row.bytes, row.us[q]) * f / copy : 0);
      cJSON_AddStringToObject(t, "algo_run", cf_algo_name(row.run[q]));
    }
    cJSON_AddItemToArray(results, j);
  }
  if (!rc && json) {
    char *text = cJSON_PrintUnformatted(root);
    if (text) puts(text);
    free(text);
  }
  cJSON_Delete(root);
done:
  cf_bench_ar_close(h);
  cf_world_destroy(w, 0);
  if (dev) dev->ops->destroy(dev);
  return rc;
}
