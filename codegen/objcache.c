/* objcache.c - the on-disk cache of compiled kernels, so that a second
 * process compiles nothing.
 *
 * One file per kernel and target: DIR/NAME-HASH.o, HASH covering the cache
 * format, the LLVM version, the target (triple, CPU, features) and the
 * generator (CF_GENERATOR_HASH, CMake's hash of its sources), so different
 * machines, LLVM builds or collfuse builds sharing a home directory never
 * collide.
 * The file is an 80-byte little-endian header followed by the object file:
 *
 *   0 magic "CFKOBJ\0\n"   8 u32 format      12 u32 header size (80)
 *  16 u32 LLVM major/minor/patch (16, 20, 24)
 *  28 u32 kind, dtype, red, arity (28..43)  44 u32 outs | stream << 16
 *  48 u64 target and generator hash          56 u64 payload size
 *  64 u64 payload FNV-1a   72 u64 FNV-1a of bytes 0..71
 *
 * Anything that does not match (truncated, flipped byte, other LLVM or
 * target, other key) is a miss and the kernel is rebuilt and rewritten.
 * Writes go to a temporary file renamed over the entry, so readers see the
 * old file or the new one, never half of one; no fsync, since a torn file
 * after a crash fails its checks and is rebuilt.
 */
#define CF_CODEGEN_INTERNAL
#include "codegen.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef CF_GENERATOR_HASH
#error "CF_GENERATOR_HASH: the build's hash of the kernel generator's sources (CMakeLists.txt)"
#endif

#define HDR_SIZE 80
#define FORMAT 8 /* the header's layout and meaning; 7: the generator's hash in the target
                    hash; 8: the stream flag beside outs */
#define MAX_PAYLOAD ((size_t)64 << 20)
static const char magic[8] = {'C', 'F', 'K', 'O', 'B', 'J', '\0', '\n'};

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}
static uint64_t get64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

/* The target (triple, CPU, features, vector width) and the generator that
 * compiled for it: a kernel from other generator sources is a miss. */
static uint64_t target_hash(const cf_codegen_target *t) {
  uint64_t h = cf_fnv1a(CF_FNV_SEED, t->triple, strlen(t->triple) + 1);
  h = cf_fnv1a(h, t->cpu, strlen(t->cpu) + 1);
  h = cf_fnv1a(h, t->features, strlen(t->features) + 1);
  unsigned char vb[12];
  put32(vb, (uint32_t)t->vector_bits);
  put64(vb + 4, (uint64_t)CF_GENERATOR_HASH);
  return cf_fnv1a(h, vb, sizeof vb);
}

static void llvm_version(uint32_t v[3]) {
  unsigned a, b, c;
  LLVMGetVersion(&a, &b, &c);
  v[0] = a, v[1] = b, v[2] = c;
}

void cf_objcache_open(cf_objcache *oc) {
  memset(oc, 0, sizeof *oc);
  const char *env = getenv("COLLFUSE_CACHE");
  if (env &&
      (!strcmp(env, "off") || !strcmp(env, "0") || !strcmp(env, "no") || !strcmp(env, "false")))
    return;
  int n;
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (env && env[0] == '/')
    n = snprintf(oc->dir, sizeof oc->dir, "%s", env);
  else if (xdg && xdg[0] == '/') /* XDG: relative values are to be ignored */
    n = snprintf(oc->dir, sizeof oc->dir, "%s/collfuse", xdg);
  else if (home && home[0] == '/')
    n = snprintf(oc->dir, sizeof oc->dir, "%s/.cache/collfuse", home);
  else
    return;
  oc->enabled = n > 0 && (size_t)n < sizeof oc->dir - 128;
}

bool cf_objcache_path(const cf_objcache *oc, const cf_codegen_target *t, const cf_kernel_key *key,
                      char *buf, size_t len) {
  char name[64];
  uint32_t v[3];
  llvm_version(v);
  unsigned char vb[16];
  put32(vb, FORMAT);
  put32(vb + 4, v[0]);
  put32(vb + 8, v[1]);
  put32(vb + 12, v[2]);
  uint64_t h = cf_fnv1a(target_hash(t), vb, sizeof vb);
  int n = snprintf(buf, len, "%s/%s-%016llx.o", oc->dir, cf_kernel_name(key, name, sizeof name),
                   (unsigned long long)h);
  return n > 0 && (size_t)n < len;
}

static void header(unsigned char *h, const cf_codegen_target *t, const cf_kernel_key *key,
                   const void *data, size_t size) {
  uint32_t v[3];
  llvm_version(v);
  memset(h, 0, HDR_SIZE);
  memcpy(h, magic, 8);
  put32(h + 8, FORMAT);
  put32(h + 12, HDR_SIZE);
  for (int i = 0; i < 3; i++)
    put32(h + 16 + 4 * i, v[i]);
  put32(h + 28, (uint32_t)key->kind);
  put32(h + 32, (uint32_t)key->dtype);
  put32(h + 36, (uint32_t)key->red);
  put32(h + 40, (uint32_t)key->arity);
  put32(h + 44, (uint32_t)key->outs | (uint32_t)key->stream << 16); /* destinations, stream */
  put64(h + 48, target_hash(t));
  put64(h + 56, size);
  put64(h + 64, cf_fnv1a(CF_FNV_SEED, data, size));
  put64(h + 72, cf_fnv1a(CF_FNV_SEED, h, 72));
}

/* Why a file is not a valid entry for (t, key), or NULL when it is. */
static const char *check(const unsigned char *f, size_t size, const cf_codegen_target *t,
                         const cf_kernel_key *key) {
  if (size < HDR_SIZE) return "truncated header";
  if (memcmp(f, magic, 8)) return "bad magic";
  if (get64(f + 72) != cf_fnv1a(CF_FNV_SEED, f, 72)) return "header checksum mismatch";
  if (get32(f + 8) != FORMAT || get32(f + 12) != HDR_SIZE) return "other cache format";
  uint32_t v[3];
  llvm_version(v);
  for (int i = 0; i < 3; i++)
    if (get32(f + 16 + 4 * i) != v[i]) return "built by another LLVM version";
  if (get32(f + 28) != (uint32_t)key->kind || get32(f + 32) != (uint32_t)key->dtype ||
      get32(f + 36) != (uint32_t)key->red || get32(f + 40) != (uint32_t)key->arity ||
      get32(f + 44) != ((uint32_t)key->outs | (uint32_t)key->stream << 16))
    return "holds another kernel";
  if (get64(f + 48) != target_hash(t)) return "built for another target or by another generator";
  if (get64(f + 56) != size - HDR_SIZE) return "payload truncated or extended";
  if (get64(f + 64) != cf_fnv1a(CF_FNV_SEED, f + HDR_SIZE, size - HDR_SIZE))
    return "payload checksum mismatch";
  return NULL;
}

bool cf_objcache_load(cf_context *ctx, const cf_objcache *oc, const cf_codegen_target *t,
                      const cf_kernel_key *key, void **data, size_t *size) {
  *data = NULL;
  *size = 0;
  char path[4352];
  if (!oc->enabled || !cf_objcache_path(oc, t, key, path, sizeof path)) return false;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false; /* not cached yet */
  unsigned char *buf = NULL;
  const char *why = NULL;
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    why = "not a regular file";
    goto fail;
  }
  if ((uint64_t)sb.st_size > MAX_PAYLOAD + HDR_SIZE) {
    why = "too large";
    goto fail;
  }
  size_t n = (size_t)sb.st_size, got = 0;
  buf = malloc(n ? n : 1);
  if (!buf) {
    why = "out of memory";
    goto fail;
  }
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  if ((why = check(buf, got, t, key)) != NULL) goto fail;
  close(fd);
  /* the caller gets the payload alone */
  memmove(buf, buf + HDR_SIZE, got - HDR_SIZE);
  *data = buf;
  *size = got - HDR_SIZE;
  return true;
fail:
  cf_log(ctx, CF_LOG_INFO, "%s: stale kernel cache entry (%s); rebuilding", path, why);
  free(buf);
  close(fd);
  return false;
}

static bool mkdir_p(char *dir) {
  for (char *p = dir + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    int r = mkdir(dir, 0700);
    *p = '/';
    if (r != 0 && errno != EEXIST) return false;
  }
  return mkdir(dir, 0700) == 0 || errno == EEXIST;
}


bool cf_objcache_store(cf_context *ctx, const cf_objcache *oc, const cf_codegen_target *t,
                       const cf_kernel_key *key, const void *data, size_t size) {
  char path[4352], dir[sizeof oc->dir];
  if (!oc->enabled || size > MAX_PAYLOAD || !cf_objcache_path(oc, t, key, path, sizeof path))
    return false;
  memcpy(dir, oc->dir, sizeof dir);
  if (!mkdir_p(dir)) {
    cf_log(ctx, CF_LOG_WARN, "%s: cannot create the kernel cache directory: %s", oc->dir,
           strerror(errno));
    return false;
  }
  /* the writer every output uses: readers of the cache see whole entries */
  unsigned char h[HDR_SIZE];
  header(h, t, key, data, size);
  cf_outfile o;
  bool ok = cf_out_open(ctx, path, true, &o) == CF_OK;
  if (ok) {
    errno = 0;
    bool wrote = fwrite(h, 1, sizeof h, o.f) == sizeof h && fwrite(data, 1, size, o.f) == size;
    int err = errno ? errno : EIO;
    ok = cf_out_close(ctx, &o, wrote) == CF_OK;
    if (ok && !wrote) {
      cf_error(ctx, CF_ERR_IO, path, 0, "cannot write: %s", strerror(err));
      ok = false;
    }
  }
  if (!ok) {
    /* a cache that cannot be written is no error of the caller's */
    cf_log(ctx, CF_LOG_WARN, "kernel cache entry not saved: %s", cf_errmsg(ctx));
    cf_clear_error(ctx);
  }
  return ok;
}
