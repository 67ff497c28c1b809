/* temp.c - the temporaries collfuse has on disk, and directories that
 * replace others whole.
 *
 * Every ".cf-XXXXXX" that exists for a moment (the file cf_out_open writes
 * before renaming it over its target, a directory being filled before it
 * replaces another, an old directory on its way out) is in a registry while
 * it exists, so that a signal handler can remove them all before the
 * process dies (cf_temps_remove, async-signal-safe): SIGTERM during `run
 * --save-outputs` used to leave 10-32 MiB temporaries behind. Signals are
 * the process's, not a context's, so the registry is the library's one
 * piece of process-wide state: TEMP_SLOTS paths of up to TEMP_PATH bytes,
 * claimed with an atomic exchange; a temporary that finds no slot (or a
 * longer path) is only not removed on a signal.
 *
 * A directory is published whole (cf_tmpdir_publish): it is filled under a
 * temporary name beside its target and then renamed over it, or exchanged
 * with an existing target (renameat2 RENAME_EXCHANGE; where the file
 * system cannot, the old one is renamed aside first) and the old tree
 * removed. A reader sees the old directory or the new one, never a mix.
 * Trees are removed with open/getdents64/unlinkat alone, two levels deep
 * at most (what collfuse writes), so the signal handler can do it too.
 */
#define _GNU_SOURCE
#include "ir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TEMP_SLOTS 64
#define TEMP_PATH 4096

enum { SLOT_FREE, SLOT_CLAIMED, SLOT_LIVE };

static struct temp_slot {
  _Atomic int state;
  bool dir;
  char path[TEMP_PATH];
} slots[TEMP_SLOTS];

int cf_temp_track(const char *path, bool dir) {
  size_t n = strlen(path);
  if (n >= TEMP_PATH) return -1;
  for (int i = 0; i < TEMP_SLOTS; i++) {
    int free_ = SLOT_FREE;
    if (!atomic_compare_exchange_strong(&slots[i].state, &free_, SLOT_CLAIMED)) continue;
    memcpy(slots[i].path, path, n + 1);
    slots[i].dir = dir;
    atomic_store(&slots[i].state, SLOT_LIVE);
    return i;
  }
  return -1;
}

void cf_temp_untrack(int slot) {
  if (slot >= 0 && slot < TEMP_SLOTS) atomic_store(&slots[slot].state, SLOT_FREE);
}

/* Remove name (in dirfd) and, when it is a directory, what it holds, depth
 * levels below it at most. Only system calls: safe in a signal handler. */
static int remove_at(int dirfd, const char *name, int depth) {
  if (unlinkat(dirfd, name, 0) == 0) return 0;
  if (errno != EISDIR && errno != EPERM) return -1;
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[4096];
  for (int pass = 0; pass < 64; pass++) { /* until a read of the directory finds nothing */
    bool any = false;
    if (lseek(fd, 0, SEEK_SET) != 0) break;
    for (;;) {
      ssize_t got = getdents64(fd, buf, sizeof buf);
      if (got <= 0) break;
      for (ssize_t off = 0; off < got;) {
        struct dirent64 *e = (struct dirent64 *)(buf + off);
        off += e->d_reclen;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (depth > 0 ? remove_at(fd, e->d_name, depth - 1) == 0 : unlinkat(fd, e->d_name, 0) == 0)
          any = true;
      }
    }
    if (!any) break;
  }
  close(fd);
  return unlinkat(dirfd, name, AT_REMOVEDIR);
}

static int remove_tree(const char *path) { return remove_at(AT_FDCWD, path, 1); }

void cf_temps_remove(void) {
  for (int i = 0; i < TEMP_SLOTS; i++)
    if (atomic_load(&slots[i].state) == SLOT_LIVE) {
      if (slots[i].dir)
        remove_tree(slots[i].path);
      else
        unlink(slots[i].path);
    }
}

/* ---- directories published whole ---- */

/* A new "DIR/.cf-XXXXXX" name for parent directory dir (NULL: the current
 * one) into buf: x is the letters' state. */
static void temp_name(const char *dir, uint64_t *x, char *buf, size_t len) {
  static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  char letters[7];
  for (int i = 0; i < 6; i++) {
    *x = *x * 6364136223846793005ull + 1442695040888963407ull; /* an LCG step per letter */
    letters[i] = alnum[(*x >> 33) % (sizeof alnum - 1)];
  }
  letters[6] = '\0';
  snprintf(buf, len, "%s%s.cf-%s", dir ? dir : "", dir ? "/" : "", letters);
}

static uint64_t seed(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)getpid() << 16 ^
         (uint64_t)(uintptr_t)&ts;
}

/* The directory that holds path (a copy; NULL for a bare name). */
static char *parent_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return NULL;
  size_t n = slash == path ? 1 : (size_t)(slash - path);
  char *d = malloc(n + 1);
  if (d) memcpy(d, path, n), d[n] = '\0';
  return d;
}

static cf_status io_error(cf_context *ctx, const char *path, const char *what, int err) {
  return cf_error(ctx, CF_ERR_IO, path, 0, "%s: %s", what, strerror(err));
}

/* A fresh directory beside target, registered; what *t holds on CF_OK. */
static cf_status make_beside(cf_context *ctx, const char *target, cf_tmpdir *t) {
  *t = (cf_tmpdir){.slot = -1};
  char *dir = parent_of(target);
  size_t len = (dir ? strlen(dir) : 0) + 16;
  char *p = malloc(len);
  if (!p) {
    free(dir);
    return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  }
  uint64_t x = seed();
  int err = 0;
  for (int attempt = 0; attempt < 100; attempt++) {
    temp_name(dir, &x, p, len);
    if (mkdir(p, 0777) == 0) {
      err = 0;
      break;
    }
    err = errno;
    if (err != EEXIST) break;
  }
  free(dir);
  if (err) {
    free(p);
    return io_error(ctx, target, "cannot create a directory beside it", err);
  }
  t->path = p;
  t->slot = cf_temp_track(p, true);
  return CF_OK;
}

cf_status cf_tmpdir_make(cf_context *ctx, const char *target, cf_tmpdir *t) {
  return make_beside(ctx, target, t);
}

void cf_tmpdir_discard(cf_tmpdir *t) {
  if (!t->path) return;
  remove_tree(t->path);
  cf_temp_untrack(t->slot);
  free(t->path);
  *t = (cf_tmpdir){.slot = -1};
}

cf_status cf_tmpdir_publish(cf_context *ctx, cf_tmpdir *t, const char *target) {
  cf_status st = CF_OK;
  struct stat sb;
  if (lstat(target, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
    st = cf_error(ctx, CF_ERR_IO, target, 0, "cannot write: not a directory");
  } else if (rename(t->path, target) == 0) { /* no target, or an empty one */
    cf_temp_untrack(t->slot);
    free(t->path);
    *t = (cf_tmpdir){.slot = -1};
    return CF_OK;
  } else if (errno != ENOTEMPTY && errno != EEXIST) {
    st = io_error(ctx, target, "cannot write", errno);
  } else if (renameat2(AT_FDCWD, t->path, AT_FDCWD, target, RENAME_EXCHANGE) == 0) {
    /* t->path now names the old tree (still registered): remove it */
  } else {
    /* a file system without exchange: the old one aside, then the new one in */
    cf_tmpdir old;
    if ((st = make_beside(ctx, target, &old))) {
    } else if (rename(target, old.path) != 0) {
      st = io_error(ctx, target, "cannot write", errno);
      cf_tmpdir_discard(&old); /* the empty placeholder */
    } else if (rename(t->path, target) != 0) {
      st = io_error(ctx, target, "cannot write", errno);
      if (rename(old.path, target) == 0) { /* the old one back */
        cf_temp_untrack(old.slot);
        free(old.path);
      } else {
        cf_tmpdir_discard(&old);
      }
    } else {
      cf_tmpdir_discard(&old);
      cf_temp_untrack(t->slot);
      free(t->path);
      *t = (cf_tmpdir){.slot = -1};
      return CF_OK;
    }
  }
  cf_tmpdir_discard(t); /* the old tree after an exchange, else the new one */
  return st;
}

cf_status cf_dir_remove(cf_context *ctx, const char *path) {
  cf_tmpdir aside;
  cf_status st = make_beside(ctx, path, &aside);
  if (st) return st;
  /* renamed aside first: a signal in the middle never leaves half of it */
  if (rename(path, aside.path) != 0) {
    int err = errno;
    rmdir(aside.path);
    cf_temp_untrack(aside.slot);
    free(aside.path);
    return err == ENOENT ? CF_OK : io_error(ctx, path, "cannot remove", err);
  }
  cf_tmpdir_discard(&aside);
  return CF_OK;
}
