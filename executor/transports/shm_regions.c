/* transports/shm_regions.c - the caller's own memory, read and written in
 * place by the shm world's peers (cf_shm_register).
 *
 * The shm world's peers read a rank's buffers where they lie, so a buffer
 * must be memory every rank maps: the rank's heap (shm.c), or, from here,
 * memory of the caller's that lives in a file it can share. A framework's
 * gradient bucket is such memory once it asks for it: torch's
 * share_memory_() moves a CPU tensor's storage into an unlinked /dev/shm
 * file in place (every view follows), whose descriptor the storage keeps
 * open. The rank registers it (base, bytes, fd); the run then uses the
 * caller's buffer itself instead of copying it into the heap and back
 * (exec.c: cf_world_shares).
 *
 * The registry is the process's, as the memory is; every world the process
 * has joined publishes an entry in its own row of its control segment the
 * first time a message names memory in it: slot (fd, bytes, generation; a
 * new registration gets a new generation, never 0). A message then names
 * (slot, generation, offset) instead of an offset into the heap. A peer
 * maps the region on first use: it opens /proc/<pid>/fd/<fd> (the kernel
 * asks only for ptrace read access: the same user, which Yama's
 * ptrace_scope 1 still allows; pidfd_getfd(2) needs ptrace attach, which
 * Yama refuses to non-ancestors, and SCM_RIGHTS would need a socket
 * conversation with the owner in the middle of a collective), checks the
 * file's size, maps it MAP_SHARED (so what a peer writes, rsag_put's chunk
 * of the output, is the owner's), keeps the map, and maps again when the
 * slot's generation has changed. The maps go with the world.
 *
 * A peer's pages that this rank maps count in its resident size (RSS,
 * ru_maxrss) as much as its own: on two ranks an in-place AllReduce reads
 * and writes half of the peer's buffer here, so a DDP rank whose gradient
 * buckets are registered held half of its peer's buckets besides its own
 * (ResNet-18: 21 MB, all that kept its peak above plain DDP's). So where
 * the region's file is in 2 MiB pages (st_blksize: a tmpfs of huge pages,
 * as cf_shm_memory's files, shm_pages.c), each message's pages are let go
 * (MADV_DONTNEED: only this rank's page tables; the data stay in the
 * owner's file) when the message is released, and the next message maps
 * them again, one fault per 2 MiB. In 4 KiB pages the faults to map them
 * again, one per 16 pages (fault-around), made an in-place AllReduce of
 * 16 MiB 1.5-4x slower, so there they stay mapped; reading the peer's
 * file without mapping it (pread/pwrite into a segment in cache, or
 * process_vm_readv) moved 3-5 GB/s against 13-16 for memcpy from the
 * mapping, 2.5-7x slower per call (docs/executor.md, "A peer's
 * pages").
 */
#define _GNU_SOURCE
#include "transports.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct reg_entry {
  char *base;
  size_t bytes;
  int fd;
  uint64_t gen; /* 0: a free entry */
} reg_entry;

/* The process's registrations and every world that may have published one. */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static reg_entry reg[CF_SHM_REGIONS];
static uint64_t reg_gen;
static cf_shm_regions *reg_worlds;

static reg_entry *reg_find(const void *p, size_t bytes) {
  const char *c = p;
  for (int i = 0; i < CF_SHM_REGIONS; i++)
    if (reg[i].gen && c >= reg[i].base && bytes <= reg[i].bytes && c - reg[i].base <= (ptrdiff_t)(reg[i].bytes - bytes))
      return &reg[i];
  return NULL;
}

/* Withdraw generation gen from every world's table (under reg_lock). */
static void withdraw(uint64_t gen) {
  for (cf_shm_regions *rs = reg_worlds; rs; rs = rs->next)
    for (int s = 0; s < CF_SHM_REGIONS; s++) {
      cf_shm_region *t = &rs->table[(size_t)rs->me * CF_SHM_REGIONS + (size_t)s];
      if (atomic_load(&t->gen) == gen) atomic_store(&t->gen, 0);
    }
}

cf_status cf_shm_regions_add(cf_context *ctx, void *base, size_t bytes, int fd) {
  struct stat sb;
  if (!base || !bytes)
    return cf_error(ctx, CF_ERR_USAGE, NULL, 0, "cf_shm_register: no memory given (base %p, %zu bytes)",
                    base, bytes);
  if (fd < 0 || fstat(fd, &sb) != 0)
    return cf_error(ctx, CF_ERR_USAGE, NULL, 0, "cf_shm_register: descriptor %d: %s", fd,
                    fd < 0 ? "not a descriptor" : strerror(errno));
  if (!S_ISREG(sb.st_mode) || (uint64_t)sb.st_size < (uint64_t)bytes)
    return cf_error(ctx, CF_ERR_USAGE, NULL, 0,
                    "cf_shm_register: descriptor %d is %s of %lld bytes, not a shareable file of at "
                    "least the %zu bytes registered",
                    fd, S_ISREG(sb.st_mode) ? "a file" : "no file", (long long)sb.st_size, bytes);
  pthread_mutex_lock(&reg_lock);
  reg_entry *e = NULL;
  for (int i = 0; i < CF_SHM_REGIONS; i++) {
    if (reg[i].gen && reg[i].base == base) { /* registered again: a new generation */
      withdraw(reg[i].gen);
      e = &reg[i];
      break;
    }
    if (!reg[i].gen && !e) e = &reg[i];
  }
  if (!e) {
    pthread_mutex_unlock(&reg_lock);
    return cf_error(ctx, CF_ERR_USAGE, NULL, 0,
                    "cf_shm_register: %d regions are registered already, the most a process may have "
                    "(cf_shm_unregister those no longer used)",
                    CF_SHM_REGIONS);
  }
  *e = (reg_entry){.base = base, .bytes = bytes, .fd = fd, .gen = ++reg_gen};
  pthread_mutex_unlock(&reg_lock);
  return CF_OK;
}

cf_status cf_shm_regions_remove(cf_context *ctx, void *base) {
  pthread_mutex_lock(&reg_lock);
  for (int i = 0; i < CF_SHM_REGIONS; i++)
    if (reg[i].gen && reg[i].base == base) {
      withdraw(reg[i].gen);
      reg[i] = (reg_entry){.fd = -1};
      pthread_mutex_unlock(&reg_lock);
      return CF_OK;
    }
  pthread_mutex_unlock(&reg_lock);
  return cf_error(ctx, CF_ERR_USAGE, NULL, 0, "cf_shm_unregister: no region registered at %p", base);
}

bool cf_shm_registered(const void *p, size_t bytes) {
  pthread_mutex_lock(&reg_lock);
  bool yes = reg_find(p, bytes) != NULL;
  pthread_mutex_unlock(&reg_lock);
  return yes;
}

cf_status cf_shm_regions_init(cf_shm_regions *rs, cf_shm_region *table, const int32_t *pid, int size,
                              int me) {
  *rs = (cf_shm_regions){.table = table, .pid = pid, .size = size, .me = me};
  rs->map = calloc((size_t)size * CF_SHM_REGIONS, sizeof *rs->map);
  if (!rs->map) return CF_ERR_NO_MEMORY;
  pthread_mutex_init(&rs->lock, NULL);
  pthread_mutex_lock(&reg_lock);
  rs->next = reg_worlds;
  reg_worlds = rs;
  pthread_mutex_unlock(&reg_lock);
  return CF_OK;
}

void cf_shm_regions_fini(cf_shm_regions *rs) {
  if (!rs->map) return;
  pthread_mutex_lock(&reg_lock);
  for (cf_shm_regions **at = &reg_worlds; *at; at = &(*at)->next)
    if (*at == rs) {
      *at = rs->next;
      break;
    }
  pthread_mutex_unlock(&reg_lock);
  for (size_t i = 0; i < (size_t)rs->size * CF_SHM_REGIONS; i++)
    if (rs->map[i].p) munmap(rs->map[i].p, rs->map[i].bytes);
  free(rs->map);
  rs->map = NULL;
  pthread_mutex_destroy(&rs->lock);
}

bool cf_shm_regions_name(cf_shm_regions *rs, const void *p, size_t bytes, uint32_t *slot, uint64_t *gen,
                         uint64_t *off) {
  pthread_mutex_lock(&reg_lock);
  reg_entry *e = reg_find(p, bytes);
  int at = -1;
  cf_shm_region *row = &rs->table[(size_t)rs->me * CF_SHM_REGIONS];
  for (int s = 0; e && s < CF_SHM_REGIONS && at < 0; s++)
    if (atomic_load(&row[s].gen) == e->gen) at = s;
  for (int s = 0; e && s < CF_SHM_REGIONS && at < 0; s++) /* published here first */
    if (!atomic_load(&row[s].gen)) {
      row[s].fd = e->fd;
      row[s].bytes = e->bytes;
      atomic_store(&row[s].gen, e->gen); /* last: a peer that sees it sees the rest */
      at = s;
    }
  if (at >= 0) {
    *slot = (uint32_t)at;
    *gen = e->gen;
    *off = (uint64_t)((const char *)p - e->base);
  }
  pthread_mutex_unlock(&reg_lock);
  return at >= 0;
}

const void *cf_shm_regions_peer(cf_shm_regions *rs, int peer, uint32_t slot, uint64_t gen, uint64_t off,
                                size_t bytes, cf_shm_hold *hold, char *text, size_t len) {
  *hold = (cf_shm_hold){0};
  if (peer < 0 || peer >= rs->size || slot >= CF_SHM_REGIONS) {
    snprintf(text, len, "rank %d sent rank %d a message in region %u, which no rank has", peer, rs->me,
             slot);
    return NULL;
  }
  pthread_mutex_lock(&rs->lock);
  struct cf_shm_map *m = &rs->map[(size_t)peer * CF_SHM_REGIONS + slot];
  const char *got = NULL;
  if (m->gen != gen) {
    if (m->p) munmap(m->p, m->bytes);
    *m = (struct cf_shm_map){0};
    cf_shm_region *t = &rs->table[(size_t)peer * CF_SHM_REGIONS + slot];
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)rs->pid[peer], (int)t->fd);
    struct stat sb;
    int fd = -1;
    if (atomic_load(&t->gen) != gen) {
      snprintf(text, len,
               "rank %d cannot read rank %d's registered memory: its region %u was unregistered or "
               "registered again in the middle of the run",
               rs->me, peer, slot);
    } else if ((fd = open(path, O_RDWR | O_CLOEXEC)) < 0 || fstat(fd, &sb) != 0 ||
               (uint64_t)sb.st_size < t->bytes) {
      snprintf(text, len,
               "rank %d cannot map rank %d's registered memory (region %u, %llu bytes) through %s: %s",
               rs->me, peer, slot, (unsigned long long)t->bytes, path,
               fd < 0 ? strerror(errno) : "the file is smaller than the region");
    } else {
      /* on a tmpfs of 2 MiB pages the kernel places the map on a 2 MiB boundary */
      void *p = mmap(NULL, t->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED)
        snprintf(text, len, "rank %d cannot map rank %d's registered memory (region %u, %llu bytes): %s",
                 rs->me, peer, slot, (unsigned long long)t->bytes, strerror(errno));
      else
        *m = (struct cf_shm_map){
            .gen = gen, .p = p, .bytes = t->bytes, .let_go = (uint64_t)sb.st_blksize >= CF_SHM_HUGE_PAGE};
    }
    if (fd >= 0) close(fd);
  }
  if (m->p && (off > m->bytes || bytes > m->bytes - off))
    snprintf(text, len, "rank %d sent rank %d %zu bytes at %llu of its region %u, which has %zu", peer,
             rs->me, bytes, (unsigned long long)off, slot, m->bytes);
  else if (m->p)
    got = (const char *)m->p + off;
  if (got && m->let_go && bytes) { /* whole 2 MiB pages: a part would split the page's mapping */
    uintptr_t base = (uintptr_t)m->p, lo = (uintptr_t)got & ~(uintptr_t)(CF_SHM_HUGE_PAGE - 1),
              hi = ((uintptr_t)got + bytes + CF_SHM_HUGE_PAGE - 1) & ~(uintptr_t)(CF_SHM_HUGE_PAGE - 1);
    if (lo < base) lo = base;
    if (hi > base + m->bytes) hi = base + m->bytes;
    *hold = (cf_shm_hold){
        .lo = (char *)lo, .hi = (char *)hi, .gone = (char *)lo, .peer = peer, .slot = slot, .gen = gen};
  }
  pthread_mutex_unlock(&rs->lock);
  return got;
}

/* Drop [lo, hi) of hold's map from this rank's page tables unless the map
 * was replaced since (those addresses are not the peer's now). */
static void drop(cf_shm_regions *rs, const cf_shm_hold *hold, char *lo, char *hi) {
  pthread_mutex_lock(&rs->lock);
  struct cf_shm_map *m = &rs->map[(size_t)hold->peer * CF_SHM_REGIONS + hold->slot];
  if (m->p && m->gen == hold->gen) madvise(lo, (size_t)(hi - lo), MADV_DONTNEED);
  pthread_mutex_unlock(&rs->lock);
}

void cf_shm_regions_let_go(cf_shm_regions *rs, cf_shm_hold *hold) {
  if (hold->lo) drop(rs, hold, hold->lo, hold->hi);
  *hold = (cf_shm_hold){0};
}

/* From the page that holds p on: what lies before p in it is not this
 * rank's to touch in this call (another rank's chunk, or no message's), and
 * a page dropped is only mapped again if touched. Up to the last whole page
 * done: the receiver is still at work in the page after. */
void cf_shm_regions_let_go_part(cf_shm_regions *rs, cf_shm_hold *hold, const void *p, size_t bytes) {
  uintptr_t huge = CF_SHM_HUGE_PAGE, lo = (uintptr_t)p & ~(huge - 1), hi = ((uintptr_t)p + bytes) & ~(huge - 1);
  if (lo < (uintptr_t)hold->gone) lo = (uintptr_t)hold->gone;
  if (hi > (uintptr_t)hold->hi) hi = (uintptr_t)hold->hi;
  if (!hold->lo || hi <= lo) return;
  drop(rs, hold, (char *)lo, (char *)hi);
  hold->gone = (char *)hi;
}
