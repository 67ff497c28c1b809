/* backends/cpu.c - the CPU device backend: host memory and the host kernels
 * codegen/ generates.
 *
 * prepare() resolves a kernel through the context's JIT (which is not meant
 * to be called from many threads at once) into this device's own table, so
 * the launches the ranks make concurrently afterwards only read a function
 * pointer. It is the reference every other backend is tested against.
 */
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */
#include "backends.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif

/* Linux's, where the C library's headers predate it (an advice the kernel
 * does not know fails with EINVAL, harmlessly) */
#ifdef MADV_POPULATE_WRITE
#define CPU_POPULATE_WRITE MADV_POPULATE_WRITE
#else
#define CPU_POPULATE_WRITE 23
#endif

typedef struct cpu_dev {
  /* resolved kernels: [kind][dtype][reduction][arity], and the n-ary ones
   * with destinations [stream][dtype][reduction][arity][outs] */
  void *fns[4][CF_DT_COUNT][CF_RED_COUNT][CF_MAX_ARITY + 1];
  void *outs[2][CF_DT_COUNT][CF_RED_COUNT][CF_MAX_ARITY + 1][CF_MAX_ARITY + 1];
} cpu_dev;

static void **slot(cpu_dev *c, const cf_kernel_key *k) {
  bool per_red = k->kind == CF_K_NARY || k->kind == CF_K_ACC;
  bool nary = k->kind == CF_K_NARY;
  if (nary && k->outs) return &c->outs[k->stream][k->dtype][k->red][k->arity][k->outs];
  return &c->fns[k->kind][k->dtype][per_red ? k->red : 0][nary ? k->arity : 0];
}

/* A buffer of CPU_HUGE_MIN bytes or more starts on a 2 MiB boundary and asks
 * Linux for transparent huge pages (madvise: the usual setting, where only
 * asked-for memory gets them). An algorithm walks 2n buffers at once, and
 * with 4 KiB pages every 4 KiB of each costs a TLB miss: on a 2-core VM an
 * rsag of 256 MiB on 4 ranks went from 95 to 72 ms and of 64 MiB from 25 to
 * 17 ms (bench allreduce, 2 runs each way); the bound's memcpy from 60 to
 * 47-50 ms.
 *
 * Above CPU_HUGE_MAX a buffer keeps 4 KiB pages and is populated at once
 * (MADV_POPULATE_WRITE: one call instead of a fault per page, on the thread
 * that allocates it, a rank's own). Such a buffer is an arena about as
 * large as memory allows, which a run passes over a few times (fill,
 * iterations, --verify), and there the first touch of fresh memory is the
 * cost: on the 2-core VM (a guest whose free pages go back to its host) a
 * huge page's first touch took 2.2-2.9 s of system time per GiB, 4 KiB
 * pages 0.4-0.6 s, so the 1 GiB-per-rank Llama graph on 4 ranks with
 * --verify went from 10.8-12.2 s of system time to 2.1-2.4 s; the TLB
 * saves 10-15% of a pass (bench allreduce, rsag of 16 and 64 MiB).
 * Measured again with bench/first_touch.c (bench/README.md has the runs):
 * memory free for 15 s cost, 4 GiB on 2 threads, 0.7-1.5 s of wall per
 * GiB in 4 KiB pages populated, 0.8-1.3 faulted in by the writes, 6.7-12.3
 * in huge pages; memory freed a moment before is cheap in huge pages (0.3
 * s/GiB at once, 1.5 after 3 s, 5.2 after 10 s: the host has it back
 * within seconds), 0.8-1.5 in 4 KiB pages whatever the gap. At 12 GiB on
 * 4 threads, most of the free memory, the two cost alike (2.6-3.7 s/GiB
 * populated, 3.1 huge): 4 KiB pages first get the free fragments below 2
 * MiB, which the guest never reports to its host, and a run of GiBs gets
 * through them to reported memory. A run has none of its own freed a
 * moment before, so the choice stands.
 *
 * Such a buffer is its own anonymous mapping, which the kernel hands out
 * zeroed: no memset, so the first write (a rank filling its Inputs) is
 * the only touch of the fresh pages. The memset that zeroed a 1 GiB arena
 * after malloc was a second pass over it, and the page faults it took ran
 * wherever the memset ran. Every buffer has a header just below it (its
 * mapping, or its malloc block) for cpu_free. */
enum { CPU_HUGE_MIN = 4 << 20, CPU_HUGE_PAGE = 2 << 20, CPU_HEAD = 64 };
#define CPU_HUGE_MAX ((size_t)512 << 20)

typedef struct cpu_head {
  void *base;    /* the malloc block or the mapping */
  size_t mapped; /* the mapping's length; 0: a malloc block */
} cpu_head;

/* Fault in [p, p + bytes) for writing in 4 KiB pages, as advice: where the
 * kernel has no MADV_POPULATE_WRITE (before Linux 5.14) the first writes
 * fault them in. */
static void populate(char *p, size_t bytes) {
  madvise(p, bytes, MADV_NOHUGEPAGE); /* THP "always" would make them huge */
  /* 64 MiB a call, a sign of life after each (cf_beat): the first touch
   * of 4 GiB on each of 4 ranks took 10-131 s of system time on the 2-core
   * VM, and the rank's peers wait for it meanwhile */
  for (size_t at = 0, step = (size_t)64 << 20; at < bytes; at += step) {
    madvise(p + at, bytes - at < step ? bytes - at : step, CPU_POPULATE_WRITE);
    cf_beat();
  }
}

static void *cpu_alloc(cf_device *d, size_t bytes) {
  (void)d;
  size_t rounded = (bytes + 63) & ~(size_t)63;
  if (rounded < bytes || rounded > SIZE_MAX - 2 * CPU_HUGE_PAGE) return NULL;
  if (rounded == 0) rounded = 64;
  char *p;
  cpu_head h = {0};
  if (rounded >= CPU_HUGE_MIN) { /* zeroed by the kernel */
    h.mapped = rounded + CPU_HUGE_PAGE;
    char *m = mmap(NULL, h.mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    h.base = m;
    p = (char *)(((uintptr_t)m + CPU_HEAD + CPU_HUGE_PAGE - 1) & ~(uintptr_t)(CPU_HUGE_PAGE - 1));
    if (rounded <= CPU_HUGE_MAX)
      madvise(p, rounded, MADV_HUGEPAGE); /* advice: nothing to do if refused */
    else
      populate(p, rounded);
  } else {
    if (!(h.base = aligned_alloc(64, rounded + CPU_HEAD))) return NULL;
    p = (char *)h.base + CPU_HEAD;
    memset(p, 0, rounded);
  }
  memcpy(p - CPU_HEAD, &h, sizeof h);
  return p;
}

static void cpu_free(cf_device *d, void *p) {
  (void)d;
  if (!p) return;
  cpu_head h;
  memcpy(&h, (char *)p - CPU_HEAD, sizeof h);
  if (h.mapped)
    munmap(h.base, h.mapped);
  else
    free(h.base);
}

static void cpu_copy(cf_device *d, void *dst, const void *src, size_t bytes) {
  (void)d;
  if (bytes && dst != src) memcpy(dst, src, bytes);
}

/* Streaming copy: whole 64-byte lines of dst with non-temporal stores (no
 * read-for-ownership of the destination, nothing of it left in cache),
 * the unaligned head and tail with memcpy. x86-64 always has SSE2's;
 * elsewhere it is memcpy. */
static void cpu_copy_stream(cf_device *d, void *dst, const void *src, size_t bytes) {
#if defined(__SSE2__)
  if (bytes >= 4096 && dst != src) {
    char *o = dst;
    const char *i = src;
    size_t head = (64 - ((uintptr_t)o & 63)) & 63, body = (bytes - head) & ~(size_t)63;
    memcpy(o, i, head);
    o += head, i += head;
    for (size_t k = 0; k < body; k += 64) {
      /* ahead as the stream kernels read (an address past the end does not fault) */
      _mm_prefetch((const char *)((uintptr_t)(i + k) + CF_STREAM_PREFETCH), _MM_HINT_T0);
      __m128i a = _mm_loadu_si128((const __m128i *)(i + k));
      __m128i b = _mm_loadu_si128((const __m128i *)(i + k + 16));
      __m128i c = _mm_loadu_si128((const __m128i *)(i + k + 32));
      __m128i e = _mm_loadu_si128((const __m128i *)(i + k + 48));
      _mm_stream_si128((__m128i *)(o + k), a);
      _mm_stream_si128((__m128i *)(o + k + 16), b);
      _mm_stream_si128((__m128i *)(o + k + 32), c);
      _mm_stream_si128((__m128i *)(o + k + 48), e);
    }
    _mm_sfence(); /* streaming stores are weakly ordered */
    memcpy(o + body, i + body, bytes - head - body);
    return;
  }
#endif
  cpu_copy(d, dst, src, bytes);
}

static cf_status cpu_prepare(cf_device *d, const cf_kernel_key *key) {
  cpu_dev *c = d->impl;
  void **s = slot(c, key);
  if (*s) return CF_OK;
  return cf_codegen_kernel(d->ctx, key, s, NULL);
}

static void *resolved(cf_device *d, const cf_kernel_key *key) {
  void *fn = *slot(d->impl, key);
  /* The plan prepares every kernel its collectives use before a rank starts. */
  if (!fn) abort();
  return fn;
}

/* JIT symbols are object pointers; C11 converts them to functions by bytes. */
static void cpu_nary(cf_device *d, const cf_kernel_key *key, void *dst, const void *const *src,
                     int64_t n, double div) {
  if (n <= 0) return;
  void *p = resolved(d, key);
  cf_kernel_nary_fn f;
  memcpy(&f, &p, sizeof f);
  f(dst, src, n, div);
}

static void cpu_nary_to(cf_device *d, const cf_kernel_key *key, void *const *dst,
                        const void *const *src, int64_t n, double div) {
  if (n <= 0) return;
  void *p = resolved(d, key);
  cf_kernel_nary_to_fn f;
  memcpy(&f, &p, sizeof f);
  f(dst, src, n, div);
}

static void cpu_acc(cf_device *d, const cf_kernel_key *key, void *dst, const void *src, int64_t n) {
  if (n <= 0) return;
  void *p = resolved(d, key);
  cf_kernel_acc_fn f;
  memcpy(&f, &p, sizeof f);
  f(dst, src, n);
}

static void cpu_scale(cf_device *d, const cf_kernel_key *key, void *dst, int64_t n, double div) {
  if (n <= 0) return;
  void *p = resolved(d, key);
  cf_kernel_scale_fn f;
  memcpy(&f, &p, sizeof f);
  f(dst, n, div);
}

static void cpu_sync(cf_device *d) { (void)d; }

static void cpu_destroy(cf_device *d) {
  if (!d) return;
  free(d->impl);
  free(d);
}

static const cf_device_ops cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .copy_stream = cpu_copy_stream,
    .nary_to = cpu_nary_to,
    .prepare = cpu_prepare,
    .nary = cpu_nary,
    .acc = cpu_acc,
    .scale = cpu_scale,
    .sync = cpu_sync,
    .destroy = cpu_destroy,
};

cf_status cf_device_cpu_create(cf_context *ctx, cf_device **out) {
  *out = NULL;
  cf_device *d = calloc(1, sizeof *d);
  cpu_dev *c = calloc(1, sizeof *c);
  if (!d || !c) {
    free(d);
    free(c);
    return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  }
  d->ops = &cpu_ops;
  d->ctx = ctx;
  d->impl = c;
  *out = d;
  return CF_OK;
}
