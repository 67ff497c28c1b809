/* shm_version.c - ranks of different collfuse builds in one shm job fail at
 * once, naming the ranks and both layouts, instead of a join timeout.
 *
 *   collfuse_shm_version
 *
 * This process plays a rank of an older build (the control segment's
 * layout CFSHM4: start-up messages of the same size and prefix as now,
 * whose rank 0 closed a hello of another version without a word) against
 * a real rank of this build (the public API, in a child process), both
 * ways:
 *  - an old rank 1 joins this build's rank 0: rank 0's run fails with
 *    CF_ERR_USAGE naming rank 1, CFSHM4, its own layout and the job's
 *    socket, and the old rank gets the same text in the welcome it reads
 *    (its own magic echoed, ok 0);
 *  - this build's rank 1 joins an old rank 0, which reads its hello and
 *    closes: rank 1's run fails with CF_ERR_USAGE naming rank 0's pid and
 *    its own layout.
 * The join timeout is 120 s: a run that waited for it instead fails on its
 * message (and the test's alarm, at 200 s, ends a hang).
 * Prints one line per failure; exits 0 when both passed.
 */
#define _GNU_SOURCE
#include <collfuse/collfuse.h>

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CFSHM4 UINT64_C(0x344d48534643) /* "CFSHM4" */

/* The start-up messages as CFSHM4 has them (executor/transports/shm.c). */
typedef struct old_hello {
  uint64_t magic;
  int32_t rank, size, pid;
  char host_id[128], host_name[HOST_NAME_MAX + 1];
  uint64_t heap_bytes;
} old_hello;
typedef struct old_welcome {
  uint64_t magic, token, job;
  int32_t ok, code;
  char text[1024];
  int32_t pid[256];
  uint64_t ctl_bytes, heap_bytes;
} old_welcome;

static int fails;
#define FAIL(...)                                                                                  \
  do {                                                                                             \
    fails++;                                                                                       \
    fprintf(stderr, "shm_version: FAIL line %d: ", __LINE__);                                     \
    fprintf(stderr, __VA_ARGS__);                                                                  \
    fputc('\n', stderr);                                                                           \
  } while (0)

/* The job's socket, as the shm world names it: abstract, the uid and the
 * FNV-1a hash of the job's name. */
static socklen_t job_addr(struct sockaddr_un *a, const char *job, char *name, size_t len) {
  uint64_t h = UINT64_C(1469598103934665603);
  for (const char *s = job; *s; s++)
    h = (h ^ (unsigned char)*s) * UINT64_C(1099511628211);
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "collfuse-shm.%u.%016llx", (unsigned)getuid(),
                   (unsigned long long)h);
  snprintf(name, len, "@%s", a->sun_path + 1);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static bool full(int s, void *buf, size_t len, bool out) {
  for (size_t done = 0; done < len;) {
    ssize_t k = out ? send(s, (char *)buf + done, len - done, MSG_NOSIGNAL) : recv(s, (char *)buf + done, len - done, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    done += (size_t)k;
  }
  return true;
}

/* A real rank of this build: one AllReduce of job, rank me of 2; its
 * status, and its message into msg. */
static int real_rank(const char *job, int me, char *msg, size_t len) {
  cf_context *ctx = NULL;
  cf_graph *g = NULL;
  cf_options *o = NULL;
  cf_executable *e = NULL;
  int64_t count = 1000;
  float x[1000];
  for (int i = 0; i < 1000; i++) x[i] = (float)(i % 7) - 3.0f;
  if (cf_context_create(&ctx)) return -1;
  cf_status st = cf_graph_create(ctx, "version", 2, &g);
  if (!st) st = cf_graph_add_input(g, "x", "float32", &count, 1);
  if (!st) st = cf_graph_add_allreduce(g, "ar", "x", "sum", NULL, -1, -1);
  if (!st) st = cf_graph_add_output(g, "y", "ar");
  if (!st) st = cf_options_create(ctx, &o);
  if (!st) st = cf_options_set(o, "ranks", "2");
  if (!st) st = cf_options_set(o, "backend", "shm");
  if (!st) st = cf_options_set(o, "job", job);
  if (!st) st = cf_options_set(o, "timeout", "120");
  if (!st) st = cf_executable_create(g, o, &e);
  if (!st) {
    const void *in[1] = {x};
    void *out[1] = {x};
    st = cf_executable_run_rank(e, me, in, out);
  }
  snprintf(msg, len, "%s", cf_context_errmsg(ctx) ? cf_context_errmsg(ctx) : "");
  cf_executable_destroy(e);
  cf_options_destroy(o);
  cf_graph_destroy(g);
  cf_context_destroy(ctx);
  return (int)st;
}

static bool has_all(const char *msg, const char *const *want) {
  for (; *want; want++)
    if (!strstr(msg, *want)) return false;
  return true;
}

/* The real rank in a child: exits 0 when it failed with CF_ERR_USAGE and a
 * message holding every string of want. */
static pid_t start_real(const char *job, int me, const char *const *want) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  alarm(200);
  char msg[2048];
  int st = real_rank(job, me, msg, sizeof msg);
  if (st != CF_ERR_USAGE || !has_all(msg, want)) {
    fprintf(stderr, "shm_version: FAIL: rank %d of this build: status %d, message '%s'\n", me, st, msg);
    _exit(1);
  }
  printf("shm_version: rank %d of this build: %s\n", me, msg);
  fflush(stdout);
  _exit(0);
}

static void wait_real(pid_t pid, const char *what) {
  int ws = 0;
  if (pid < 0 || waitpid(pid, &ws, 0) != pid || !WIFEXITED(ws) || WEXITSTATUS(ws))
    FAIL("%s: this build's rank failed the check (status 0x%x)", what, ws);
}

/* An old rank 1 against this build's rank 0. */
static void old_joiner(void) {
  char job[64], sock[128], pid0[32];
  snprintf(job, sizeof job, "version-a-%d", (int)getpid());
  struct sockaddr_un a;
  socklen_t al = job_addr(&a, job, sock, sizeof sock);
  const char *want[] = {"rank 1 (pid ", "its shm layout is CFSHM4", "rank 0's (pid ", "is CFSHM6", sock,
                        "one build", NULL};
  pid_t real = start_real(job, 0, want);
  snprintf(pid0, sizeof pid0, "(pid %d)", (int)real);
  int s = -1;
  for (int i = 0; i < 20000 && s < 0; i++) { /* until rank 0 listens (200 s at most) */
    s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s >= 0 && connect(s, (struct sockaddr *)&a, al) != 0) {
      close(s);
      s = -1;
      nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
  }
  if (s < 0) {
    FAIL("an old rank 1: cannot connect to this build's rank 0 at %s", sock);
  } else {
    old_hello h = {.magic = CFSHM4, .rank = 1, .size = 2, .pid = (int32_t)getpid(), .heap_bytes = 1 << 30};
    int fd = memfd_create("old-heap", MFD_CLOEXEC);
    char one = 0;
    struct iovec iov = {&h, sizeof h};
    union {
      char b[CMSG_SPACE(sizeof(int))];
      struct cmsghdr align;
    } u;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof u.b};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof fd);
    (void)one;
    old_welcome wel;
    if (sendmsg(s, &mh, MSG_NOSIGNAL) != (ssize_t)sizeof h)
      FAIL("an old rank 1: hello not sent: %s", strerror(errno));
    else if (!full(s, &wel, sizeof wel, false))
      FAIL("an old rank 1: no welcome came back (this build's rank 0 closed without an answer)");
    else {
      wel.text[sizeof wel.text - 1] = 0;
      if (wel.magic != CFSHM4 || wel.ok != 0 || !has_all(wel.text, want) || !strstr(wel.text, pid0))
        FAIL("an old rank 1: welcome magic 0x%llx ok %d text '%s'; want its own magic, ok 0, and a "
             "text naming both layouts and rank 0 %s",
             (unsigned long long)wel.magic, wel.ok, wel.text, pid0);
    }
    close(fd);
    close(s);
  }
  wait_real(real, "an old rank 1");
}

/* This build's rank 1 against an old rank 0. */
static void old_host(void) {
  char job[64], sock[128], pid0[32];
  snprintf(job, sizeof job, "version-b-%d", (int)getpid());
  snprintf(pid0, sizeof pid0, "rank 0 (pid %d)", (int)getpid());
  struct sockaddr_un a;
  socklen_t al = job_addr(&a, job, sock, sizeof sock);
  int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (ls < 0 || bind(ls, (struct sockaddr *)&a, al) != 0 || listen(ls, 4) != 0) {
    FAIL("an old rank 0: cannot listen at %s: %s", sock, strerror(errno));
    return;
  }
  const char *want[] = {pid0, "closed the connection on rank 1's hello", "older than this rank's CFSHM6",
                        sock, "one build", NULL};
  pid_t real = start_real(job, 1, want);
  int s = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
  old_hello h;
  if (s < 0 || !full(s, &h, sizeof h, false))
    FAIL("an old rank 0: no hello from this build's rank 1");
  else if (h.magic == CFSHM4)
    FAIL("an old rank 0: this build's rank 1 says it is CFSHM4");
  if (s >= 0) close(s); /* as CFSHM4's rank 0 did with a hello it did not know */
  wait_real(real, "an old rank 0");
  close(ls);
}

int main(void) {
  alarm(400);
  old_joiner();
  old_host();
  if (!fails) printf("shm_version: ranks of another layout refused at once, both ways\n");
  return fails ? 1 : 0;
}
