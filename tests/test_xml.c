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
    assert_memory_equal(gb->ranks, a->groups[i].ranks, sizeof(int) * (size_t)gb->n_ranks);
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
  ASSERT_FAILS("<graph>\n<node name='x' op='Input' dtype='int8' shape='2'/>\n"
               "<node name='x' op='Input' dtype='int8' shape='2'/>\n</graph>",
               "mem.xml:3: error: node 'x': duplicate node name (first defined at line 2)");
  ASSERT_FAILS("<graph>\n<node name='x' op='Conv2D' dtype='int8' shape='2'/>\n</graph>",
               "mem.xml:2: error: node 'x': unknown op 'Conv2D'");
  ASSERT_FAILS("<graph version='2'/>", "unsupported format version '2'");
  ASSERT_FAILS("<graphml/>", "expected <graph>");
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
    assert_int_equal(cf_read_file(ctx, gold, &want, &size), CF_OK);
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
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
