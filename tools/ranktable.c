/* ranktable.c - HCCL rank tables: `collfuse ranktable FILE.json` and the
 * check behind `run --backend mpi --rank-table FILE.json`.
 *
 * An HCCL rank table (versions 1.0 and 1.2, as Ascend's HCCL documents
 * them) lists the servers of a job and, per server, its devices with their
 * rank_id. collfuse runs on MPI instead of HCCL's own launcher, so the table
 * becomes an OpenMPI hostfile (one line per server, slots = its devices) and
 * a rankfile that puts each rank_id on its server, bound to the core of its
 * position among the server's devices. The host of a server is host_ip when
 * the table has one (version 1.2), else server_id (which HCCL tables usually
 * set to the server's IP). Numbers are accepted as JSON strings, as HCCL
 * writes them, or as JSON numbers. Anything malformed is an error naming
 * the file, the place in the table and what is wrong.
 */
#define _GNU_SOURCE
#include "tools.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static bool fail(char *err, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, len, fmt, ap);
  va_end(ap);
  return false;
}

/* A non-negative integer given as "12" or 12; false otherwise. */
static bool get_index(const cJSON *o, const char *key, long *out, bool *present) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  *present = v != NULL;
  if (!v) return false;
  if (cJSON_IsNumber(v)) {
    double d = v->valuedouble;
    if (d < 0 || d > 1e9 || d != (double)(long)d) return false;
    *out = (long)d;
    return true;
  }
  if (!cJSON_IsString(v) || !v->valuestring[0]) return false;
  char *e;
  errno = 0;
  long x = strtol(v->valuestring, &e, 10);
  if (errno || *e || x < 0 || x > 1000000000 || v->valuestring[0] == '+' || v->valuestring[0] == '-' ||
      v->valuestring[0] == ' ')
    return false;
  *out = x;
  return true;
}

static const char *value_text(const cJSON *o, const char *key, char *buf, size_t len) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  char *t = v ? cJSON_PrintUnformatted(v) : NULL;
  snprintf(buf, len, "%s", t ? t : "?");
  free(t);
  return buf;
}

static const char *get_string(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The table's text: a regular file (or standard input, "-") of at most
 * 64 MiB; anything else is an error in err. */
static char *read_file(const char *path, char *err, size_t len) {
  char *text;
  size_t n;
  return cf_read_file_msg(path, (size_t)64 << 20, CF_IN_STDIN, &text, &n, err, len) ? text : NULL;
}

void cf_ranktable_free(cf_rank_table *t) {
  if (!t) return;
  for (int s = 0; s < t->n_servers; s++) {
    free(t->servers[s].server_id);
    free(t->servers[s].host);
  }
  free(t->servers);
  free(t->ranks);
  memset(t, 0, sizeof *t);
}

/* Duplicate checks in O(1) each, so a table of N devices costs O(N): open
 * addressing over a power-of-two table at most half full. Slots hold an
 * index + 1 (server ids) or a key + 1 (server, device_id pairs); 0 is empty. */
static size_t set_cap(size_t n) {
  size_t cap = 16;
  while (cap < 2 * n) cap *= 2;
  return cap;
}

static uint64_t hash_u64(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  return h ^ h >> 33;
}

/* The server already holding id, or -1 after recording server s under it. */
static int server_seen(int *slots, size_t cap, const cf_rank_server *servers, const char *id, int s) {
  int *slot =
      cf_name_slot(slots, cap, servers, offsetof(cf_rank_server, server_id), sizeof *servers, id);
  if (*slot) return *slot - 1;
  *slot = s + 1;
  return -1;
}

/* Whether key was recorded before (it is recorded now). */
static bool key_seen(uint64_t *slots, size_t cap, uint64_t key) {
  size_t i = hash_u64(key) & (cap - 1);
  for (; slots[i]; i = (i + 1) & (cap - 1))
    if (slots[i] == key + 1) return true;
  slots[i] = key + 1;
  return false;
}

static char *dup_str(const char *s) {
  char *d = malloc(strlen(s) + 1);
  if (d) strcpy(d, s);
  return d;
}

/* What cf_ranktable_load checks each device against while it reads them. */
typedef struct loader {
  cf_rank_table *t;
  char *err; /* the message of the first failure */
  size_t len;
  int total;              /* devices in the table: the ranks */
  int *ids;               /* server ids seen (server_seen) */
  uint64_t *pairs;        /* (server, device_id) pairs seen (key_seen) */
  size_t ids_cap, pairs_cap;
} loader;

/* The table's top level: a job's table of a supported version that is
 * ready, with as many servers as it says. Its server_list, or NULL. */
static const cJSON *read_header(const cJSON *root, cf_rank_table *t, char *err, size_t len) {
  char vb[64];
  if (!cJSON_IsObject(root)) {
    fail(err, len, "a rank table is a JSON object");
    return NULL;
  }
  if (cJSON_GetObjectItemCaseSensitive(root, "server_group_list") &&
      !cJSON_GetObjectItemCaseSensitive(root, "server_list")) {
    fail(err, len, "server_group_list (a cluster-wide global rank table) is not supported: give the "
                         "job's rank table with server_list");
    return NULL;
  }
  const char *version = get_string(root, "version");
  if (!version) {
    fail(err, len, "no \"version\" string (1.0 or 1.2)");
    return NULL;
  }
  if (strcmp(version, "1.0") != 0 && strcmp(version, "1.2") != 0) {
    fail(err, len, "version '%s' is not supported (1.0 or 1.2)", version);
    return NULL;
  }
  snprintf(t->version, sizeof t->version, "%s", version);
  const char *status = get_string(root, "status");
  if (status && strcmp(status, "completed") != 0) {
    fail(err, len, "status is '%s', not 'completed' (the table is not ready)", status);
    return NULL;
  }
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "server_list");
  if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) == 0) {
    fail(err, len, "\"server_list\" must be a non-empty array of servers");
    return NULL;
  }
  int ns = cJSON_GetArraySize(list);
  long declared;
  bool present;
  if (!get_index(root, "server_count", &declared, &present) && present) {
    fail(err, len, "server_count %s is not a count", value_text(root, "server_count", vb, sizeof vb));
    return NULL;
  }
  if (present && declared != ns) {
    fail(err, len, "server_count is %ld but server_list has %d server%s", declared, ns, cf_s(ns));
    return NULL;
  }
  return list;
}

/* Room for list's servers and every device's rank, and the sets of what
 * was seen. */
static bool make_room(loader *l, const cJSON *list) {
  cf_rank_table *t = l->t;
  int ns = cJSON_GetArraySize(list);
  const cJSON *srv;
  cJSON_ArrayForEach(srv, list) {
    const cJSON *dev = cJSON_IsObject(srv) ? cJSON_GetObjectItemCaseSensitive(srv, "device") : NULL;
    if (cJSON_IsArray(dev)) l->total += cJSON_GetArraySize(dev);
  }
  t->servers = calloc((size_t)ns, sizeof *t->servers);
  t->ranks = calloc((size_t)l->total + 1, sizeof *t->ranks);
  l->ids_cap = set_cap((size_t)ns);
  l->pairs_cap = set_cap((size_t)l->total);
  l->ids = calloc(l->ids_cap, sizeof *l->ids);
  l->pairs = calloc(l->pairs_cap, sizeof *l->pairs);
  if (!t->servers || !t->ranks || !l->ids || !l->pairs) return fail(l->err, l->len, "out of memory");
  for (int i = 0; i <= l->total; i++) t->ranks[i].server = -1;
  return true;
}

/* Device d of server s (server_id id): a device number new on its server
 * and a rank no other device has. */
static bool read_device(loader *l, const cJSON *dv, int s, int d, const char *id) {
  cf_rank_table *t = l->t;
  char *err = l->err, vb[64];
  size_t len = l->len;
  int total = l->total;
  long device_id, rank_id;
  bool present;
  if (!cJSON_IsObject(dv)) return fail(err, len, "server_list[%d].device[%d] is not an object", s, d);
  if (!get_index(dv, "device_id", &device_id, &present))
    return fail(err, len, present ? "server_list[%d].device[%d]: device_id %s is not a device number"
                                  : "server_list[%d].device[%d]: no device_id%s",
                s, d, present ? value_text(dv, "device_id", vb, sizeof vb) : "");
  if (!get_index(dv, "rank_id", &rank_id, &present))
    return fail(err, len, present ? "server_list[%d].device[%d]: rank_id %s is not a rank number"
                                  : "server_list[%d].device[%d]: no rank_id%s",
                s, d, present ? value_text(dv, "rank_id", vb, sizeof vb) : "");
  if (rank_id >= total)
    return fail(err, len,
                "server_list[%d].device[%d]: rank_id %ld, but the table has %d device%s (ranks are "
                "0..%d)",
                s, d, rank_id, total, cf_s(total), total - 1);
  if (t->ranks[rank_id].server >= 0)
    return fail(err, len, "server_list[%d].device[%d]: rank_id %ld is also given to device %d of server '%s'",
                s, d, rank_id, t->ranks[rank_id].device_id, t->servers[t->ranks[rank_id].server].server_id);
  if (key_seen(l->pairs, l->pairs_cap, (uint64_t)s << 32 | (uint64_t)device_id))
    return fail(err, len, "server_list[%d].device[%d]: device_id %ld appears twice on server '%s'", s, d,
                device_id, id);
  t->ranks[rank_id] = (cf_rank_entry){.server = s, .device_id = (int)device_id, .local = d};
  return true;
}

/* Server s: a server_id no other server has, its host, and its devices. */
static bool read_server(loader *l, const cJSON *srv, int s) {
  cf_rank_table *t = l->t;
  char *err = l->err, vb[64];
  size_t len = l->len;
  if (!cJSON_IsObject(srv)) return fail(err, len, "server_list[%d] is not an object", s);
  const char *id = get_string(srv, "server_id"), *host_ip = get_string(srv, "host_ip");
  if (!id || !id[0]) return fail(err, len, "server_list[%d] has no \"server_id\" string", s);
  if (cJSON_GetObjectItemCaseSensitive(srv, "host_ip") && (!host_ip || !host_ip[0]))
    return fail(err, len, "server_list[%d] ('%s'): host_ip %s is not a host", s, id,
                value_text(srv, "host_ip", vb, sizeof vb));
  cf_rank_server *rs = &t->servers[s];
  rs->server_id = dup_str(id);
  rs->host = dup_str(host_ip ? host_ip : id);
  t->n_servers = s + 1;
  if (!rs->server_id || !rs->host) return fail(err, len, "out of memory");
  int k = server_seen(l->ids, l->ids_cap, t->servers, id, s);
  if (k >= 0)
    return fail(err, len, "server_list[%d]: server_id '%s' is also server_list[%d]'s", s, id, k);
  const cJSON *devs = cJSON_GetObjectItemCaseSensitive(srv, "device");
  if (!cJSON_IsArray(devs) || cJSON_GetArraySize(devs) == 0)
    return fail(err, len, "server_list[%d] ('%s'): \"device\" must be a non-empty array", s, id);
  int d = 0;
  const cJSON *dv;
  cJSON_ArrayForEach(dv, devs) {
    if (!read_device(l, dv, s, d, id)) return false;
    d++;
  }
  rs->devices = d;
  return true;
}

bool cf_ranktable_load(const char *path, cf_rank_table *t, int *line, char *err, size_t len) {
  memset(t, 0, sizeof *t);
  *line = 0;
  char *text = read_file(path, err, len);
  if (!text) return false;
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithOpts(text, &end, true);
  loader l = {.t = t, .err = err, .len = len};
  bool ok = root != NULL;
  if (!ok) { /* where the JSON breaks, and its line */
    const char *at = end ? end : text;
    *line = 1;
    for (const char *p = text; p < at && *p; p++) *line += *p == '\n';
    int n = (int)strcspn(at, "\r\n");
    snprintf(err, len, "not valid JSON near '%.*s'", n < 20 ? n : 20, at);
  }
  const cJSON *list = ok ? read_header(root, t, err, len) : NULL;
  ok = list && make_room(&l, list);
  int s = 0;
  const cJSON *srv;
  if (ok)
    cJSON_ArrayForEach(srv, list) {
      if (!(ok = read_server(&l, srv, s++))) break;
    }
  if (ok) t->n_ranks = l.total;
  free(l.ids);
  free(l.pairs);
  cJSON_Delete(root);
  free(text);
  if (!ok) cf_ranktable_free(t);
  return ok;
}

/* Is host this machine: its name (or short name), an address of one of
 * its interfaces, or a loopback name? */
bool cf_ranktable_host_is_local(const char *host, const char *hostname) {
  char me[256] = "";
  if (strcmp(host, "localhost") == 0 || strncmp(host, "127.", 4) == 0 || strcmp(host, "::1") == 0) return true;
  if (hostname && strcmp(host, hostname) == 0) return true;
  if (gethostname(me, sizeof me - 1) == 0) {
    if (strcmp(host, me) == 0) return true;
    size_t n = strcspn(me, ".");
    if (strlen(host) == n && strncmp(host, me, n) == 0) return true;
  }
  struct ifaddrs *ifs = NULL;
  bool found = false;
  if (getifaddrs(&ifs) != 0) return false;
  for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
    char addr[NI_MAXHOST];
    socklen_t sl = i->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    if (getnameinfo(i->ifa_addr, sl, addr, sizeof addr, NULL, 0, NI_NUMERICHOST) != 0) continue;
    char *pct = strchr(addr, '%'); /* fe80::1%eth0 */
    if (pct) *pct = 0;
    found = strcmp(addr, host) == 0;
  }
  freeifaddrs(ifs);
  return found;
}

/* text to path (through cf_write_file), or to stdout for NULL; false with
 * a message naming path and the reason */
static bool write_out(cf_context *ctx, const char *path, const char *text) {
  if (!path) {
    fputs(text, stdout);
    return true;
  }
  if (cf_write_file(ctx, path, text, strlen(text)) == CF_OK) return true;
  fprintf(stderr, "%s\n", cf_context_errmsg(ctx));
  return false;
}

typedef struct ranktable_args {
  cf_opt_list file;
  const char *hostfile, *rankfile;
  bool json;
} ranktable_args;

static const cf_opt ranktable_opts[] = {
    {"--hostfile", NULL, "OUT", CF_OPT_STR, offsetof(ranktable_args, hostfile),
     .help = "write the hostfile to OUT (instead of stdout; '-' is stdout)"},
    {"--rankfile", NULL, "OUT", CF_OPT_STR, offsetof(ranktable_args, rankfile),
     .help = "write the rankfile to OUT (instead of stdout; '-' is stdout)"},
    {"--json", NULL, NULL, CF_OPT_FLAG, offsetof(ranktable_args, json),
     .help = "print the table as read: {\"version\",\"ranks\",\"servers\":[..]}"},
    {0},
};

const cf_command cf_command_ranktable = {
    .name = "ranktable",
    .args = "FILE.json",
    .min_args = 1,
    .max_args = 1,
    .missing = "no rank table file",
    .args_field = offsetof(ranktable_args, file),
    .summary = "HCCL rank table -> OpenMPI hostfile and rankfile",
    .about =
        "Read an HCCL rank table (version 1.0 or 1.2: server_list, server_id or host_ip,\n"
        "device, device_id, rank_id) and print an OpenMPI hostfile and rankfile that\n"
        "place every rank_id on its server:\n"
        "  <host> slots=<devices of the server>\n"
        "  rank <rank_id>=<host> slot=<position of the device on its server>\n"
        "The host is host_ip when the table has one, else server_id. Then run\n"
        "  mpirun --hostfile HOSTS --rankfile RANKS -np N collfuse run G.xml --backend mpi \\\n"
        "         --rank-table FILE.json\n",
    .opts = ranktable_opts,
    .after = "FILE.json '-' reads standard input. Exit 1 naming the file and the problem\n"
             "when the table is malformed or an OUT cannot be written.\n",
    .run = cf_cmd_ranktable,
};

int cf_cmd_ranktable(cf_context *ctx, int argc, char **argv) {
  ranktable_args a = {0};
  int prc = cf_opts_parse(&cf_command_ranktable, argc, argv, &a);
  const char *file = a.file.n ? a.file.v[0] : NULL;
  /* "-": stdout, as without the option */
  const char *hostfile = cf_tool_is_std(a.hostfile) ? NULL : a.hostfile;
  const char *rankfile = cf_tool_is_std(a.rankfile) ? NULL : a.rankfile;
  bool json = a.json;
  cf_opts_free(&cf_command_ranktable, &a); /* file still points into argv */
  if (prc) return prc == CF_OPTS_HELP ? 0 : prc;
  cf_rank_table t;
  char err[1024];
  int line;
  if (!cf_ranktable_load(file, &t, &line, err, sizeof err)) {
    if (line > 0)
      fprintf(stderr, "%s:%d: error: %s\n", cf_tool_name(file), line, err);
    else
      fprintf(stderr, "%s: error: %s\n", cf_tool_name(file), err);
    return EXIT_INVALID;
  }
  int rc = 0;
  /* the hostfile and rankfile texts, and each server's ranks in rank order
   * for --json (a counting sort, not a pass over every rank per server) */
  size_t cap = 256 + strlen(file);
  for (int s = 0; s < t.n_servers; s++) cap += strlen(t.servers[s].host) + 32;
  for (int k = 0; k < t.n_ranks; k++) cap += strlen(t.servers[t.ranks[k].server].host) + 48;
  char *hosts = malloc(cap), *ranks = malloc(cap);
  int *start = calloc((size_t)t.n_servers + 1, sizeof *start);
  int *by_server = malloc(((size_t)t.n_ranks + 1) * sizeof *by_server);
  if (!hosts || !ranks || !start || !by_server) {
    free(hosts);
    free(ranks);
    free(start);
    free(by_server);
    cf_ranktable_free(&t);
    fprintf(stderr, "collfuse ranktable: out of memory\n");
    return EXIT_RUNTIME;
  }
  if (json) {
    for (int r = 0; r < t.n_ranks; r++) start[t.ranks[r].server + 1]++;
    for (int s = 0; s < t.n_servers; s++) start[s + 1] += start[s];
    for (int r = 0; r < t.n_ranks; r++) by_server[start[t.ranks[r].server]++] = r;
    cJSON *o = cJSON_CreateObject(), *servers = cJSON_AddArrayToObject(o, "servers");
    cJSON_AddStringToObject(o, "version", t.version);
    cJSON_AddNumberToObject(o, "ranks", t.n_ranks);
    for (int s = 0; s < t.n_servers; s++) {
      cJSON *so = cJSON_CreateObject(), *rk = NULL;
      cJSON_AddStringToObject(so, "server_id", t.servers[s].server_id);
      cJSON_AddStringToObject(so, "host", t.servers[s].host);
      cJSON_AddNumberToObject(so, "slots", t.servers[s].devices);
      rk = cJSON_AddArrayToObject(so, "ranks");
      for (int i = s ? start[s - 1] : 0; i < start[s]; i++) {
        int r = by_server[i];
        cJSON *ro = cJSON_CreateObject();
        cJSON_AddNumberToObject(ro, "rank_id", r);
        cJSON_AddNumberToObject(ro, "device_id", t.ranks[r].device_id);
        cJSON_AddNumberToObject(ro, "slot", t.ranks[r].local);
        cJSON_AddItemToArray(rk, ro);
      }
      cJSON_AddItemToArray(servers, so);
    }
    char *s = cJSON_PrintUnformatted(o);
    if (s) printf("%s\n", s);
    free(s);
    cJSON_Delete(o);
  }
  free(start);
  free(by_server);
  size_t h = 0, r = 0;
  if (!hostfile)
    h += (size_t)snprintf(hosts + h, cap - h,
                          "# OpenMPI hostfile (mpirun --hostfile): %d server%s, from %s\n",
                          t.n_servers, cf_s(t.n_servers), cf_tool_name(file));
  for (int s = 0; s < t.n_servers; s++)
    h += (size_t)snprintf(hosts + h, cap - h, "%s slots=%d\n", t.servers[s].host, t.servers[s].devices);
  if (!rankfile)
    r += (size_t)snprintf(ranks + r, cap - r, "# OpenMPI rankfile (mpirun --rankfile): %d rank%s\n",
                          t.n_ranks, cf_s(t.n_ranks));
  for (int k = 0; k < t.n_ranks; k++)
    r += (size_t)snprintf(ranks + r, cap - r, "rank %d=%s slot=%d\n", k, t.servers[t.ranks[k].server].host,
                          t.ranks[k].local);
  /* with --json only the files asked for are written (stdout holds the JSON) */
  if ((hostfile || !json) && !write_out(ctx, hostfile, hosts)) rc = cf_tool_exit_code(CF_ERR_IO);
  if (!rc && (rankfile || !json) && !write_out(ctx, rankfile, ranks))
    rc = cf_tool_exit_code(CF_ERR_IO);
  free(hosts);
  free(ranks);
  cf_ranktable_free(&t);
  return rc;
}
