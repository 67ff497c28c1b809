/* file.c - the one way collfuse writes an output file, and reads that give
 * up at a deadline.
 *
 * A writer never opens its target, or a fixed name beside it, for writing:
 * it creates a fresh temporary ".cf-XXXXXX" in the target's directory with
 * O_CREAT|O_EXCL|O_NOFOLLOW (so no existing file or symlink is followed or
 * truncated), writes it, fsyncs it and renames it over the target. A reader
 * sees the old file or the new one, never a part of one; a failure removes
 * the temporary and leaves the target as it was; a symlink at the target is
 * replaced by the new file, its own target untouched. The short name keeps
 * a target whose name is at the file system's limit (255 bytes) writable.
 * What is not a regular file - a device, FIFO or socket (/dev/null, a pipe),
 * or any path under /dev/ or /proc/ (/dev/stdout, /dev/fd/N) - is written in
 * place, as a shell redirection would.
 *
 * Reads with a deadline open without blocking (a FIFO with no writer does
 * not hang open) and poll before each read, so a run's --timeout covers
 * its input files.
 */
#include "ir.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Paths that stand for a descriptor or a device, even through a symlink
 * that leads to a regular file (/dev/stdout of `> file`). */
static bool in_place_path(const char *path) {
  return strncmp(path, "/dev/", 5) == 0 || strncmp(path, "/proc/", 6) == 0;
}

/* A new ".cf-XXXXXX" beside path, created O_EXCL with mode 0666 (less the
 * umask, as fopen's files). Returns the descriptor, -1 with errno. */
static int make_temp(const char *path, char **tmp) {
  static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  const char *slash = strrchr(path, '/');
  size_t dir = slash ? (size_t)(slash - path) + 1 : 0;
  char *t = malloc(dir + sizeof ".cf-XXXXXX");
  if (!t) return -1;
  memcpy(t, path, dir);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t x = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)getpid() << 16 ^
               (uint64_t)(uintptr_t)&ts;
  for (int attempt = 0; attempt < 100; attempt++) {
    memcpy(t + dir, ".cf-", 4);
    for (int i = 0; i < 6; i++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull; /* an LCG step per letter */
      t[dir + 4 + i] = alnum[(x >> 33) % (sizeof alnum - 1)];
    }
    t[dir + 10] = '\0';
    int fd = open(t, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd >= 0) {
      *tmp = t;
      return fd;
    }
    if (errno != EEXIST) break;
  }
  int err = errno;
  free(t);
  errno = err;
  return -1;
}

static cf_status write_error(cf_context *ctx, const char *path, int err) {
  return cf_error(ctx, CF_ERR_IO, path, 0, "cannot write: %s", strerror(err));
}

cf_status cf_out_open(cf_context *ctx, const char *path, bool binary, cf_outfile *o) {
  struct stat sb, lsb;
  int fd = -1;
  *o = (cf_outfile){.path = path, .slot = -1};
  bool exists = stat(path, &sb) == 0;
  if (exists && S_ISDIR(sb.st_mode))
    return cf_error(ctx, CF_ERR_IO, path, 0, "cannot write: is a directory");
  if ((exists && !S_ISREG(sb.st_mode)) || in_place_path(path)) {
    /* in place: no O_CREAT, so nothing new appears under /dev; a FIFO
     * waits for its reader as a redirection does */
    fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC);
    if (fd >= 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && ftruncate(fd, 0) != 0) {
      int err = errno;
      close(fd);
      return write_error(ctx, path, err);
    }
  } else {
    fd = make_temp(path, &o->tmp);
    if (fd >= 0) o->slot = cf_temp_track(o->tmp, false); /* removed on a signal (temp.c) */
    /* an existing regular file keeps its permissions; a replaced symlink
     * does not lend its target's */
    if (fd >= 0 && lstat(path, &lsb) == 0 && S_ISREG(lsb.st_mode))
      (void)fchmod(fd, lsb.st_mode & 07777);
  }
  if (fd < 0) return write_error(ctx, path, errno);
  if (!(o->f = fdopen(fd, binary ? "wb" : "w"))) {
    int err = errno;
    close(fd);
    if (o->tmp) unlink(o->tmp);
    cf_temp_untrack(o->slot);
    free(o->tmp);
    o->tmp = NULL;
    return write_error(ctx, path, err);
  }
  return CF_OK;
}

cf_status cf_out_close(cf_context *ctx, cf_outfile *o, bool ok) {
  if (!o->f) return CF_OK;
  int err = 0;
  if (fflush(o->f) != 0 || ferror(o->f)) err = errno ? errno : EIO;
  /* the data reaches the disk before the name does */
  if (ok && !err && o->tmp && fsync(fileno(o->f)) != 0) err = errno;
  if (fclose(o->f) != 0 && !err) err = errno;
  o->f = NULL;
  if (ok && !err && o->tmp && rename(o->tmp, o->path) != 0) err = errno;
  if ((!ok || err) && o->tmp) unlink(o->tmp);
  cf_temp_untrack(o->slot);
  o->slot = -1;
  free(o->tmp);
  o->tmp = NULL;
  return ok && err ? write_error(ctx, o->path, err) : CF_OK;
}

cf_status cf_write_file(cf_context *ctx, const char *path, const void *data, size_t size) {
  cf_outfile o;
  cf_status st = cf_out_open(ctx, path, true, &o);
  if (st) return st;
  errno = 0;
  bool ok = size == 0 || fwrite(data, 1, size, o.f) == size;
  int err = errno ? errno : EIO;
  st = cf_out_close(ctx, &o, ok);
  return ok ? st : write_error(ctx, path, err);
}

/* ---- reading with a deadline ---- */

int cf_open_read(const char *path, double deadline) {
  if (deadline <= 0) return open(path, O_RDONLY | O_CLOEXEC);
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat sb;
  /* regular files and directories never block: reading stays plain */
  if (fstat(fd, &sb) == 0 && (S_ISREG(sb.st_mode) || S_ISDIR(sb.st_mode)))
    (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

ssize_t cf_read_full(int fd, void *buf, size_t n, double deadline) {
  size_t got = 0;
  while (got < n) {
    if (deadline > 0) {
      double left = deadline - cf_now();
      struct pollfd p = {.fd = fd, .events = POLLIN};
      int r = left > 0 ? poll(&p, 1, (int)(left * 1000) + 1) : 0;
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return -1;
      if (r == 0) {
        errno = ETIMEDOUT;
        return -1;
      }
    }
    ssize_t r = read(fd, (char *)buf + got, n - got);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    got += (size_t)r;
  }
  return (ssize_t)got;
}
