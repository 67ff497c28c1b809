/* test_xml.c - unit tests of the native XML reader and writer: every
 * example round-trips (read -> write -> read gives the same graph and the
 * same bytes), forward references and multi-output ports work, and hostile
 * or malformed documents fail with file:line messages. */
#include "cf_test.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frontend/frontend.h"

#ifndef CF_SOURCE_DIR
#define CF_SOURCE_DIR "."
#endif


static cf_status parse(const char *text, cf_graph **g) {
  return cf_graph_parse(ctx, "mem.xml", text, strlen(text), g);
}

#define ASSERT_FAILS(text, substr)                                                     \
  do {                                                                                 \
    cf_graph *g_ = (cf_graph *)1;                                                      \
    assert_int_equal(parse((text), &g_), CF_ERR_INVALID);                              \
    assert_null(g_);                                                                   \
    if (!strstr(cf_context_errmsg(ctx), (substr)))                                     \
      fail_msg("message '%s' lacks '%s'", cf_context_errmsg(ctx), (substr));            \
  } while (0)

/* Compare two graphs by name: ops, operands, attributes, types, groups. */
static void assert_same_graph(const cf_graph *a, const cf_graph *b) {
  assert_string_equal(a->name, b->name);
  assert_int_equal(a->world_size, b->world_size);
  assert_int_equal(a->n_nodes, b->n_nodes);
  assert_int_equal(a->n_groups, b->n_groups);
  for (int i = 0; i < a->n_groups; i++) {
    const cf_group *gb = cf_graph_group(b, a->groups[i].name);
    assert_non_null(gb);
    assert_int_equal(gb->n_ranks, a->groups[i].n_ranks);
    assert_int_equal(gb->n_parts, a->groups[i].n_parts);
    assert_memory_equal(gb->ranks, a->groups[i].ranks,
                        sizeof(int) * (size_t)gb->n_ranks * (size_t)gb->n_parts);
  }
  for (int i = 0; i < a->n_nodes; i++) {
    const cf_node *na = &a->nodes[i];
    int j = cf_graph_find(b, na->name);
    assert_true(j >= 0);
    const cf_node *nb = &b->nodes[j];
    assert_int_equal(na->op, nb->op);
    assert_int_equal(na->n_in, nb->n_in);
    for (int k = 0; k < na->n_in; k++) {
      assert_string_equal(a->nodes[na->in[k].node].name, b->nodes[nb->in[k].node].name);
      assert_int_equal(na->in[k].port, nb->in[k].port);
    }
    assert_int_equal(na->n_out, nb->n_out);
    for (int k = 0; k < na->n_out; k++) {
      assert_int_equal(na->out[k].dtype, nb->out[k].dtype);
      assert_true(cf_shape_equal(&na->out[k].shape, &nb->out[k].shape));
    }
    for (int id = 0; id < CF_A_COUNT; id++) {
      if (id == CF_A_DTYPE || id == CF_A_SHAPE) continue; /* written from inferred types */
      const cf_attr *x = cf_node_attr(na, (cf_attr_id)id), *y = cf_node_attr(nb, (cf_attr_id)id);
      assert_true((x == NULL) == (y == NULL));
      if (!x) continue;
      switch (cf_attr_table[id].kind) {
      case CF_AK_STR: assert_string_equal(x->v.s, y->v.s); break;
      case CF_AK_FLOAT: assert_true(x->v.f == y->v.f); break;
      case CF_AK_SHAPE: assert_true(cf_shape_equal(x->v.shape, y->v.shape)); break;
      case CF_AK_STRS:
        assert_int_equal(x->v.strs.n, y->v.strs.n);
        for (int k = 0; k < x->v.strs.n; k++)
          assert_string_equal(x->v.strs.v[k], y->v.strs.v[k]);
        break;
      case CF_AK_INTS:
        assert_int_equal(x->v.ints.n, y->v.ints.n);
        for (int k = 0; k < x->v.ints.n; k++)
          assert_int_equal(x->v.ints.v[k], y->v.ints.v[k]);
        break;
      default: assert_int_equal(x->v.i, y->v.i);
      }
    }
  }
}

static char *write_to_string(const cf_graph *g) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_non_null(f);
  assert_int_equal(cf_xml_write(g, f), CF_OK);
  fclose(f);
  return buf;
}

static void test_examples_round_trip(void **state) {
  (void)state;
  DIR *d = opendir(CF_SOURCE_DIR "/examples");
  assert_non_null(d);
  struct dirent *e;
  int seen = 0;
  while ((e = readdir(d))) {
    size_t n = strlen(e->d_name);
    if (n < 5 || strcmp(e->d_name + n - 4, ".xml")) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/examples/%s", CF_SOURCE_DIR, e->d_name);
    cf_graph *g1, *g2, *g3;
    if (cf_graph_load(ctx, path, &g1) != CF_OK) fail_msg("%s", cf_context_errmsg(ctx));
    char *t1 = write_to_string(g1);
    assert_int_equal(parse(t1, &g2), CF_OK);
    assert_same_graph(g1, g2);
    char *t2 = write_to_string(g2);
    assert_string_equal(t1, t2); /* the writer is a fixpoint */
    assert_int_equal(parse(t2, &g3), CF_OK);
    assert_same_graph(g1, g3);
    free(t1);
    free(t2);
    cf_graph_destroy(g1);
    cf_graph_destroy(g2);
    cf_graph_destroy(g3);
    seen++;
  }
  closedir(d);
  assert_true(seen >= 6);
}

static void test_forward_refs_and_ports(void **state) {
  (void)state;
  const char *text =
      "<graph name='fw' world_size='2'>\n"
      "  <node name='o' op='Output'><input ref='op' port='1'/></node>\n"
      "  <node name='op' op='Opaque' type='while'>\n"
      "    <input ref='x'/>\n"
      "    <output dtype='float32' shape='4'/>\n"
      "    <output dtype='int32' shape='2,2'/>\n"
      "  </node>\n"
      "  <node name='x' op='Input' dtype='float32' shape='4' init='iota'/>\n"
      "  <node name='c' op='Constant' dtype='float64' shape='' value='0.1'/>\n"
      "</graph>\n";
  cf_graph *g, *g2;
  assert_int_equal(parse(text, &g), CF_OK);
  int o = cf_graph_find(g, "o"), op = cf_graph_find(g, "op");
  assert_int_equal(g->nodes[o].in[0].node, op);
  assert_int_equal(g->nodes[o].in[0].port, 1);
  assert_int_equal(g->nodes[op].n_out, 2);
  assert_int_equal(g->nodes[op].out[1].dtype, CF_DT_INT32);
  char *t = write_to_string(g);
  assert_non_null(strstr(t, "<output dtype=\"int32\" shape=\"2,2\"/>"));
  assert_non_null(strstr(t, "port=\"1\""));
  assert_non_null(strstr(t, "value=\"0.10000000000000001\""));
  assert_int_equal(parse(t, &g2), CF_OK);
  assert_same_graph(g, g2);
  free(t);
  cf_graph_destroy(g);
  cf_graph_destroy(g2);
}

static void test_escaping(void **state) {
  (void)state;
  const char *text = "<graph name='a&amp;b &lt;&quot;c&quot;&gt;' world_size='1'>"
                     "<node name='x/&amp;y' op='Input' dtype='int8' shape='1'/></graph>";
  cf_graph *g, *g2;
  assert_int_equal(parse(text, &g), CF_OK);
  assert_string_equal(g->name, "a&b <\"c\">");
  char *t = write_to_string(g);
  assert_int_equal(parse(t, &g2), CF_OK);
  assert_same_graph(g, g2);
  free(t);
  cf_graph_destroy(g);
  cf_graph_destroy(g2);
}

static void test_hostile(void **state) {
  (void)state;
  ASSERT_FAILS("<?xml version='1.0'?>\n<!DOCTYPE graph [<!ENTITY xxe SYSTEM 'file:///etc/passwd'>]>\n"
               "<graph><node name='&xxe;' op='Input' dtype='int8' shape='1'/></graph>",
               "mem.xml:2: error: DOCTYPE and entity declarations are not allowed");
  ASSERT_FAILS("<?xml version='1.0'?>\n<!DOCTYPE lolz [\n <!ENTITY lol 'lol'>\n"
               " <!ENTITY lol2 '&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;'>\n]>\n<graph/>",
               "mem.xml:2: error: DOCTYPE");
  ASSERT_FAILS("<graph><node name='x' op='Input'", "mem.xml:1: error: malformed XML");
  ASSERT_FAILS("", "malformed XML");
  ASSERT_FAILS("not xml at all", "mem.xml:1: error: malformed XML: Start tag expected");
  ASSERT_FAILS("<graph>\n<node name='x' op='Input' dtype='int8' shape='1' colour='red'/>\n</graph>",
               "mem.xml:2: error: node 'x': ");
  assert_non_null(strstr(cf_context_errmsg(ctx), "colour"));
  ASSERT_FAILS("<graph>\n<node name='x' op='Input' dtype='int7' shape='1'/>\n</graph>",
               "mem.xml:2: error: node 'x'");
  ASSERT_FAILS("<graph world_size='2'>\n<node name='x' op='Input' dtype='int8' shape='2'/>\n"
               "<node name='y' op='Add'>\n<input ref='x'/>\n<input ref='z'/>\n</node></graph>",
               "mem.xml:5: error: node 'y': input 1 refers to unknown node 'z'");
  /* control dependencies: a name that is no node, the node itself, a cycle */
  ASSERT_FAILS("<graph world_size='2'>\n<node name='x' op='Input' dtype='int8' shape='2'/>\n"
               "<node name='y' op='AllReduce'>\n<input ref='x'/>\n<after ref='z'/>\n</node></graph>",
               "mem.xml:5: error: node 'y': <after> refers to unknown node z");
  ASSERT_FAILS("<graph world_size='2'>\n<node name='x' op='Input' dtype='int8' shape='2'/>\n"
               "<node name='y' op='AllReduce'>\n<input ref='x'/>\n<after ref='y'/>\n</node></graph>",
               "mem.xml:5: error: node 'y': <after> refers to the node itself: y");
  ASSERT_FAILS("<graph world_size='2'>\n<node name='x' op='Input' dtype='int8' shape='2'/>\n"
               "<node name='y' op='AllReduce'>\n<input ref='x'/>\n<after ref='w'/>\n</node>\n"
               "<node name='w' op='AllReduce'>\n<input ref='x'/>\n<after ref='y'/>\n</node></graph>",
               "error: node 'y': cycle: 'y' -(after)-> 'w' -(after)-> 'y'");
  ASSERT_FAILS("<graph>\n<node name='x' op='Input' dtype='int8' shape='2'/>\n"
               "<node name='x' op='Input' dtype='int8' shape='2'/>\n</graph>",
               "mem.xml:3: error: node 'x': duplicate node name (first defined at line 2)");
  ASSERT_FAILS("<graph>\n<node name='x' op='Conv2D' dtype='int8' shape='2'/>\n</graph>",
               "mem.xml:2: error: node 'x': unknown op 'Conv2D'");
  ASSERT_FAILS("<graph version='2'/>", "unsupported format version '2'");
  ASSERT_FAILS("<graphml/>", "expected <graph>");
}

/* The library never prints: bytes that do not convert from the declared
 * encoding made libxml2 write "encoding error : input conversion failed"
 * and "I/O error : encoder error" on stderr through its generic handler,
 * which XML_PARSE_NOERROR does not cover. stderr goes to a file meanwhile. */
static void test_nothing_on_stderr(void **state) {
  (void)state;
  char path[] = "/tmp/cf_test_xml_stderr_XXXXXX";
  int fd = mkstemp(path), saved = dup(2);
  assert_true(fd >= 0 && saved >= 0);
  fflush(stderr);
  assert_int_equal(dup2(fd, 2), 2);
  cf_graph *g = (cf_graph *)1;
  cf_status st =
      parse("<?xml version=\"1.0\" encoding=\"EUC-JP\"?>\n<graph>\xff\xff\xff</graph>\n", &g);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  off_t printed = lseek(fd, 0, SEEK_END);
  close(fd);
  unlink(path);
  assert_int_equal(st, CF_ERR_INVALID);
  assert_null(g);
  assert_non_null(strstr(cf_context_errmsg(ctx), "mem.xml:2: error: malformed XML: "));
  assert_int_equal(printed, 0);
}

static void test_file_errors(void **state) {
  (void)state;
  cf_graph *g = (cf_graph *)1;
  assert_int_equal(cf_graph_load(ctx, "/nonexistent/g.xml", &g), CF_ERR_IO);
  assert_null(g);
  assert_non_null(strstr(cf_context_errmsg(ctx), "/nonexistent/g.xml: error: cannot open"));
  assert_int_equal(cf_graph_load(ctx, "/tmp", &g), CF_ERR_IO);
  assert_int_equal(cf_graph_load(NULL, "x", &g), CF_ERR_USAGE);
  /* writing never leaves a partial file behind */
  assert_int_equal(parse("<graph><node name='x' op='Input' dtype='int8' shape='1'/></graph>", &g), CF_OK);
  assert_int_equal(cf_graph_write_xml(g, "/nonexistent/out.xml"), CF_ERR_IO);
  char dir[] = "/tmp/cf-xml-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[128];
  snprintf(path, sizeof path, "%s/out.xml", dir);
  assert_int_equal(cf_graph_write_xml(g, path), CF_OK);
  cf_graph *g2;
  assert_int_equal(cf_graph_load(ctx, path, &g2), CF_OK);
  assert_same_graph(g, g2);
  remove(path);
  rmdir(dir);
  cf_graph_destroy(g);
  cf_graph_destroy(g2);
}

/* A group partitioned into disjoint parts of one size ("0,1|2,3"): each
 * part is a communicator; rank_size and shapes follow the part's size. */
static void test_partitioned_groups(void **state) {
  (void)state;
  const char *text =
      "<graph name='pg' world_size='8'>\n"
      "  <group name='dp' ranks=' 0, 2 | 1,3|4,6|5,7 '/>\n"
      "  <group name='tp' ranks='0,1,2,3|4,5,6,7'/>\n"
      "  <node name='x' op='Input' dtype='float32' shape='8,4'/>\n"
      "  <node name='ar' op='AllReduce' group='dp' rank_size='2'><input ref='x'/></node>\n"
      "  <node name='ag' op='AllGather' group='tp' layout='concat'><input ref='x'/></node>\n"
      "  <node name='rs' op='ReduceScatter' group='tp'><input ref='x'/></node>\n"
      "  <node name='o1' op='Output'><input ref='ar'/></node>\n"
      "  <node name='o2' op='Output'><input ref='ag'/></node>\n"
      "  <node name='o3' op='Output'><input ref='rs'/></node>\n"
      "</graph>\n";
  cf_graph *g, *g2;
  assert_int_equal(parse(text, &g), CF_OK);
  const cf_group *dp = cf_graph_group(g, "dp");
  assert_non_null(dp);
  assert_int_equal(dp->n_parts, 4);
  assert_int_equal(dp->n_ranks, 2);
  static const int want[] = {0, 2, 1, 3, 4, 6, 5, 7};
  assert_memory_equal(dp->ranks, want, sizeof want);
  assert_int_equal(cf_graph_group_size(g, "tp"), 4);
  char buf[32];
  assert_string_equal(cf_shape_format(&g->nodes[cf_graph_find(g, "ag")].out[0].shape, buf, sizeof buf),
                      "32,4");
  assert_string_equal(cf_shape_format(&g->nodes[cf_graph_find(g, "rs")].out[0].shape, buf, sizeof buf),
                      "2,4");
  /* the part that holds a rank, and the rank's place in it */
  int at = -1;
  const int *part = cf_group_part_of(dp, 6, &at);
  assert_ptr_equal(part, dp->ranks + 4);
  assert_int_equal(at, 1);
  assert_ptr_equal(cf_group_part_of(cf_graph_group(g, "tp"), 5, &at), cf_graph_group(g, "tp")->ranks + 4);
  assert_int_equal(at, 1);
  /* written as parts, read back the same, and the writer is a fixpoint */
  char *t = write_to_string(g);
  assert_non_null(strstr(t, "<group name=\"dp\" ranks=\"0,2|1,3|4,6|5,7\"/>"));
  assert_non_null(strstr(t, "<group name=\"tp\" ranks=\"0,1,2,3|4,5,6,7\"/>"));
  assert_int_equal(parse(t, &g2), CF_OK);
  assert_same_graph(g, g2);
  char *t2 = write_to_string(g2);
  assert_string_equal(t, t2);
  free(t);
  free(t2);
  cf_graph_destroy(g);
  cf_graph_destroy(g2);
  /* a rank outside every part skips the group's collectives: allowed */
  assert_int_equal(parse("<graph world_size='6'><group name='p' ranks='0,1|2,3'/></graph>", &g), CF_OK);
  assert_null(cf_group_part_of(cf_graph_group(g, "p"), 5, NULL));
  cf_graph_destroy(g);

  /* errors name the file, the line and the group */
  ASSERT_FAILS("<graph world_size='4'>\n<group name='dp' ranks='0,1|1,2'/>\n</graph>",
               "mem.xml:2: error: group 'dp': rank 1 is in parts 0 and 1 (parts must be disjoint)");
  ASSERT_FAILS("<graph world_size='4'>\n<group name='dp' ranks='0,1|2,0'/>\n</graph>",
               "mem.xml:2: error: group 'dp': rank 0 is in parts 0 and 1");
  ASSERT_FAILS("<graph world_size='4'>\n<group name='dp' ranks='0,1|2,2'/>\n</graph>",
               "mem.xml:2: error: group 'dp': rank 2 listed twice");
  ASSERT_FAILS("<graph world_size='8'>\n\n<group name='dp' ranks='0,1,2|3,4'/>\n</graph>",
               "mem.xml:3: error: group 'dp': part 1 has 2 ranks but part 0 has 3");
  ASSERT_FAILS("<graph world_size='4'>\n<group name='dp' ranks='0,1|2,4'/>\n</graph>",
               "mem.xml:2: error: group 'dp': rank 4 outside the world (world_size=4)");
  /* an empty part is not a rank list (the schema's pattern) */
  ASSERT_FAILS("<graph world_size='4'>\n<group name='dp' ranks='0,1||2,3'/>\n</graph>",
               "mem.xml:2: error: ");
  assert_non_null(strstr(cf_context_errmsg(ctx), "ranks"));
  ASSERT_FAILS("<graph world_size='4'>\n<group name='dp' ranks='0,1|'/>\n</graph>",
               "mem.xml:2: error: ");
  ASSERT_FAILS("<graph world_size='4'>\n<group name='hccl_world_group' ranks='0,1|2,3'/>\n</graph>",
               "mem.xml:2: error: group 'hccl_world_group' is every rank and cannot be partitioned");
  /* a node's rank_size is the size of one part */
  ASSERT_FAILS("<graph world_size='4'>\n<group name='dp' ranks='0,1|2,3'/>\n"
               "<node name='x' op='Input' dtype='float32' shape='4'/>\n"
               "<node name='ar' op='AllReduce' group='dp' rank_size='4'><input ref='x'/></node>\n"
               "</graph>",
               "mem.xml:4: error: node 'ar': rank_size=4 but group 'dp' has 2 ranks");
}

/* The writer's exact output is part of the interface: golden files. */
static void test_writer_golden(void **state) {
  (void)state;
  static const char *names[] = {"dp_gradients", "fused_buckets"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char path[1024], gold[1024];
    snprintf(path, sizeof path, "%s/examples/%s.xml", CF_SOURCE_DIR, names[i]);
    snprintf(gold, sizeof gold, "%s/tests/golden/xml/%s.xml", CF_SOURCE_DIR, names[i]);
    cf_graph *g;
    if (cf_graph_load(ctx, path, &g) != CF_OK) fail_msg("%s", cf_context_errmsg(ctx));
    char *text = write_to_string(g);
    char *want;
    size_t size;
    assert_int_equal(cf_read_file(ctx, gold, NULL, CF_MAX_FILE_BYTES, 0, &want, &size), CF_OK);
    if (strcmp(text, want) != 0) fail_msg("writer output for %s differs from %s", path, gold);
    free(text);
    free(want);
    cf_graph_destroy(g);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_examples_round_trip), cmocka_unit_test(test_forward_refs_and_ports),
      cmocka_unit_test(test_escaping),            cmocka_unit_test(test_hostile),
      cmocka_unit_test(test_file_errors),         cmocka_unit_test(test_writer_golden),
      cmocka_unit_test(test_partitioned_groups),  cmocka_unit_test(test_nothing_on_stderr),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
