/* file.c - the one way collfuse writes an output file, and the one way it
 * opens and reads an input file.
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
 * A reader never blocks before it knows what it reads: a path is stat'ed
 * and opened O_NONBLOCK, and what is not a regular file (a FIFO with no
 * writer, /dev/zero, a terminal) is refused naming what it is, unless the
 * caller reads FIFOs with a deadline (run's --input, polled before each
 * read, so --timeout covers them). Whole files are read up to a bound, so
 * an endless stream (standard input from /dev/zero) is an error, not a
 * spinning reader.
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

/* A new ".cf-XXXXXX" beside path (relative to dirfd), created O_EXCL with
 * mode (less the umask). Returns the descriptor, -1 with errno. */
static int make_temp(int dirfd, const char *path, mode_t mode, char **tmp) {
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
    int fd = openat(dirfd, t, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
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

/* o's stream over fd (-1: errno says why it could not be opened). */
static cf_status out_fdopen(cf_context *ctx, cf_outfile *o, int fd, bool binary) {
  if (fd < 0) return write_error(ctx, o->path, errno);
  if (!(o->f = fdopen(fd, binary ? "wb" : "w"))) {
    int err = errno;
    close(fd);
    if (o->tmp) unlinkat(o->dirfd, o->tmp, 0);
    cf_temp_untrack(o->slot);
    o->slot = -1;
    free(o->tmp);
    o->tmp = NULL;
    return write_error(ctx, o->path, err);
  }
  return CF_OK;
}

cf_status cf_out_open(cf_context *ctx, const char *path, bool binary, cf_outfile *o) {
  struct stat sb, lsb;
  int fd = -1;
  *o = (cf_outfile){.path = path, .dirfd = AT_FDCWD, .slot = -1};
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
    fd = make_temp(AT_FDCWD, path, 0666, &o->tmp); /* as fopen's files */
    if (fd >= 0) o->slot = cf_temp_track(o->tmp, false); /* removed on a signal (temp.c) */
    /* an existing regular file keeps its permissions; a replaced symlink
     * does not lend its target's */
    if (fd >= 0 && lstat(path, &lsb) == 0 && S_ISREG(lsb.st_mode))
      (void)fchmod(fd, lsb.st_mode & 07777);
  }
  return out_fdopen(ctx, o, fd, binary);
}

/* (a cache's temporaries are not registered for signals: their names are
 * relative to dirfd, and a stray one in a private cache is harmless) */
cf_status cf_out_openat(cf_context *ctx, int dirfd, const char *name, cf_outfile *o) {
  *o = (cf_outfile){.path = name, .dirfd = dirfd, .slot = -1};
  return out_fdopen(ctx, o, make_temp(dirfd, name, 0600, &o->tmp), true);
}

cf_status cf_out_close(cf_context *ctx, cf_outfile *o, bool ok) {
  if (!o->f) return CF_OK;
  int err = 0;
  if (fflush(o->f) != 0 || ferror(o->f)) err = errno ? errno : EIO;
  /* the data reaches the disk before the name does */
  if (ok && !err && o->tmp && fsync(fileno(o->f)) != 0) err = errno;
  if (fclose(o->f) != 0 && !err) err = errno;
  o->f = NULL;
  if (ok && !err && o->tmp && renameat(o->dirfd, o->tmp, o->dirfd, o->path) != 0) err = errno;
  if ((!ok || err) && o->tmp) unlinkat(o->dirfd, o->tmp, 0);
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

/* ---- reading input files ---- */

/* What a file that is not a regular one is, for messages. */
static const char *kind_of(mode_t m) {
  return S_ISFIFO(m)   ? "a FIFO"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
         : S_ISSOCK(m) ? "a socket"
                       : "of another kind";
}

/* Whether a file of sb's kind may be read under flags; else why. */
static bool readable_kind(const struct stat *sb, unsigned flags, cf_status *st, char *why,
                          size_t len) {
  if (S_ISREG(sb->st_mode) || (S_ISFIFO(sb->st_mode) && (flags & CF_IN_FIFO))) return true;
  *st = CF_ERR_IO;
  if (S_ISDIR(sb->st_mode))
    snprintf(why, len, "is a directory");
  else
    snprintf(why, len, "not a regular file (%s)", kind_of(sb->st_mode));
  return false;
}

/* The descriptor for reading path: stat first, so that a FIFO or device is
 * refused before any open; then open O_NONBLOCK (a FIFO swapped in after the
 * stat does not block the open either) and check the descriptor itself.
 * A regular file comes back blocking. -1 with *st and why set on failure;
 * -1 with *st CF_OK for a missing CF_IN_OPTIONAL file. */
static int open_in(const char *path, unsigned flags, cf_status *st, char *why, size_t len) {
  struct stat sb;
  *st = CF_OK;
  if (stat(path, &sb) == 0 && !readable_kind(&sb, flags, st, why, len)) return -1;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT && (flags & CF_IN_OPTIONAL)) return -1;
    *st = CF_ERR_IO;
    snprintf(why, len, "cannot open: %s", strerror(errno));
    return -1;
  }
  if (fstat(fd, &sb) != 0) {
    *st = CF_ERR_IO;
    snprintf(why, len, "cannot read: %s", strerror(errno));
    close(fd);
    return -1;
  }
  if (!readable_kind(&sb, flags, st, why, len)) {
    close(fd);
    return -1;
  }
  if (S_ISREG(sb.st_mode)) (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

/* Report why through ctx, naming path, led by what. */
static cf_status in_error(cf_context *ctx, cf_status st, const char *path, const char *what,
                          const char *why) {
  return cf_error(ctx, st, path, 0, "%s%s%s", what ? what : "", what ? ": " : "", why);
}

cf_status cf_in_open(cf_context *ctx, const char *path, const char *what, unsigned flags, int *fd) {
  char why[512];
  cf_status st;
  *fd = open_in(path, flags, &st, why, sizeof why);
  return st ? in_error(ctx, st, path, what, why) : CF_OK;
}

/* All of fd, at most max bytes: an oversized regular file is refused by its
 * size before a byte is read, a stream once it passes max. */
static cf_status read_all(int fd, size_t max, char **data, size_t *size, char *why, size_t len) {
  struct stat sb;
  if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size > max) {
    snprintf(why, len, "file is %lld bytes, above the limit of %zu", (long long)sb.st_size, max);
    return CF_ERR_INVALID;
  }
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap + 1);
  for (;;) {
    if (!buf) {
      snprintf(why, len, "out of memory");
      return CF_ERR_NO_MEMORY;
    }
    if (n == cap) {
      if (cap > max) {
        free(buf);
        snprintf(why, len, "file is larger than the limit of %zu bytes", max);
        return CF_ERR_INVALID;
      }
      /* grow to at most one byte past the limit: that byte proves the stream
       * is too long without reading (and holding) twice the limit */
      cap = cap > max / 2 ? max + 1 : cap * 2;
      char *nb = realloc(buf, cap + 1);
      if (!nb) free(buf);
      buf = nb;
      continue;
    }
    ssize_t r = read(fd, buf + n, cap - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == EAGAIN) { /* standard input left non-blocking by another */
      (void)poll(&(struct pollfd){.fd = fd, .events = POLLIN}, 1, -1);
      continue;
    }
    if (r < 0) {
      free(buf);
      snprintf(why, len, "read error: %s", strerror(errno));
      return CF_ERR_IO;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  buf[n] = 0;
  *data = buf;
  *size = n;
  return CF_OK;
}

/* cf_read_file's work, the message in why. */
static cf_status read_file(const char *path, size_t max, unsigned flags, char **data,
                           size_t *size, char *why, size_t len) {
  *data = NULL;
  *size = 0;
  if ((flags & CF_IN_STDIN) && strcmp(path, "-") == 0) {
    struct stat sb;
    if (fstat(STDIN_FILENO, &sb) == 0 && S_ISDIR(sb.st_mode)) {
      snprintf(why, len, "is a directory");
      return CF_ERR_IO;
    }
    return read_all(STDIN_FILENO, max, data, size, why, len);
  }
  cf_status st;
  int fd = open_in(path, flags & CF_IN_OPTIONAL, &st, why, len);
  if (fd < 0) return st;
  st = read_all(fd, max, data, size, why, len);
  close(fd);
  return st;
}

cf_status cf_read_file(cf_context *ctx, const char *path, const char *what, size_t max,
                       unsigned flags, char **data, size_t *size) {
  char why[512];
  cf_status st = read_file(path, max, flags, data, size, why, sizeof why);
  if (!st) return CF_OK;
  bool in = (flags & CF_IN_STDIN) && strcmp(path, "-") == 0;
  return in_error(ctx, st, in ? CF_STDIN_NAME : path, what, why);
}

bool cf_read_file_msg(const char *path, size_t max, unsigned flags, char **data, size_t *size,
                      char *why, size_t len) {
  return read_file(path, max, flags, data, size, why, len) == CF_OK;
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
    if (r < 0 && errno == EAGAIN && deadline <= 0) /* a non-blocking descriptor: wait */
      (void)poll(&(struct pollfd){.fd = fd, .events = POLLIN}, 1, -1);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    got += (size_t)r;
  }
  return (ssize_t)got;
}
