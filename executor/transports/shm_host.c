/* transports/shm_host.c - which host each rank of a shm job is on, and
 * refusing a job whose ranks are on several.
 *
 * A rank's host identity is COLLFUSE_HOSTID when it is set (as NCCL_HOSTID
 * overrides NCCL's host hash: containers of one host that should not
 * share memory, or tests that play two hosts on one), else the host's name
 * and its boot id (two containers with one kernel have one boot id, two
 * machines the same name in a careless cluster). Ranks of one job compare
 * them at start-up and, when they differ, every rank stops with one
 * message naming each host and the ranks on it.
 *
 * The memory itself is handed over on a Unix socket of this host (shm.c),
 * which a rank on another host can never reach: it would wait for rank 0
 * until the timeout. So when the launcher gives an address every rank can
 * reach (COLLFUSE_RENDEZVOUS=host:port, else torchrun's MASTER_ADDR with
 * MASTER_PORT + 1: torch's own store holds MASTER_PORT), the ranks first
 * meet there over TCP: each sends rank 0 its rank, the job and its host
 * identity, and rank 0, once every rank has come, answers all of them with
 * the verdict. Nothing but identities crosses TCP; a connection that does
 * not speak the protocol or names another job is closed and ignored.
 */
#define _GNU_SOURCE
#include "transports.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HOST_MAGIC UINT64_C(0x54534f484643) /* "CFHOST" */

/* "hostid:" and COLLFUSE_HOSTID fit id, and COLLFUSE_HOSTID fits name */
#define HOSTID_MAX (sizeof ((cf_shm_host *)0)->name - 1)
_Static_assert(sizeof "hostid:" - 1 + HOSTID_MAX < sizeof ((cf_shm_host *)0)->id,
               "cf_shm_host's id holds \"hostid:\" and a whole COLLFUSE_HOSTID");

cf_status cf_shm_host_check(cf_context *ctx) {
  const char *over = cf_env(CF_ENV_HOSTID);
  if (over && strlen(over) > HOSTID_MAX)
    return cf_error(ctx, CF_ERR_USAGE, NULL, 0,
                    "--backend shm: COLLFUSE_HOSTID is %zu characters long: at most %zu (ranks "
                    "compare it whole)",
                    strlen(over), HOSTID_MAX);
  return CF_OK;
}

void cf_shm_host_id(cf_shm_host *h) {
  memset(h, 0, sizeof *h);
  /* a host's name has at most HOST_NAME_MAX bytes, and so fits h->name */
  char name[HOST_NAME_MAX + 1] = "?";
  if (gethostname(name, sizeof name) != 0) strcpy(name, "?");
  name[sizeof name - 1] = 0;
  const char *over = cf_env(CF_ENV_HOSTID);
  if (over && *over) {
    snprintf(h->id, sizeof h->id, "hostid:%s", over);
    snprintf(h->name, sizeof h->name, "%s", over);
    return;
  }
  char boot[64] = "?";
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (fgets(boot, sizeof boot, f)) boot[strcspn(boot, "\n")] = 0;
    fclose(f);
  }
  snprintf(h->id, sizeof h->id, "%.80s/%.40s", name, boot);
  snprintf(h->name, sizeof h->name, "%s", name);
}

bool cf_shm_one_host(int n, const cf_shm_host *hosts, char *text, size_t len) {
  int first[CF_MAX_WORLD], n_hosts = 0; /* a rank of each distinct host */
  for (int r = 0; r < n; r++) {
    int k = 0;
    while (k < n_hosts && strcmp(hosts[first[k]].id, hosts[r].id) != 0) k++;
    if (k == n_hosts) first[n_hosts++] = r;
  }
  if (n_hosts <= 1) return true;
  size_t at = (size_t)snprintf(text, len, "the job's %d ranks are on %d hosts:", n, n_hosts);
  for (int k = 0; k < n_hosts && at < len; k++) {
    const cf_shm_host *h = &hosts[first[k]];
    int on = 0;
    for (int r = 0; r < n; r++)
      on += strcmp(hosts[r].id, h->id) == 0;
    at += (size_t)snprintf(text + at, len - at, "%s '%s' (rank%s", k ? ";" : "", h->name,
                           on > 1 ? "s" : "");
    int said = 0;
    for (int r = 0; r < n && at < len; r++)
      if (strcmp(hosts[r].id, h->id) == 0) {
        if (said == 8 && on > 9) { /* a long list: the first 8 and the count */
          at += (size_t)snprintf(text + at, len - at, " and %d more", on - 8);
          break;
        }
        at += (size_t)snprintf(text + at, len - at, "%s %d", said++ ? "," : "", r);
      }
    if (at < len) at += (size_t)snprintf(text + at, len - at, ")");
  }
  if (at < len)
    snprintf(text + at, len - at,
             ": the shm world is one host's; start it with mpirun to use MPI (--backend mpi)");
  return false;
}

/* ================= the TCP rendezvous ================= */

typedef struct ident { /* what a rank tells rank 0 */
  uint64_t magic, job;
  int32_t rank, size;
  cf_shm_host host;
} ident;

typedef struct verdict { /* rank 0's answer */
  uint64_t magic;
  int32_t ok, code; /* code: the cf_status every rank fails with */
  char text[1024];
} verdict;

/* All of buf through s before the deadline. */
static bool io(int s, bool out, void *buf, size_t len, double deadline) {
  size_t done = 0;
  while (done < len) {
    double left = deadline - cf_now();
    if (left <= 0) return false;
    struct pollfd pf = {.fd = s, .events = out ? POLLOUT : POLLIN};
    if (poll(&pf, 1, (int)(left * 1000) + 1) <= 0) continue;
    ssize_t k = out ? send(s, (char *)buf + done, len - done, MSG_NOSIGNAL)
                    : recv(s, (char *)buf + done, len - done, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) return false;
    done += (size_t)k;
  }
  return true;
}

/* "host:port" (or "[v6]:port") into its parts; false when it is not that. */
static bool split_addr(const char *addr, char *host, size_t hl, char *port, size_t pl) {
  const char *colon = strrchr(addr, ':');
  if (!colon || colon == addr || !colon[1]) return false;
  const char *h = addr;
  size_t n = (size_t)(colon - addr);
  if (*h == '[' && colon[-1] == ']') h++, n -= 2;
  if (n >= hl) return false;
  memcpy(host, h, n);
  host[n] = 0;
  char *end;
  long p = strtol(colon + 1, &end, 10);
  if (*end || p < 1 || p > 65535) return false;
  snprintf(port, pl, "%ld", p);
  return true;
}

static uint64_t job_hash(const char *s) {
  uint64_t h = UINT64_C(1469598103934665603);
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * UINT64_C(1099511628211);
  return h;
}

/* Rank 0: listen at the address, take every rank's identity, answer. */
static cf_status host_meet(cf_context *ctx, const cf_shm_launch *l, struct addrinfo *ai,
                           double timeout_s, double deadline) {
  int ls = -1, e = 0;
  for (; ai && ls < 0; ai = ai->ai_next) {
    ls = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    int one = 1;
    if (ls >= 0) setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ls >= 0 && (bind(ls, ai->ai_addr, ai->ai_addrlen) != 0 || listen(ls, CF_MAX_WORLD) != 0)) {
      e = errno;
      close(ls);
      ls = -1;
    }
  }
  if (ls < 0)
    return cf_error(ctx, CF_ERR_RUNTIME, NULL, 0,
                    "shm transport: rank 0 cannot listen on %s for the job's rendezvous: %s (rank 0 "
                    "must run on that host; set COLLFUSE_RENDEZVOUS=host:port to another address)",
                    l->rdv, strerror(e ? e : EADDRNOTAVAIL));
  int n = l->size, sock[CF_MAX_WORLD];
  cf_shm_host *hosts = calloc((size_t)n, sizeof *hosts);
  if (!hosts) {
    close(ls);
    return cf_error(ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  }
  for (int r = 0; r < n; r++)
    sock[r] = -1;
  cf_shm_host_id(&hosts[0]);
  int joined = 1;
  char why[1024] = "";
  while (joined < n && !why[0]) {
    double left = deadline - cf_now();
    if (left <= 0) break;
    struct pollfd pf = {.fd = ls, .events = POLLIN};
    if (poll(&pf, 1, left > 0.05 ? 50 : (int)(left * 1000) + 1) <= 0) continue;
    int s = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
    if (s < 0) continue;
    ident id;
    double by = cf_now() + 2 < deadline ? cf_now() + 2 : deadline; /* a stranger may say nothing */
    if (!io(s, false, &id, sizeof id, by) || id.magic != HOST_MAGIC || id.job != job_hash(l->job)) {
      close(s); /* not one of this job's */
      continue;
    }
    id.host.id[sizeof id.host.id - 1] = id.host.name[sizeof id.host.name - 1] = 0;
    if (id.size != n)
      snprintf(why, sizeof why, "rank %d says the job has %d ranks, rank 0 says %d", id.rank, id.size, n);
    else if (id.rank < 1 || id.rank >= n || sock[id.rank] >= 0)
      snprintf(why, sizeof why, "two processes say they are rank %d", id.rank);
    if (why[0]) {
      verdict v = {.magic = HOST_MAGIC, .ok = 0};
      snprintf(v.text, sizeof v.text, "%s", why);
      io(s, true, &v, sizeof v, deadline);
      close(s);
      break;
    }
    sock[id.rank] = s;
    hosts[id.rank] = id.host;
    joined++;
  }
  close(ls);
  cf_status st = CF_OK;
  verdict v = {.magic = HOST_MAGIC, .ok = 1, .code = CF_ERR_RUNTIME};
  if (why[0]) {
    v.ok = 0;
    snprintf(v.text, sizeof v.text, "%s", why);
  } else if (joined < n) {
    char miss[200] = "";
    size_t m = 0;
    for (int r = 1; r < n && m + 8 < sizeof miss; r++)
      if (sock[r] < 0) m += (size_t)snprintf(miss + m, sizeof miss - m, "%s%d", m ? ", " : "", r);
    v.ok = 0;
    snprintf(v.text, sizeof v.text,
             "rank 0 timed out after %g s at %s waiting for rank(s) %s of job '%s' to start", timeout_s,
             l->rdv, miss, l->job);
  } else if (!cf_shm_one_host(n, hosts, v.text, sizeof v.text)) {
    v.ok = 0;
    v.code = CF_ERR_USAGE; /* as a launcher that says so (shm_env.c) */
  }
  for (int r = 1; r < n; r++)
    if (sock[r] >= 0) {
      io(sock[r], true, &v, sizeof v, deadline);
      close(sock[r]);
    }
  if (!v.ok) st = cf_error(ctx, (cf_status)v.code, NULL, 0, "shm transport: %s", v.text);
  free(hosts);
  return st;
}

/* Rank r > 0: connect (until rank 0 listens), say who and where, take the verdict. */
static cf_status join_meet(cf_context *ctx, const cf_shm_launch *l, struct addrinfo *res,
                           double timeout_s, double deadline) {
  int s = -1;
  while (s < 0 && cf_now() < deadline) {
    for (struct addrinfo *ai = res; ai && s < 0; ai = ai->ai_next) {
      s = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
      if (s >= 0 && connect(s, ai->ai_addr, ai->ai_addrlen) != 0) {
        close(s);
        s = -1;
      }
    }
    if (s < 0) {
      struct timespec ts = {0, 20 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
  }
  if (s < 0)
    return cf_error(ctx, CF_ERR_RUNTIME, NULL, 0,
                    "shm transport: rank %d timed out after %g s waiting for rank 0 of job '%s' at %s",
                    l->rank, timeout_s, l->job, l->rdv);
  int one = 1;
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ident id = {.magic = HOST_MAGIC, .job = job_hash(l->job), .rank = l->rank, .size = l->size};
  cf_shm_host_id(&id.host);
  verdict v;
  cf_status st = CF_OK;
  if (!io(s, true, &id, sizeof id, deadline) || !io(s, false, &v, sizeof v, deadline) ||
      v.magic != HOST_MAGIC) {
    st = cf_error(ctx, CF_ERR_RUNTIME, NULL, 0,
                  "shm transport: rank 0 of job '%s' at %s went away (or timed out) during start-up",
                  l->job, l->rdv);
  } else if (!v.ok) {
    v.text[sizeof v.text - 1] = 0;
    st = cf_error(ctx, v.code == CF_ERR_USAGE ? CF_ERR_USAGE : CF_ERR_RUNTIME, NULL, 0,
                  "shm transport: %s", v.text);
  }
  close(s);
  return st;
}

cf_status cf_shm_meet(cf_context *ctx, const cf_shm_launch *l, double timeout_s, double deadline) {
  if (!l->rdv[0] || l->size < 2) return CF_OK;
  char host[256], port[16];
  if (!split_addr(l->rdv, host, sizeof host, port, sizeof port))
    return cf_error(ctx, CF_ERR_USAGE, NULL, 0,
                    "shm transport: rendezvous address '%s' (%s): want host:port", l->rdv, l->rdv_by);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
  int g = getaddrinfo(host, port, &hints, &res);
  if (g != 0)
    return cf_error(ctx, CF_ERR_RUNTIME, NULL, 0,
                    "shm transport: rendezvous address '%s' (%s): %s", l->rdv, l->rdv_by, gai_strerror(g));
  cf_status st = l->rank == 0 ? host_meet(ctx, l, res, timeout_s, deadline)
                              : join_meet(ctx, l, res, timeout_s, deadline);
  freeaddrinfo(res);
  return st;
}
