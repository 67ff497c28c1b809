/* transports/shm_pages.c - the memory of the shm world's heaps: in 2 MiB
 * pages where Linux gives shared memory huge pages.
 *
 * The heaps are shared memory (shmem), and shmem gets transparent huge
 * pages only as /sys/kernel/mm/transparent_hugepage/shmem_enabled says,
 * which Debian leaves at `never` while anonymous memory gets them on
 * madvise (the threads world's buffers: cpu.c). With 4 KiB pages every
 * 4 KiB of the 2n buffers an AllReduce walks costs a TLB miss: that alone
 * made the shm world 1.5-3.3x slower than the threads world at 16-64 MiB
 * (bench allreduce --algo rsag, 2 ranks; the threads world with its
 * madvise made a no-op ran at the shm world's speed). So: with `advise`,
 * `within_size`, `always` or `force`, a memfd advised MADV_HUGEPAGE; with
 * `never`, a file on a tmpfs of our own mounted huge=within_size, which the
 * setting does not govern; a tmpfs can be mounted only in a mount
 * namespace of one's own, so a child made for it (fork, then new user and
 * mount namespaces) mounts it, opens the file, unlinks it and hands the
 * descriptor back over a socket pair before it exits; the file lives as
 * long as a mapping of it, exactly as a memfd, and no other process ever
 * sees the mount. Where namespaces are refused (a container's seccomp), or
 * with `deny`, or COLLFUSE_SHM_HUGE=0: a plain memfd in 4 KiB pages.
 * The same memory backs cf_shm_memory's files (the caller's memory to
 * register, in 2 MiB pages too: shm_regions.c says why).
 * hugetlbfs (MFD_HUGETLB) is not tried: it needs pages an administrator
 * reserved, and a heap that outgrows them dies of SIGBUS.
 */
#define _GNU_SOURCE
#include "transports.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* The word in brackets of shmem_enabled: 'n'ever, 'd'eny, 'a' (a setting
 * under which MADV_HUGEPAGE gets huge pages), '?' unreadable. */
static char shmem_thp(void) {
  char b[128] = "";
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "r");
  if (!f) return '?';
  if (!fgets(b, sizeof b, f)) b[0] = 0;
  fclose(f);
  const char *at = strchr(b, '[');
  return !at ? '?' : at[1] == 'n' ? 'n' : at[1] == 'd' ? 'd' : 'a';
}

static bool put_file(const char *path, const char *text) { /* async-signal-safe */
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = write(fd, text, strlen(text)) == (ssize_t)strlen(text);
  close(fd);
  return ok;
}

/* The child's part: only system calls (its parent may have threads). */
static int tmpfs_child(int sock, const char *opts, const char *uid_map, const char *gid_map,
                       const char *name) {
  int fd = -1;
  bool ns = unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0 && put_file("/proc/self/setgroups", "deny") &&
            put_file("/proc/self/uid_map", uid_map) && put_file("/proc/self/gid_map", gid_map);
  if (!ns) ns = unshare(CLONE_NEWNS) == 0; /* a root of a container without user namespaces */
  static const char *const dirs[] = {"/tmp", "/dev/shm", "/mnt"};
  if (ns && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0)
    for (int i = 0; i < 3 && fd < 0; i++) {
      if (mount("collfuse", dirs[i], "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts) != 0) continue;
      fd = openat(open(dirs[i], O_PATH | O_DIRECTORY | O_CLOEXEC), name,
                  O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    }
  char one = fd >= 0;
  union {
    char b[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } u;
  struct iovec iov = {&one, 1};
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
  if (fd >= 0) {
    mh.msg_control = u.b;
    mh.msg_controllen = sizeof u.b;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof fd);
  }
  return sendmsg(sock, &mh, MSG_NOSIGNAL) == 1 ? 0 : 1;
}

/* An unlinked file of bytes named name on a tmpfs of our own in 2 MiB
 * pages, else -1. within_size, not always: the pages past the last whole
 * 2 MiB of the file are 4 KiB pages, where `always` gives the file's tail a
 * huge page of its own (cf_shm_memory's files are a DDP bucket's size: up
 * to 2 MiB of resident memory more for each); a heap is sparse and as large
 * as the host's memory, in 2 MiB pages either way. */
static int huge_tmpfs_fd(size_t bytes, const char *name) {
  char opts[96], uid_map[48], gid_map[48];
  snprintf(opts, sizeof opts, "huge=within_size,mode=0700,size=%zuk",
           bytes / 1024 + CF_SHM_HUGE_PAGE / 1024);
  snprintf(uid_map, sizeof uid_map, "0 %u 1", (unsigned)geteuid());
  snprintf(gid_map, sizeof gid_map, "0 %u 1", (unsigned)getegid());
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    _exit(tmpfs_child(sv[1], opts, uid_map, gid_map, name));
  }
  close(sv[1]);
  int fd = -1;
  if (pid > 0) {
    char one = 0;
    union {
      char b[CMSG_SPACE(sizeof(int))];
      struct cmsghdr align;
    } u;
    struct iovec iov = {&one, 1};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof u.b};
    ssize_t k;
    while ((k = recvmsg(sv[0], &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) {
    }
    struct cmsghdr *cm = k == 1 && one ? CMSG_FIRSTHDR(&mh) : NULL;
    if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
      memcpy(&fd, CMSG_DATA(cm), sizeof fd);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
  }
  close(sv[0]);
  if (fd >= 0 && ftruncate(fd, (off_t)bytes) != 0) {
    close(fd);
    fd = -1;
  }
  return fd;
}

int cf_shm_pages_make(size_t bytes, const char *name) {
  const char *knob = cf_env(CF_ENV_SHM_HUGE);
  bool huge = !(knob && strcmp(knob, "0") == 0);
  if (huge && shmem_thp() == 'n') {
    int fd = huge_tmpfs_fd(bytes, name);
    if (fd >= 0) return fd;
  }
  char memfd_name[64];
  snprintf(memfd_name, sizeof memfd_name, "collfuse-shm-%s", name);
  int fd = (int)syscall(SYS_memfd_create, memfd_name, MFD_CLOEXEC);
  if (fd >= 0 && ftruncate(fd, (off_t)bytes) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

size_t cf_shm_heap_cap(size_t bytes, int n) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return bytes;
  unsigned long vm = 0; /* pages mapped now */
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) {
    if (fscanf(f, "%lu", &vm) != 1) vm = 0;
    fclose(f);
  }
  size_t used = (size_t)vm * (size_t)sysconf(_SC_PAGESIZE), lim = (size_t)rl.rlim_cur;
  size_t share = (lim > used ? (lim - used) / 2 : 0) / (size_t)(n > 0 ? n : 1);
  size_t huge = CF_SHM_HUGE_PAGE;
  share = share > huge ? (share - huge) / huge * huge : 0; /* and its alignment */
  return share < bytes ? share : bytes;
}

/* Map a heap on a 2 MiB boundary (a huge page maps only there), advised
 * MADV_HUGEPAGE (with shmem_enabled=advise the advice is what gets them). */
void *cf_shm_heap_map(int fd, size_t bytes) {
  size_t huge = CF_SHM_HUGE_PAGE;
  char *r = mmap(NULL, bytes + huge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED) return MAP_FAILED;
  char *a = (char *)(((uintptr_t)r + huge - 1) & ~(uintptr_t)(huge - 1));
  void *p = mmap(a, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    munmap(r, bytes + huge);
    return MAP_FAILED;
  }
  if (a > r) munmap(r, (size_t)(a - r));
  if (r + bytes + huge > a + bytes) munmap(a + bytes, (size_t)(r + huge - a));
  const char *knob = cf_env(CF_ENV_SHM_HUGE);
  if (!(knob && strcmp(knob, "0") == 0)) {
    madvise(p, bytes, MADV_HUGEPAGE); /* advice */
    /* the heap's first 2 MiB in 4 KiB pages: the bounce buffers of small
     * messages lie there (shm.c), a few KiB that every rank touches in
     * every heap, which in a huge page cost 2 MiB of each rank's memory
     * per heap (a job whose buffers are all registered touches nothing
     * else of the heaps) */
    if (bytes > huge) madvise(p, huge, MADV_NOHUGEPAGE);
  }
  return p;
}

