/* test_linear.c - every reader's cost is linear in its input, whatever the
 * input's shape.
 *
 * Each case generates an input that stresses one shape (many attributes,
 * long alias chains, wide fan-in and fan-out, deep nesting within the
 * limits, many groups, calls and tuples that expand) at sizes n and 8n,
 * parses and verifies it in a child process, and compares the CPU time and
 * peak memory the child spent on that (getrusage, never wall-clock): 8n may
 * cost at most RATIO times what n costs, plus a little slack for timer and
 * page granularity. Linear costs give about 8, quadratic ones 64. The rank
 * table check (tools/ranktable.c) is measured on the collfuse driver the
 * same way, through wait4, less the driver's own start-up (the cost of a
 * one-device table).
 *
 * A busy or sanitized machine only ever adds CPU time, and adds it unevenly
 * (the CI once saw 8x cost 22x under ASan beside other jobs). So a case that
 * looks superlinear is measured again, all sizes in turn, up to TRIES times,
 * each figure the least seen: noise goes away with the retries, a quadratic
 * cost (64x) stays. Sizes are small enough that the whole test takes
 * seconds, ASan included.
 */
#define _GNU_SOURCE
#include "cf_test.h"

#include <stdarg.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

enum { RATIO = 20, TRIES = 4 };
#define CPU_SLACK 0.05 /* seconds */
#define RSS_SLACK 4096 /* KiB */

/* ---- a growing text buffer ---- */

typedef struct sbuf {
  char *p;
  size_t n, cap;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    assert_true(k >= 0);
    if (b->p && b->n + (size_t)k < b->cap) {
      b->n += (size_t)k;
      return;
    }
    b->cap = (b->cap + (size_t)k + 1) * 2;
    b->p = realloc(b->p, b->cap);
    assert_non_null(b->p);
  }
}

/* ---- measuring one parse in a child ---- */

typedef void (*gen_fn)(sbuf *b, int n);

typedef struct cost {
  double cpu; /* seconds of user + system time */
  long rss;   /* KiB the peak resident set grew by */
  int status; /* of parse, then verify */
  char msg[240];
} cost;

static double cpu_of(const struct rusage *u) {
  return (double)u->ru_utime.tv_sec + u->ru_utime.tv_usec / 1e6 + (double)u->ru_stime.tv_sec +
         u->ru_stime.tv_usec / 1e6;
}

static cost measure(const char *name, gen_fn gen, int n) {
  int fd[2];
  assert_int_equal(pipe(fd), 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (!pid) {
    sbuf b = {0};
    gen(&b, n);
    cost c = {0};
    cf_context *cx;
    cf_graph *g = NULL;
    struct rusage u0, u1;
    if (cf_context_create(&cx)) _exit(2);
    getrusage(RUSAGE_SELF, &u0);
    c.status = cf_graph_parse(cx, name, b.p, b.n, &g);
    if (!c.status) c.status = cf_graph_verify(g, NULL);
    getrusage(RUSAGE_SELF, &u1);
    c.cpu = cpu_of(&u1) - cpu_of(&u0);
    c.rss = u1.ru_maxrss - u0.ru_maxrss;
    snprintf(c.msg, sizeof c.msg, "%s", cf_context_errmsg(cx));
    _exit(write(fd[1], &c, sizeof c) == (ssize_t)sizeof c ? 0 : 3); /* no cleanup: measured */
  }
  close(fd[1]);
  cost c;
  ssize_t got = read(fd[0], &c, sizeof c);
  close(fd[0]);
  int ws;
  assert_int_equal(waitpid(pid, &ws, 0), pid);
  assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  assert_int_equal(got, (ssize_t)sizeof c);
  return c;
}

/* The least of two measurements of one input, figure by figure. */
static cost cheaper(cost x, cost y) {
  if (y.cpu < x.cpu) x.cpu = y.cpu;
  if (y.rss < x.rss) x.rss = y.rss;
  return x;
}

/* What one case measures: run(arg, k) is the cost of the start-up alone
 * (k 0), of the input of size n (k 1) and of size 8n (k 2). */
typedef cost (*run_fn)(const void *arg, int k);

/* The costs of size 8n at most RATIO times those of size n, both less the
 * start-up; after a miss everything is measured again (each figure the
 * least seen), up to TRIES times. The start-up is subtracted from both, so
 * its own noise, up to half of it, is allowed RATIO times over. */
static void check_linear(const char *what, run_fn run, const void *arg) {
  cost c[3];
  for (int t = 0; t < TRIES; t++) {
    for (int k = 0; k < 3; k++) {
      cost m = run(arg, k);
      c[k] = t ? cheaper(c[k], m) : m;
    }
    double a = c[1].cpu - c[0].cpu, b = c[2].cpu - c[0].cpu;
    long ra = c[1].rss - c[0].rss, rb = c[2].rss - c[0].rss;
    double slack = CPU_SLACK + RATIO * c[0].cpu / 2;
    print_message("%-28s cpu %.3f -> %.3f s, rss +%ld -> +%ld KiB (start-up %.3f s)%s\n", what, a,
                  b, ra, rb, c[0].cpu, t ? " again" : "");
    bool cpu_ok = b <= RATIO * a + slack, rss_ok = rb <= RATIO * ra + RSS_SLACK;
    if (cpu_ok && rss_ok) return;
    if (t < TRIES - 1) continue;
    if (!cpu_ok)
      fail_msg("%s: 8x the input took %.3f s of CPU, %.3f s at 1x: more than %dx (+%.3f s), the "
               "least of %d tries",
               what, b, a, RATIO, slack, TRIES);
    fail_msg("%s: 8x the input grew the peak memory by %ld KiB, %ld KiB at 1x: more than %dx, the "
             "least of %d tries",
             what, rb, ra, RATIO, TRIES);
  }
}

/* One amplifying shape of one reader's input. */
typedef struct shape {
  const char *what;
  const char *file; /* the name the input is parsed under: it picks the reader */
  gen_fn gen;       /* writes the input of size n */
  int n;
  cf_status st;       /* what parsing and verifying it gives */
  const char *substr; /* in the message when st is an error */
} shape;

/* Size n (k 1) or 8n (k 2) of a shape, which must give st; nothing (k 0):
 * the child's start-up is not measured. */
static cost run_shape(const void *arg, int k) {
  const shape *s = arg;
  cost c = {0};
  if (!k) return c;
  c = measure(s->file, s->gen, k == 1 ? s->n : 8 * s->n);
  if (c.status != (int)s->st || (s->substr && !strstr(c.msg, s->substr)))
    fail_msg("%s at %dn: status %d '%s', expected %d '%s'", s->what, k == 1 ? 1 : 8, c.status,
             c.msg, s->st, s->substr ? s->substr : "");
  return c;
}

/* Sizes n and 8n give st at a near-linear cost. */
static void test_shape(void **state) {
  const shape *s = *state;
  check_linear(s->what, run_shape, s);
}

/* ---- GraphDef text ---- */

static void pb_arg(sbuf *b, const char *name) {
  put(b,
      "node { name: \"%s\" op: \"_Arg\" attr { key: \"T\" value { type: DT_FLOAT } }\n"
      "  attr { key: \"shape\" value { shape { dim { size: 4 } } } } }\n",
      name);
}

/* one node with n attributes, n _output_shapes and n output types */
static void pb_attrs(sbuf *b, int n) {
  pb_arg(b, "a");
  put(b, "node { name: \"x\" op: \"Foo\" input: \"a\"\n");
  for (int i = 0; i < n; i++)
    put(b, "  attr { key: \"extra_%d\" value { i: %d } }\n", i, i);
  put(b, "  attr { key: \"_output_shapes\" value { list {");
  for (int i = 0; i < n; i++)
    put(b, " shape { dim { size: 4 } }");
  put(b, " } } }\n  attr { key: \"Tout\" value { list {");
  for (int i = 0; i < n; i++)
    put(b, " type: DT_FLOAT");
  put(b, " } } }\n}\nnode { name: \"r\" op: \"_Retval\" input: \"x:%d\" }\n", n - 1);
}

/* n Identity nodes in a chain, its end read by n _Retvals */
static void pb_chain(sbuf *b, int n) {
  pb_arg(b, "i0");
  for (int i = 1; i <= n; i++)
    put(b, "node { name: \"i%d\" op: \"Identity\" input: \"i%d\" }\n", i, i - 1);
  for (int i = 0; i < n; i++)
    put(b, "node { name: \"r%d\" op: \"_Retval\" input: \"i%d\" }\n", i, n);
}

/* n collectives, each in a group of its own */
static void pb_groups(sbuf *b, int n) {
  pb_arg(b, "a");
  for (int i = 0; i < n; i++)
    put(b,
        "node { name: \"ar%d\" op: \"HcomAllReduce\" input: \"a\"\n"
        "  attr { key: \"group\" value { s: \"g%d\" } }\n"
        "  attr { key: \"rank_size\" value { i: 2 } }\n"
        "  attr { key: \"reduction\" value { s: \"sum\" } }\n"
        "  attr { key: \"T\" value { type: DT_FLOAT } } }\n"
        "node { name: \"r%d\" op: \"_Retval\" input: \"ar%d\" }\n",
        i, i, i, i);
}

/* one node reading n inputs, and one input read by n nodes */
static void pb_fan(sbuf *b, int n) {
  pb_arg(b, "a");
  for (int i = 0; i < n; i++)
    put(b,
        "node { name: \"c%d\" op: \"Cast\" input: \"a\"\n"
        "  attr { key: \"DstT\" value { type: DT_FLOAT } } }\n",
        i);
  put(b, "node { name: \"sum\" op: \"AddN\"");
  for (int i = 0; i < n; i++)
    put(b, " input: \"c%d\"", i);
  put(b, "\n  attr { key: \"T\" value { type: DT_FLOAT } }\n"
         "  attr { key: \"_output_shapes\" value { list { shape { dim { size: 4 } } } } } }\n"
         "node { name: \"r\" op: \"_Retval\" input: \"sum\" }\n");
}

/* n nodes each carrying an unknown field nested 90 deep (the limit is 100) */
static void pb_nesting(sbuf *b, int n) {
  pb_arg(b, "a");
  for (int i = 0; i < n; i++) {
    put(b, "node { name: \"n%d\" op: \"NoOp\" ", i);
    for (int k = 0; k < 90; k++)
      put(b, "x { ");
    for (int k = 0; k < 90; k++)
      put(b, "} ");
    put(b, "}\n");
  }
  put(b, "node { name: \"r\" op: \"_Retval\" input: \"a\" }\n");
}

/* ---- native XML ---- */

static void xml_head(sbuf *b, int world) {
  put(b,
      "<graph name=\"t\" version=\"1\" world_size=\"%d\">\n"
      "<node name=\"a\" op=\"Input\" dtype=\"float32\" shape=\"4\"/>\n",
      world);
}

/* n groups of two ranks, a collective in each */
static void xml_groups(sbuf *b, int n) {
  xml_head(b, 2);
  for (int i = 0; i < n; i++)
    put(b, "<group name=\"g%d\" ranks=\"0,1\"/>\n", i);
  for (int i = 0; i < n; i++)
    put(b,
        "<node name=\"ar%d\" op=\"AllReduce\" reduction=\"sum\" group=\"g%d\"><input "
        "ref=\"a\"/></node>\n<node name=\"o%d\" op=\"Output\"><input ref=\"ar%d\"/></node>\n",
        i, i, i, i);
  put(b, "</graph>\n");
}

/* n groups of 256 one-rank parts */
static void xml_parts(sbuf *b, int n) {
  xml_head(b, 256);
  for (int i = 0; i < n; i++) {
    put(b, "<group name=\"g%d\" ranks=\"0", i);
    for (int k = 1; k < 256; k++)
      put(b, "|%d", k);
    put(b, "\"/>\n");
  }
  put(b, "<node name=\"o\" op=\"Output\"><input ref=\"a\"/></node>\n</graph>\n");
}

/* one Opaque node with n inputs and n outputs, each output read */
static void xml_fan(sbuf *b, int n) {
  xml_head(b, 1);
  put(b, "<node name=\"x\" op=\"Opaque\" type=\"Foo\">");
  for (int i = 0; i < n; i++)
    put(b, "<input ref=\"a\"/>");
  for (int i = 0; i < n; i++)
    put(b, "<output dtype=\"float32\" shape=\"4\"/>");
  put(b, "</node>\n");
  for (int i = 0; i < n; i++)
    put(b, "<node name=\"o%d\" op=\"Output\"><input ref=\"x\" port=\"%d\"/></node>\n", i, i);
  put(b, "</graph>\n");
}

/* a chain of n collectives */
static void xml_chain(sbuf *b, int n) {
  xml_head(b, 2);
  put(b, "<node name=\"c0\" op=\"Cast\" dtype=\"float32\"><input ref=\"a\"/></node>\n");
  for (int i = 1; i <= n; i++)
    put(b, "<node name=\"c%d\" op=\"AllReduce\" reduction=\"sum\"><input ref=\"c%d\"/></node>\n", i,
        i - 1);
  put(b, "<node name=\"o\" op=\"Output\"><input ref=\"c%d\"/></node>\n</graph>\n", n);
}

/* ---- GraphML ---- */

static void gml_head(sbuf *b) {
  put(b, "<graphml xmlns=\"http://graphml.graphdrawing.org/xmlns\">\n"
         "<key id=\"op\" for=\"node\" attr.name=\"op\" attr.type=\"string\"/>\n"
         "<key id=\"ty\" for=\"node\" attr.name=\"type\" attr.type=\"string\"/>\n"
         "<key id=\"dt\" for=\"node\" attr.name=\"dtype\" attr.type=\"string\"/>\n"
         "<key id=\"sh\" for=\"node\" attr.name=\"shape\" attr.type=\"string\"/>\n"
         "<key id=\"red\" for=\"node\" attr.name=\"reduction\" attr.type=\"string\"/>\n"
         "<key id=\"ws\" for=\"graph\" attr.name=\"world_size\" attr.type=\"long\"/>\n"
         "<key id=\"dp\" for=\"edge\" attr.name=\"dst_port\" attr.type=\"long\"/>\n");
}

/* n keys nothing reads, all given on one node */
static void gml_keys(sbuf *b, int n) {
  gml_head(b);
  for (int i = 0; i < n; i++)
    put(b, "<key id=\"k%d\" for=\"node\" attr.name=\"extra_%d\" attr.type=\"long\"/>\n", i, i);
  put(b, "<graph edgedefault=\"directed\"><data key=\"ws\">2</data>\n"
         "<node id=\"a\"><data key=\"op\">Input</data><data key=\"dt\">float32</data>"
         "<data key=\"sh\">4</data>");
  for (int i = 0; i < n; i++)
    put(b, "<data key=\"k%d\">%d</data>", i, i);
  put(b, "</node>\n<node id=\"o\"><data key=\"op\">Output</data></node>\n"
         "<edge source=\"a\" target=\"o\"/>\n</graph></graphml>\n");
}

/* a chain of n collectives through edges, and one node fed by all of them */
static void gml_edges(sbuf *b, int n) {
  gml_head(b);
  put(b,
      "<graph edgedefault=\"directed\"><data key=\"ws\">2</data>\n"
      "<node id=\"a\"><data key=\"op\">Input</data><data key=\"dt\">float32</data>"
      "<data key=\"sh\">4</data></node>\n"
      "<node id=\"x\"><data key=\"op\">Opaque</data><data key=\"ty\">Foo</data>"
      "<data key=\"dt\">float32</data><data key=\"sh\">4</data></node>\n"
      "<node id=\"o\"><data key=\"op\">Output</data></node>\n<edge source=\"x\" target=\"o\"/>\n");
  put(b, "<node id=\"c0\"><data key=\"op\">Cast</data><data key=\"dt\">float32</data></node>\n"
         "<edge source=\"a\" target=\"c0\"/>\n");
  for (int i = 1; i <= n; i++)
    put(b,
        "<node id=\"c%d\"><data key=\"op\">AllReduce</data><data key=\"red\">sum</data></node>\n"
        "<edge source=\"c%d\" target=\"c%d\"/>\n"
        "<edge source=\"c%d\" target=\"x\"><data key=\"dp\">%d</data></edge>\n",
        i, i - 1, i, i, i - 1);
  put(b, "</graph></graphml>\n");
}

/* ---- HLO text ---- */

/* n computations nothing calls: text that costs only its parse */
static void hlo_pad(sbuf *b, int n) {
  for (int i = 0; i < n; i++)
    put(b, "pad%d {\n  p = f32[4] parameter(0)\n  ROOT m = f32[4] multiply(p, p)\n}\n", i);
}

/* ROOT: the tuple of the f32[4] values NAME0..NAME(n-1), and the end of ENTRY */
static void hlo_root_tuple(sbuf *b, const char *name, int n) {
  put(b, "  ROOT t = (");
  for (int i = 0; i < n; i++)
    put(b, "%sf32[4]", i ? "," : "");
  put(b, ") tuple(");
  for (int i = 0; i < n; i++)
    put(b, "%s%s%d", i ? "," : "", name, i);
  put(b, ")\n}\n");
}

/* one computation called n times, the calls' tuple the result */
static void hlo_calls(sbuf *b, int n) {
  put(b, "HloModule m\nc {\n  p = f32[4] parameter(0)\n  ROOT m = f32[4] multiply(p, p)\n}\n"
         "ENTRY e {\n  p = f32[4] parameter(0)\n");
  for (int i = 0; i < n; i++)
    put(b, "  k%d = f32[4] call(p), to_apply=c\n", i);
  hlo_root_tuple(b, "k", n);
}

/* 30 computations each calling the next twice (2^30 instructions), padded
 * to the size n: the expansion stops at a budget that grows with the text */
static void hlo_call_bomb(sbuf *b, int n) {
  put(b, "HloModule m\nc0 {\n  ROOT p = f32[4] parameter(0)\n}\n");
  for (int i = 1; i < 30; i++)
    put(b,
        "c%d {\n  p = f32[4] parameter(0)\n  a = f32[4] call(p), to_apply=c%d\n"
        "  ROOT b = f32[4] call(a), to_apply=c%d\n}\n",
        i, i - 1, i - 1);
  hlo_pad(b, n);
  put(b, "ENTRY e {\n  p = f32[4] parameter(0)\n  ROOT c = f32[4] call(p), to_apply=c29\n}\n");
}

/* tuples of tuples 30 deep, each holding the one below twice: 2^30 result
 * arrays from a few lines, padded to the size n */
static void hlo_tuple_bomb(sbuf *b, int n) {
  put(b, "HloModule m\n");
  hlo_pad(b, n);
  put(b, "ENTRY e {\n  t0 = f32[4] parameter(0)\n");
  for (int i = 1; i < 30; i++)
    put(b, "  t%d = () tuple(t%d, t%d)\n", i, i - 1, i - 1);
  put(b, "  ROOT r = () tuple(t29, t29)\n}\n");
}

/* The i-th ordering of the devices 0..7 (i < 8! = 40320) as "a,b,...":
 * as many distinct replica groups as asked, each naming every device once
 * (XLA's verifier refuses a group set that leaves a device out). */
static const char *ordering(int i, char *buf) {
  int left[8] = {0, 1, 2, 3, 4, 5, 6, 7}, n = 8, o = 0;
  for (int f = 5040; n; f = n > 1 ? f / (n - 1) : 1, n--) {
    int k = i / f % n;
    o += sprintf(buf + o, "%s%d", o ? ", " : "", left[k]);
    for (int j = k; j < n - 1; j++)
      left[j] = left[j + 1];
  }
  return buf;
}

/* n all-reduces over n different replica groups */
static void hlo_groups(sbuf *b, int n) {
  char order[64];
  put(b, "HloModule m, num_partitions=8\nsum {\n  x = f32[] parameter(0)\n"
         "  y = f32[] parameter(1)\n  ROOT z = f32[] add(x, y)\n}\n"
         "ENTRY e {\n  p = f32[4] parameter(0)\n");
  for (int i = 0; i < n; i++)
    put(b,
        "  ar%d = f32[4] all-reduce(p), channel_id=1, use_global_device_ids=true, "
        "replica_groups={{%s}}, to_apply=sum\n",
        i, ordering(i, order));
  hlo_root_tuple(b, "ar", n);
}

/* n all-reduces over n different meshes, all grouped along an axis named
 * 'b': their IR groups are b, b_2, b_3, ... */
static void hlo_mesh_axes(sbuf *b, int n) {
  put(b, "HloModule m, num_partitions=256\nsum {\n  x = f32[] parameter(0)\n"
         "  y = f32[] parameter(1)\n  ROOT z = f32[] add(x, y)\n}\n"
         "ENTRY e {\n  p = f32[4] parameter(0)\n");
  int k = 0;
  for (int x = 1; x <= 128 && k < n; x++)
    for (int y = 2; x * y <= 256 && k < n; y++)
      for (int z = 1; x * y * z <= 256 && k < n; z++, k++)
        put(b,
            "  ar%d = f32[4] all-reduce(p), channel_id=1, use_global_device_ids=true, "
            "replica_groups=mesh['a'=%d,'b'=%d,'c'=%d] {'b'}, to_apply=sum\n",
            k, x, y, z);
  assert_int_equal(k, n);
  hlo_root_tuple(b, "ar", n);
}

/* n shard_map entries, each cutting its own global parameter over one of
 * m meshes declared on the module line (entry i over mesh i % m) */
static void hlo_meshes_used(sbuf *b, int n, int m) {
  put(b, "HloModule m, frontend_attributes={xla.sdy.meshes={");
  for (int i = 0; i < m; i++)
    put(b, "%smesh%d = #sdy.mesh<[\"x\"=4, \"y\"=1]>", i ? ", " : "", i);
  put(b, "}}\nENTRY e {\n");
  for (int i = 0; i < n; i++)
    put(b,
        "  p%d = f32[16] parameter(%d)\n"
        "  s%d = f32[4] custom-call(p%d), custom_call_target=\"xla.sdy.GlobalToLocalShape\", "
        "frontend_attributes={xla.sdy.in_shardings=\"#sdy.sharding_per_value<[<@mesh%d, "
        "[{\\\"x\\\"}]>]>\"}\n",
        i, i, i, i, i % m);
  hlo_root_tuple(b, "s", n);
}

/* n entries over 16 meshes (looked up, never rescanned) */
static void hlo_shard_entries(sbuf *b, int n) { hlo_meshes_used(b, n, 16); }

/* n entries over n meshes, each its own (found by name; only 16 meshes
 * were kept) */
static void hlo_many_meshes(sbuf *b, int n) { hlo_meshes_used(b, n, n); }

/* ---- StableHLO ---- */

/* n f32[4] tensor types, comma-separated */
static void shlo_types(sbuf *b, int n) {
  for (int i = 0; i < n; i++)
    put(b, "%stensor<4xf32>", i ? ", " : "");
}

/* n functions nothing calls: text that costs only its parse */
static void shlo_pad(sbuf *b, int n) {
  for (int i = 0; i < n; i++)
    put(b,
        "  func.func private @pad%d(%%a: tensor<4xf32>) -> tensor<4xf32> {\n"
        "    %%0 = stablehlo.multiply %%a, %%a : tensor<4xf32> loc(#loc1)\n"
        "    return %%0 : tensor<4xf32>\n  }\n",
        i);
}

/* return: the n f32[4] values %NAME0..%NAME(n-1), and the end of @main */
static void shlo_return(sbuf *b, const char *name, int n) {
  put(b, "    return ");
  for (int i = 0; i < n; i++)
    put(b, "%s%%%s%d", i ? ", " : "", name, i);
  put(b, " : ");
  shlo_types(b, n);
  put(b, "\n  }\n");
}

static void shlo_main(sbuf *b, int n) {
  put(b, "#loc1 = loc(\"x\")\nmodule @m attributes {mhlo.num_partitions = 256 : i32} {\n"
         "  func.func @main(%%a: tensor<4xf32>) -> (");
  shlo_types(b, n);
  put(b, ") {\n");
}

/* a chain of n adds in one function, generic and pretty forms */
static void shlo_ops(sbuf *b, int n) {
  shlo_main(b, 1);
  put(b, "    %%v0 = stablehlo.add %%a, %%a : tensor<4xf32> loc(#loc1)\n");
  for (int i = 1; i < n; i++)
    put(b,
        i % 2 ? "    %%v%d = \"stablehlo.multiply\"(%%v%d, %%a) : (tensor<4xf32>, tensor<4xf32>) "
                "-> tensor<4xf32> loc(\"m\")\n"
              : "    %%v%d = stablehlo.subtract %%v%d, %%a : tensor<4xf32>\n",
        i, i - 1);
  put(b, "    return %%v%d : tensor<4xf32>\n  }\n}\n", n - 1);
}

/* one function called n times */
static void shlo_calls(sbuf *b, int n) {
  shlo_main(b, n);
  for (int i = 0; i < n; i++)
    put(b, "    %%k%d = func.call @c(%%a) : (tensor<4xf32>) -> tensor<4xf32>\n", i);
  shlo_return(b, "k", n);
  put(b, "  func.func private @c(%%a: tensor<4xf32>) -> tensor<4xf32> {\n"
         "    %%0 = stablehlo.multiply %%a, %%a : tensor<4xf32>\n"
         "    return %%0 : tensor<4xf32>\n  }\n}\n");
}

/* 30 functions each calling the next twice (2^30 ops), padded to the size
 * n: the expansion stops at the HLO evaluator's budget */
static void shlo_call_bomb(sbuf *b, int n) {
  shlo_main(b, 1);
  put(b, "    %%0 = call @c29(%%a) : (tensor<4xf32>) -> tensor<4xf32>\n"
         "    return %%0 : tensor<4xf32>\n  }\n"
         "  func.func private @c0(%%a: tensor<4xf32>) -> tensor<4xf32> {\n"
         "    return %%a : tensor<4xf32>\n  }\n");
  for (int i = 1; i < 30; i++)
    put(b,
        "  func.func private @c%d(%%a: tensor<4xf32>) -> tensor<4xf32> {\n"
        "    %%0 = call @c%d(%%a) : (tensor<4xf32>) -> tensor<4xf32>\n"
        "    %%1 = call @c%d(%%0) : (tensor<4xf32>) -> tensor<4xf32>\n"
        "    return %%1 : tensor<4xf32>\n  }\n",
        i, i - 1, i - 1);
  shlo_pad(b, n);
  put(b, "}\n");
}

/* n all-reduces over n different replica groups, in manual computations */
static void shlo_groups(sbuf *b, int n) {
  char order[64];
  put(b, "#loc1 = loc(\"x\")\nmodule @m attributes {mhlo.num_partitions = 8 : i32} {\n"
         "  func.func @main(%%a: tensor<4xf32>) -> (");
  shlo_types(b, n);
  put(b, ") {\n");
  put(b, "    %%m:%d = sdy.manual_computation(%%a) in_shardings=[<@mesh, [{}]>] out_shardings=[",
      n);
  for (int i = 0; i < n; i++)
    put(b, "%s<@mesh, [{}]>", i ? ", " : "");
  put(b, "] manual_axes={\"x\"} (%%b: tensor<4xf32>) {\n");
  for (int i = 0; i < n; i++)
    put(b,
        "      %%ar%d = \"stablehlo.all_reduce\"(%%b) <{channel_handle = "
        "#stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[%s]]> : "
        "tensor<1x8xi64>, use_global_device_ids}> ({\n"
        "      ^bb0(%%x: tensor<f32>, %%y: tensor<f32>):\n"
        "        %%s = stablehlo.add %%x, %%y : tensor<f32>\n"
        "        stablehlo.return %%s : tensor<f32>\n"
        "      }) : (tensor<4xf32>) -> tensor<4xf32>\n",
        i, ordering(i, order));
  put(b, "      sdy.return ");
  for (int i = 0; i < n; i++)
    put(b, "%s%%ar%d", i ? ", " : "", i);
  put(b, " : ");
  shlo_types(b, n);
  put(b, "\n    } : (tensor<4xf32>) -> (");
  shlo_types(b, n);
  put(b, ")\n");
  put(b, "    return ");
  for (int i = 0; i < n; i++)
    put(b, "%s%%m#%d", i ? ", " : "", i);
  put(b, " : ");
  shlo_types(b, n);
  put(b, "\n  }\n  sdy.mesh @mesh = <[\"x\"=8]>\n}\n");
}

/* n sdy.mesh declarations (each name was compared with every earlier one:
 * 16k meshes cost 1.9 s, 64k 23.7 s) and a manual computation over the
 * last one (only the first 16 reached the evaluator) */
static void shlo_meshes(sbuf *b, int n) {
  for (int i = 0; i < n; i++)
    put(b, "sdy.mesh @mesh%d = <[\"x\"=4]>\n", i);
  put(b,
      "module @m {\n  func.func @main(%%a: tensor<4xf32>) -> tensor<4xf32> {\n"
      "    %%m = sdy.manual_computation(%%a) in_shardings=[<@mesh%d, [{\"x\"}]>] "
      "out_shardings=[<@mesh%d, [{\"x\"}]>] manual_axes={\"x\"} (%%b: tensor<1xf32>) {\n"
      "      sdy.return %%b : tensor<1xf32>\n    } : (tensor<4xf32>) -> tensor<4xf32>\n"
      "    return %%m : tensor<4xf32>\n  }\n}\n",
      n - 1, n - 1);
}

/* modules nested n deep around @main and 20n functions: each level
 * rescanned everything inside it (depth 250 in 3.9 MB took 36.5 s, flat
 * 1.4 s); 8n is 240 deep, within the 256 brackets */
static void shlo_nested_modules(sbuf *b, int n) {
  for (int i = 0; i < n; i++)
    put(b, "module @m%d {\n", i);
  put(b, "  func.func @main(%%a: tensor<4xf32>) -> tensor<4xf32> {\n"
         "    %%0 = stablehlo.add %%a, %%a : tensor<4xf32>\n    return %%0 : tensor<4xf32>\n  }\n");
  shlo_pad(b, 20 * n);
  for (int i = 0; i < n; i++)
    put(b, "}\n");
}

/* manual computations nested n deep, 300n adds in the innermost body (8n
 * is 56 calls deep, within the 64) */
static void shlo_nested_manual(sbuf *b, int n) {
  put(b, "sdy.mesh @mesh = <[\"x\"=2]>\n"
         "func.func @main(%%a: tensor<4xf32>) -> tensor<4xf32> {\n");
  for (int i = 0; i < n; i++)
    put(b,
        "%%m%d = sdy.manual_computation(%%a) in_shardings=[<@mesh, [{}]>] out_shardings=[<@mesh, "
        "[{}]>] manual_axes={\"x\"} (%%a: tensor<4xf32>) {\n",
        i);
  for (int i = 0; i < 300 * n; i++)
    put(b, "  %%v%d = stablehlo.add %%a, %%a : tensor<4xf32>\n", i);
  put(b, "  sdy.return %%v%d : tensor<4xf32>\n", 300 * n - 1);
  for (int i = n - 1; i >= 0; i--)
    put(b, "} : (tensor<4xf32>) -> tensor<4xf32>\n%s %%m%d : tensor<4xf32>\n",
        i ? "sdy.return" : "return", i);
  put(b, "}\n");
}

/* all-reduces nested n deep in each other's reducer regions, 300n adds in
 * the innermost (each level looked for its attributes through the regions
 * inside it); 8n is 96 deep, 192 brackets */
static void shlo_nested_regions(sbuf *b, int n) {
  put(b, "func.func @main(%%a: tensor<4xf32>) -> tensor<4xf32> {\n");
  for (int i = 0; i < n; i++)
    put(b,
        "%%r%d = \"stablehlo.all_reduce\"(%%%s) <{replica_groups = dense<[[0, 1]]> : "
        "tensor<1x2xi64>}> ({\n^bb0(%%x: tensor<f32>, %%y: tensor<f32>):\n",
        i, i ? "x" : "a");
  for (int i = 0; i < 300 * n; i++)
    put(b, "  %%v%d = stablehlo.add %%x, %%y : tensor<f32>\n", i);
  put(b, "  stablehlo.return %%v0 : tensor<f32>\n");
  for (int i = n - 1; i >= 0; i--)
    put(b, "}) : (tensor<%s>) -> tensor<%s>\n%s %%r%d : tensor<%s>\n", i ? "f32" : "4xf32",
        i ? "f32" : "4xf32", i ? "stablehlo.return" : "return", i, i ? "f32" : "4xf32");
  put(b, "}\n");
}

/* ---- rank tables, through the driver ---- */

/* servers of per devices each, n devices in all */
static void write_ranktable(const char *path, int n, int per) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fprintf(f,
          "{\"version\": \"1.0\", \"status\": \"completed\", \"server_count\": \"%d\",\n"
          " \"server_list\": [\n",
          n / per);
  for (int s = 0; s < n / per; s++) {
    fprintf(f, "%s  {\"server_id\": \"10.%d.%d.%d\", \"device\": [", s ? ",\n" : "", s >> 16,
            s >> 8 & 255, s & 255);
    for (int d = 0; d < per; d++)
      fprintf(f, "%s{\"device_id\": \"%d\", \"device_ip\": \"192.168.0.1\", \"rank_id\": \"%d\"}",
              d ? ", " : "", d, s * per + per - 1 - d);
    fprintf(f, "]}");
  }
  fprintf(f, "\n]}\n");
  assert_int_equal(fclose(f), 0);
}

/* `collfuse ranktable --json FILE`'s CPU time and peak memory */
static cost run_ranktable(const char *path) {
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (!pid) {
    if (!freopen("/dev/null", "w", stdout)) _exit(126);
    execl(CF_CLI, CF_CLI, "ranktable", "--json", path, (char *)NULL);
    _exit(127);
  }
  int ws;
  struct rusage u;
  assert_int_equal(wait4(pid, &ws, 0, &u), pid);
  cost c = {.cpu = cpu_of(&u), .rss = u.ru_maxrss, .status = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1};
  return c;
}

/* One rank table shape: its table at each size, in files written once. */
typedef struct rt_case {
  char path[3][512]; /* one device, n devices, 8n devices */
} rt_case;

static cost run_rt(const void *arg, int k) {
  const rt_case *r = arg;
  cost c = run_ranktable(r->path[k]);
  assert_int_equal(c.status, 0);
  return c;
}

static void test_ranktable(void **state) {
  (void)state;
  const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  rt_case r;
  for (int k = 0; k < 3; k++) {
    snprintf(r.path[k], sizeof r.path[k], "%s/cf_linear_rt_XXXXXX", tmp);
    int fd = mkstemp(r.path[k]);
    assert_true(fd >= 0);
    close(fd);
  }
  static const struct {
    const char *what;
    int per; /* devices per server (0: all on one) */
  } shapes[] = {
      {"ranktable servers", 1}, {"ranktable servers of 8", 8}, {"ranktable one server", 0}};
  /* a whole process is measured, so n is large enough that the table, not
   * the driver's start-up, is most of the 1x cost */
  const int n = 12000;
  write_ranktable(r.path[0], 1, 1);
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    write_ranktable(r.path[1], n, shapes[i].per ? shapes[i].per : n);
    write_ranktable(r.path[2], 8 * n, shapes[i].per ? shapes[i].per : 8 * n);
    check_linear(shapes[i].what, run_rt, &r);
  }
  for (int k = 0; k < 3; k++) unlink(r.path[k]);
}

#define SHAPE(what, file, gen, n, st, substr)                                                      \
  {                                                                                                \
    what, test_shape, NULL, NULL, &(shape) { what, file, gen, n, st, substr }                      \
  }

int main(void) {
  const struct CMUnitTest tests[] = {
      SHAPE("pbtxt_attributes", "t.pbtxt", pb_attrs, 2000, CF_OK, NULL),
      SHAPE("pbtxt_identity_chain", "t.pbtxt", pb_chain, 1500, CF_OK, NULL),
      SHAPE("pbtxt_groups", "t.pbtxt", pb_groups, 1000, CF_OK, NULL),
      SHAPE("pbtxt_fan", "t.pbtxt", pb_fan, 1000, CF_OK, NULL),
      SHAPE("pbtxt_nesting", "t.pbtxt", pb_nesting, 300, CF_OK, NULL),
      SHAPE("xml_groups", "t.xml", xml_groups, 1000, CF_OK, NULL),
      SHAPE("xml_group_parts", "t.xml", xml_parts, 120, CF_OK, NULL),
      SHAPE("xml_fan", "t.xml", xml_fan, 1000, CF_OK, NULL),
      SHAPE("xml_chain", "t.xml", xml_chain, 1000, CF_OK, NULL),
      SHAPE("graphml_keys", "t.graphml", gml_keys, 1000, CF_OK, NULL),
      SHAPE("graphml_edges", "t.graphml", gml_edges, 1000, CF_OK, NULL),
      SHAPE("hlo_calls", "t.hlo", hlo_calls, 1000, CF_OK, NULL),
      SHAPE("hlo_call_expansion", "t.hlo", hlo_call_bomb, 100, CF_ERR_INVALID,
            "the limit is 8 per byte of the module"),
      SHAPE("hlo_tuple_expansion", "t.hlo", hlo_tuple_bomb, 100, CF_ERR_INVALID,
            "the limit is 8 per byte of the module"),
      SHAPE("hlo_replica_groups", "t.hlo", hlo_groups, 500, CF_OK, NULL),
      SHAPE("hlo_mesh_axes", "t.hlo", hlo_mesh_axes, 300, CF_OK, NULL),
      SHAPE("hlo_shard_entries", "t.hlo", hlo_shard_entries, 500, CF_OK, NULL),
      SHAPE("hlo_many_meshes", "t.hlo", hlo_many_meshes, 500, CF_OK, NULL),
      SHAPE("stablehlo_ops", "t.mlir", shlo_ops, 1500, CF_OK, NULL),
      SHAPE("stablehlo_calls", "t.mlir", shlo_calls, 1000, CF_OK, NULL),
      SHAPE("stablehlo_call_expansion", "t.mlir", shlo_call_bomb, 100, CF_ERR_INVALID,
            "the limit is 8 per byte of the module"),
      SHAPE("stablehlo_replica_groups", "t.mlir", shlo_groups, 500, CF_OK, NULL),
      SHAPE("stablehlo_meshes", "t.mlir", shlo_meshes, 8000, CF_OK, NULL),
      SHAPE("stablehlo_nested_modules", "t.mlir", shlo_nested_modules, 30, CF_OK, NULL),
      SHAPE("stablehlo_nested_manual", "t.mlir", shlo_nested_manual, 7, CF_OK, NULL),
      SHAPE("stablehlo_nested_regions", "t.mlir", shlo_nested_regions, 12, CF_OK, NULL),
      cmocka_unit_test(test_ranktable),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
