/* objcache.c - the on-disk cache of compiled kernels, so that a second
 * process compiles nothing.
 *
 * One file per kernel and target: DIR/NAME-HASH.o, HASH covering the cache
 * format, the LLVM version, the target (triple, CPU, features) and the
 * generator (CF_GENERATOR_HASH, CMake's hash of its sources), so different
 * machines, LLVM builds or collfuse builds sharing a home directory never
 * collide.
 * The file is a 96-byte little-endian header followed by the object file:
 *
 *   0 magic "CFKOBJ\0\n"   8 u32 format      12 u32 header size (96)
 *  16 u32 LLVM major/minor/patch (16, 20, 24)
 *  28 u32 kind, dtype, red, arity (28..43)  44 u32 outs | stream << 16
 *  48 u64 target and generator hash          56 u64 payload size
 *  64 HMAC-SHA256 of the header (these 32 bytes zero) and the payload
 *
 * The objects are code this process runs, so the cache is trusted only
 * when no one else could have written it: the directory is opened
 * O_NOFOLLOW and every entry relative to that descriptor (O_NOFOLLOW, and
 * O_NONBLOCK so a FIFO cannot block the open), and the directory and each
 * entry must be owned by the effective uid and writable by no group or
 * other, entries regular files. Anything else turns the cache off for the
 * context with one warning (kernels are built in memory). Entries are
 * authenticated with a per-user secret, DIR/key (32 random bytes, mode
 * 0600, created O_EXCL and linked into place whole): an entry someone made
 * without the key - a recomputed checksum, an entry copied from another
 * user's cache - fails its MAC. HMAC-SHA256 is OpenSSL libcrypto's (never
 * a primitive of our own); libcrypto is on any system with python3, which
 * the package depends on already.
 *
 * Anything that does not match (truncated, flipped byte, other LLVM or
 * target, other key) is a miss and the kernel is rebuilt and rewritten.
 * Writes go to a temporary file renamed over the entry (cf_out_openat), so
 * readers see the old file or the new one, never half of one.
 */
#include "codegen.h"

#include <errno.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(CF_LLVM_VERSION_MAJOR) || !defined(CF_LLVM_VERSION_STRING)
#error "CF_LLVM_VERSION_*: the LLVM the module links (llvm-config --version, CMakeLists.txt)"
#endif
#ifndef CF_GENERATOR_HASH
#error "CF_GENERATOR_HASH: the build's hash of the kernel generator's sources (CMakeLists.txt)"
#endif

#define HDR_SIZE 96
#define MAC_AT 64
#define FORMAT 9 /* the header's layout and meaning; 7: the generator's hash in the target
                    hash; 8: the stream flag beside outs; 9: HMAC-SHA256 for the checksums */
#define MAX_PAYLOAD ((size_t)64 << 20)
#define KEY_NAME "key"
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

/* The LLVM version the module links, as CMake found it (llvm-config): the
 * module checks at load that libLLVM is that one (load.c's abi covers the
 * build), and libcollfuse needs it without loading LLVM. */
static void llvm_version(uint32_t v[3]) {
  v[0] = CF_LLVM_VERSION_MAJOR, v[1] = CF_LLVM_VERSION_MINOR, v[2] = CF_LLVM_VERSION_PATCH;
}

/* ---------------- trust ---------------- */

/* Why a file of sb may not be trusted, or NULL: it is ours and no one
 * else's to write. */
static const char *untrusted(const struct stat *sb, char *buf, size_t len) {
  if (sb->st_uid != geteuid())
    snprintf(buf, len, "owned by uid %lu, not by this user (uid %lu)", (unsigned long)sb->st_uid,
             (unsigned long)geteuid());
  else if (sb->st_mode & (S_IWGRP | S_IWOTH))
    snprintf(buf, len, "writable by group or others (mode %04o)", (unsigned)(sb->st_mode & 07777));
  else
    return NULL;
  return buf;
}

/* What a file that is not a regular one is. */
static const char *kind_of(mode_t m) {
  return S_ISDIR(m)    ? "a directory"
         : S_ISLNK(m)  ? "a symbolic link"
         : S_ISFIFO(m) ? "a FIFO"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
         : S_ISSOCK(m) ? "a socket"
                       : "of another kind";
}

/* Turn the cache off for this context: one warning, then kernels are built
 * in memory (what names the file, why what is wrong with it). */
static void distrust(cf_context *ctx, cf_objcache *oc, const char *what, const char *why) {
  if (!oc->quiet)
    cf_log(ctx, CF_LOG_WARN,
           "kernel cache %s%s%s: %s; the cache is ignored and kernels are built in memory", oc->dir,
           what ? "/" : "", what ? what : "", why);
  if (oc->dirfd >= 0) close(oc->dirfd);
  oc->dirfd = -1;
  oc->enabled = false;
  OPENSSL_cleanse(oc->key, sizeof oc->key);
}

/* Open name in the cache directory for reading: never following a symlink,
 * never blocking on a FIFO, and only a regular file of ours. -1 with why
 * set (the cache is not to be trusted), or -1 with why[0] 0 and errno
 * ENOENT (no such entry). */
static int open_entry(const cf_objcache *oc, const char *name, struct stat *sb, char *why,
                      size_t len) {
  why[0] = '\0';
  int fd = openat(oc->dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP)
      snprintf(why, len, "is a symbolic link");
    else if (errno != ENOENT)
      snprintf(why, len, "cannot open: %s", strerror(errno));
    return -1;
  }
  const char *bad = NULL;
  char buf[128];
  if (fstat(fd, sb) != 0)
    snprintf(why, len, "cannot read: %s", strerror(errno));
  else if (!S_ISREG(sb->st_mode))
    snprintf(why, len, "not a regular file (%s)", kind_of(sb->st_mode));
  else if ((bad = untrusted(sb, buf, sizeof buf)))
    snprintf(why, len, "%s", bad);
  else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
    snprintf(why, len, "cannot read: %s", strerror(errno));
  if (why[0]) {
    close(fd);
    return -1;
  }
  return fd;
}

/* The key of an existing DIR/key: true, or false with why set (-1 with
 * errno ENOENT: there is none yet, why empty). */
static bool read_key(cf_objcache *oc, char *why, size_t len) {
  struct stat sb;
  int fd = open_entry(oc, KEY_NAME, &sb, why, len);
  if (fd < 0) return false;
  if (sb.st_mode & (S_IRWXG | S_IRWXO))
    snprintf(why, len, "mode %04o, not 0600: others could read the secret",
             (unsigned)(sb.st_mode & 07777));
  else if (sb.st_size != (off_t)sizeof oc->key ||
           cf_read_full(fd, oc->key, sizeof oc->key, 0) != (ssize_t)sizeof oc->key)
    snprintf(why, len, "not a key of %zu bytes", sizeof oc->key);
  close(fd);
  return why[0] == '\0';
}

/* A new secret as DIR/key: 32 random bytes written to a temporary created
 * O_EXCL with mode 0600, then linked to the name, so no process ever reads
 * half a key; a key another process linked first wins. */
static bool make_key(cf_context *ctx, cf_objcache *oc, char *why, size_t len) {
  unsigned char k[sizeof oc->key];
  if (RAND_bytes(k, (int)sizeof k) != 1) {
    snprintf(why, len, "no random bytes for a key");
    return false;
  }
  cf_outfile o;
  cf_status st = cf_out_openat(ctx, oc->dirfd, ".key", &o);
  bool ok = !st && fwrite(k, 1, sizeof k, o.f) == sizeof k && fflush(o.f) == 0 &&
            fsync(fileno(o.f)) == 0;
  int err = errno;
  OPENSSL_cleanse(k, sizeof k);
  if (!st) {
    fclose(o.f);
    if (ok && linkat(oc->dirfd, o.tmp, oc->dirfd, KEY_NAME, 0) != 0 && errno != EEXIST) {
      err = errno;
      ok = false;
    }
    unlinkat(oc->dirfd, o.tmp, 0);
    free(o.tmp);
  }
  if (st) {
    snprintf(why, len, "cannot create a key: %s", cf_errmsg(ctx));
    cf_clear_error(ctx);
    return false;
  }
  if (!ok) {
    snprintf(why, len, "cannot create a key: %s", strerror(err));
    return false;
  }
  return read_key(oc, why, len);
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

void cf_objcache_open(cf_context *ctx, cf_objcache *oc) { cf_objcache_open_as(ctx, oc, false); }

void cf_objcache_open_as(cf_context *ctx, cf_objcache *oc, bool quiet) {
  memset(oc, 0, sizeof *oc);
  oc->dirfd = -1;
  oc->quiet = quiet;
  const char *env = cf_env(CF_ENV_CACHE);
  if (env &&
      (!strcmp(env, "off") || !strcmp(env, "0") || !strcmp(env, "no") || !strcmp(env, "false")))
    return;
  int n;
  const char *xdg = cf_env(CF_ENV_XDG_CACHE), *home = cf_env(CF_ENV_HOME);
  if (env && env[0] == '/')
    n = snprintf(oc->dir, sizeof oc->dir, "%s", env);
  else if (xdg && xdg[0] == '/') /* XDG: relative values are to be ignored */
    n = snprintf(oc->dir, sizeof oc->dir, "%s/collfuse", xdg);
  else if (home && home[0] == '/')
    n = snprintf(oc->dir, sizeof oc->dir, "%s/.cache/collfuse", home);
  else
    return;
  if (n <= 0 || (size_t)n >= sizeof oc->dir - 128) return;
  oc->enabled = true;
  char why[256], buf[128];
  const char *bad;
  struct stat sb;
  char dir[sizeof oc->dir];
  memcpy(dir, oc->dir, sizeof dir);
  if (!mkdir_p(dir)) {
    snprintf(why, sizeof why, "cannot create the directory: %s", strerror(errno));
    distrust(ctx, oc, NULL, why);
    return;
  }
  oc->dirfd = open(oc->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (oc->dirfd < 0) {
    int err = errno;
    if (err == ELOOP || (err == ENOTDIR && lstat(oc->dir, &sb) == 0 && S_ISLNK(sb.st_mode)))
      snprintf(why, sizeof why, "is a symbolic link");
    else
      snprintf(why, sizeof why, "cannot open: %s", strerror(err));
    distrust(ctx, oc, NULL, why);
    return;
  }
  if (fstat(oc->dirfd, &sb) != 0) {
    snprintf(why, sizeof why, "cannot read: %s", strerror(errno));
    distrust(ctx, oc, NULL, why);
    return;
  }
  if ((bad = untrusted(&sb, buf, sizeof buf))) {
    distrust(ctx, oc, NULL, bad);
    return;
  }
  if (!read_key(oc, why, sizeof why) && (why[0] || !make_key(ctx, oc, why, sizeof why)))
    distrust(ctx, oc, KEY_NAME, why);
}

void cf_objcache_close(cf_objcache *oc) {
  if (oc->dirfd >= 0) close(oc->dirfd);
  oc->dirfd = -1;
  oc->enabled = false;
  OPENSSL_cleanse(oc->key, sizeof oc->key);
}

/* ---------------- entries ---------------- */

/* The entry's file name for key and t; false when it does not fit. */
static bool entry_name(uint64_t th, const cf_kernel_key *key, char *buf, size_t len) {
  char name[64];
  uint32_t v[3];
  llvm_version(v);
  unsigned char vb[16];
  put32(vb, FORMAT);
  put32(vb + 4, v[0]);
  put32(vb + 8, v[1]);
  put32(vb + 12, v[2]);
  uint64_t h = cf_fnv1a(th, vb, sizeof vb);
  int n = snprintf(buf, len, "%s-%016llx.o", cf_kernel_name(key, name, sizeof name),
                   (unsigned long long)h);
  return n > 0 && (size_t)n < len;
}

/* HMAC-SHA256 under oc's key of f[0..n) (a header and its payload) with
 * the MAC's own bytes taken as zero. */
static bool mac_at(const cf_objcache *oc, unsigned char *f, size_t n, size_t at,
                   unsigned char out[32]) {
  unsigned char keep[32];
  memcpy(keep, f + at, 32);
  memset(f + at, 0, 32);
  unsigned int len = 0;
  bool ok = HMAC(EVP_sha256(), oc->key, (int)sizeof oc->key, f, n, out, &len) && len == 32;
  memcpy(f + at, keep, 32);
  return ok;
}
static bool mac(const cf_objcache *oc, unsigned char *f, size_t n, unsigned char out[32]) {
  return mac_at(oc, f, n, MAC_AT, out);
}

static void header(unsigned char *h, uint64_t th, const cf_kernel_key *key, size_t size) {
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
  put64(h + 48, th);
  put64(h + 56, size);
}

/* Why a file is not a valid entry for (t, key), or NULL when it is. The
 * MAC is checked before anything the header says is believed. */
static const char *check(const cf_objcache *oc, unsigned char *f, size_t size, uint64_t th,
                         const cf_kernel_key *key) {
  if (size < HDR_SIZE) return "truncated header";
  if (memcmp(f, magic, 8)) return "bad magic";
  if (get32(f + 8) != FORMAT || get32(f + 12) != HDR_SIZE) return "other cache format";
  unsigned char m[32];
  if (!mac(oc, f, size, m)) return "cannot compute its MAC";
  if (CRYPTO_memcmp(m, f + MAC_AT, 32) != 0)
    return "MAC mismatch: damaged, or not written with this user's key";
  uint32_t v[3];
  llvm_version(v);
  for (int i = 0; i < 3; i++)
    if (get32(f + 16 + 4 * i) != v[i]) return "built by another LLVM version";
  if (get32(f + 28) != (uint32_t)key->kind || get32(f + 32) != (uint32_t)key->dtype ||
      get32(f + 36) != (uint32_t)key->red || get32(f + 40) != (uint32_t)key->arity ||
      get32(f + 44) != ((uint32_t)key->outs | (uint32_t)key->stream << 16))
    return "holds another kernel";
  if (get64(f + 48) != th) return "built for another target or by another generator";
  if (get64(f + 56) != size - HDR_SIZE) return "payload truncated or extended";
  return NULL;
}

bool cf_objcache_load(cf_context *ctx, cf_objcache *oc, const cf_codegen_target *t,
                      const cf_kernel_key *key, void **data, size_t *size) {
  return cf_objcache_load_hash(ctx, oc, target_hash(t), key, data, size);
}

bool cf_objcache_load_hash(cf_context *ctx, cf_objcache *oc, uint64_t th, const cf_kernel_key *key,
                           void **data, size_t *size) {
  *data = NULL;
  *size = 0;
  char name[128], why[256];
  if (!oc->enabled || !entry_name(th, key, name, sizeof name)) return false;
  struct stat sb;
  int fd = open_entry(oc, name, &sb, why, sizeof why);
  if (fd < 0) {
    if (why[0]) distrust(ctx, oc, name, why);
    return false; /* or not cached yet */
  }
  unsigned char *buf = NULL;
  const char *bad = NULL;
  if ((uint64_t)sb.st_size > MAX_PAYLOAD + HDR_SIZE) {
    bad = "too large";
    goto fail;
  }
  size_t n = (size_t)sb.st_size;
  if (!(buf = malloc(n ? n : 1))) {
    bad = "out of memory";
    goto fail;
  }
  ssize_t got = cf_read_full(fd, buf, n, 0);
  if (got < 0) {
    bad = "read error";
    goto fail;
  }
  if ((bad = check(oc, buf, (size_t)got, th, key)) != NULL) goto fail;
  close(fd);
  /* the caller gets the payload alone */
  memmove(buf, buf + HDR_SIZE, (size_t)got - HDR_SIZE);
  *data = buf;
  *size = (size_t)got - HDR_SIZE;
  return true;
fail:
  if (!oc->quiet)
    cf_log(ctx, CF_LOG_INFO, "%s/%s: stale kernel cache entry (%s); rebuilding", oc->dir, name,
           bad);
  free(buf);
  close(fd);
  return false;
}

/* MAC f[0..n) (a header at its start) into its MAC field at f + at and write it as
 * name, atomically; false with ctx's error set (or none: no MAC). */
static bool seal_write(cf_context *ctx, const cf_objcache *oc, const char *name, unsigned char *f,
                       size_t n, size_t at) {
  unsigned char m[32];
  bool ok = mac_at(oc, f, n, at, m);
  memcpy(f + at, m, sizeof m);
  /* the writer every output uses: readers of the cache see whole entries */
  cf_outfile o;
  if (ok && (ok = cf_out_openat(ctx, oc->dirfd, name, &o) == CF_OK)) {
    errno = 0;
    bool wrote = fwrite(f, 1, n, o.f) == n;
    int err = errno ? errno : EIO;
    ok = cf_out_close(ctx, &o, wrote) == CF_OK;
    if (ok && !wrote) {
      cf_error(ctx, CF_ERR_IO, name, 0, "cannot write: %s", strerror(err));
      ok = false;
    }
  }
  return ok;
}

bool cf_objcache_store(cf_context *ctx, const cf_objcache *oc, const cf_codegen_target *t,
                       const cf_kernel_key *key, const void *data, size_t size) {
  char name[128];
  uint64_t th = target_hash(t);
  if (!oc->enabled || size > MAX_PAYLOAD || !entry_name(th, key, name, sizeof name)) return false;
  unsigned char *f = malloc(HDR_SIZE + size);
  if (!f) return false;
  header(f, th, key, size);
  memcpy(f + HDR_SIZE, data, size);
  bool ok = seal_write(ctx, oc, name, f, HDR_SIZE + size, MAC_AT);
  free(f);
  if (!ok) {
    /* a cache that cannot be written is no error of the caller's */
    cf_log(ctx, CF_LOG_WARN, "kernel cache %s: entry not saved: %s", oc->dir,
           cf_errmsg(ctx)[0] ? cf_errmsg(ctx) : "cannot compute its MAC");
    cf_clear_error(ctx);
  }
  return ok;
}

/* ---------------- the host's target record ----------------
 *
 * An entry's name and header hold the target hash, which takes in what
 * LLVM detects on this CPU (its name and features): libcollfuse cannot
 * compute it without loading LLVM. So when the module compiles for the
 * host it also writes DIR/host-KEY.t, KEY a hash of what the CPU and the
 * kernel report (the CPUID leaves LLVM's detection reads, XCR0, AT_HWCAP
 * and AT_HWCAP2), the generator's hash and the LLVM version: an 80-byte
 * record of the host's target hash, sealed like an entry:
 *
 *   0 magic "CFKTGT\0\n"  8 u32 format  12 u32 size (80)  16 u64 KEY
 *  24 u64 target hash       32 zero (16)  48 HMAC-SHA256 (these 32 bytes zero)
 *
 * The same CPUID, XCR0 and hwcaps make LLVM detect the same CPU, so a record
 * found under KEY names the entries the module would load here. */
#define REC_SIZE 80
#define REC_MAC_AT 48
static const char rec_magic[8] = {'C', 'F', 'K', 'T', 'G', 'T', '\0', '\n'};

bool cf_objcache_host_key(uint64_t *out) {
#if defined(__x86_64__)
  uint32_t r[4], max, maxx;
  if (!__get_cpuid(0, &max, &r[1], &r[2], &r[3])) return false;
  r[0] = max; /* and the vendor */
  uint64_t h = cf_fnv1a(CF_FNV_SEED, r, sizeof r);
  /* leaf 1 without EBX (the APIC id and CLFLUSH size differ per core) */
  static const uint32_t leaves[][2] = {{1, 0},   {7, 0},   {7, 1},   {0xd, 0},
                                       {0xd, 1}, {0x14, 0}, {0x19, 0}, {0x24, 0}};
  for (size_t i = 0; i < sizeof leaves / sizeof *leaves; i++) {
    memset(r, 0, sizeof r);
    if (leaves[i][0] <= max) __cpuid_count(leaves[i][0], leaves[i][1], r[0], r[1], r[2], r[3]);
    if (leaves[i][0] == 1) r[1] = 0;
    h = cf_fnv1a(h, r, sizeof r);
  }
  __cpuid(0x80000000, maxx, r[1], r[2], r[3]);
  h = cf_fnv1a(h, &maxx, sizeof maxx);
  static const uint32_t ext[] = {0x80000001, 0x80000002, 0x80000003, 0x80000004, 0x80000008};
  for (size_t i = 0; i < sizeof ext / sizeof *ext; i++) {
    memset(r, 0, sizeof r);
    if (ext[i] <= maxx) __cpuid_count(ext[i], 0, r[0], r[1], r[2], r[3]);
    h = cf_fnv1a(h, r, sizeof r);
  }
  uint32_t xcr0[2] = {0, 0};
  __cpuid(1, r[0], r[1], r[2], r[3]);
  if (r[2] & (1u << 27)) /* OSXSAVE: XGETBV reads what the OS enabled */
    __asm__ volatile("xgetbv" : "=a"(xcr0[0]), "=d"(xcr0[1]) : "c"(0));
  h = cf_fnv1a(h, xcr0, sizeof xcr0);
  uint64_t hw[2] = {getauxval(AT_HWCAP), getauxval(AT_HWCAP2)};
  h = cf_fnv1a(h, hw, sizeof hw);
  uint64_t g = (uint64_t)CF_GENERATOR_HASH, fmt = FORMAT;
  h = cf_fnv1a(h, &g, sizeof g);
  h = cf_fnv1a(h, &fmt, sizeof fmt);
  h = cf_fnv1a(h, CF_LLVM_VERSION_STRING, sizeof CF_LLVM_VERSION_STRING);
  *out = h;
  return true;
#else
  (void)out;
  return false; /* no record: such hosts load the module as before */
#endif
}

static bool record_name(uint64_t hk, char *buf, size_t len) {
  int n = snprintf(buf, len, "host-%016llx.t", (unsigned long long)hk);
  return n > 0 && (size_t)n < len;
}

/* Read the record name for host key hk: NULL with *th, or why not: "" when
 * there is none, why itself when the file is not to be trusted (distrust). */
static const char *load_record(const cf_objcache *oc, uint64_t hk, const char *name, uint64_t *th,
                               char *why, size_t len) {
  struct stat sb;
  *th = 0;
  int fd = open_entry(oc, name, &sb, why, len);
  if (fd < 0) return why[0] ? why : "";
  unsigned char f[REC_SIZE + 1];
  ssize_t got = cf_read_full(fd, f, sizeof f, 0);
  close(fd);
  unsigned char m[32];
  if (got != REC_SIZE || memcmp(f, rec_magic, 8) || get32(f + 8) != FORMAT ||
      get32(f + 12) != REC_SIZE)
    return "not a host record of this format";
  if (!mac_at(oc, f, REC_SIZE, REC_MAC_AT, m) || CRYPTO_memcmp(m, f + REC_MAC_AT, 32) != 0)
    return "MAC mismatch: damaged, or not written with this user's key";
  if (get64(f + 16) != hk) return "made for another host";
  *th = get64(f + 24);
  return NULL;
}

bool cf_objcache_store_host(cf_context *ctx, const cf_objcache *oc, const cf_codegen_target *t) {
  uint64_t hk;
  char name[64];
  if (!oc->enabled || !cf_objcache_host_key(&hk) || !record_name(hk, name, sizeof name))
    return false;
  uint64_t th = target_hash(t), have;
  char why[256];
  if (load_record(oc, hk, name, &have, why, sizeof why) == NULL && have == th)
    return true; /* there already */
  unsigned char f[REC_SIZE] = {0};
  memcpy(f, rec_magic, 8);
  put32(f + 8, FORMAT);
  put32(f + 12, REC_SIZE);
  put64(f + 16, hk);
  put64(f + 24, th);
  bool ok = seal_write(ctx, oc, name, f, REC_SIZE, REC_MAC_AT);
  if (!ok) {
    cf_log(ctx, CF_LOG_WARN, "kernel cache %s: host record not saved: %s", oc->dir,
           cf_errmsg(ctx)[0] ? cf_errmsg(ctx) : "cannot compute its MAC");
    cf_clear_error(ctx);
  }
  return ok;
}

bool cf_objcache_load_host(cf_context *ctx, cf_objcache *oc, uint64_t *th) {
  uint64_t hk;
  char name[64], why[256];
  if (!oc->enabled || !cf_objcache_host_key(&hk) || !record_name(hk, name, sizeof name))
    return false;
  const char *bad = load_record(oc, hk, name, th, why, sizeof why);
  if (bad == why) { /* not a regular file of ours */
    distrust(ctx, oc, name, why);
    return false;
  }
  if (bad && bad[0])
    cf_log(ctx, CF_LOG_INFO, "%s/%s: stale kernel cache record (%s); the LLVM module links",
           oc->dir, name, bad);
  return bad == NULL;
}
