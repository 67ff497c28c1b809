/* json_report.c - the machine-readable reports of the driver, built with
 * cJSON so escaping and number formatting are never hand-rolled.
 */
#include "tools.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *cf_report_reason(const cf_node *n, char *buf, size_t len) {
  const char *r = cf_node_str(n, CF_A_REASON, NULL);
  if (r) return r;
  if (cf_op_table[n->op].cat == CF_CAT_FUSED_COLLECTIVE) {
    int64_t fid = cf_node_int(n, CF_A_FUSION_ID, -1);
    if (fid >= 0) {
      snprintf(buf, len, "fusion_id=%lld", (long long)fid);
      return buf;
    }
    return "fused";
  }
  if (cf_op_table[n->op].allowed & (1u << CF_A_FUSION)) {
    int64_t f = cf_node_fusion(n);
    if (f == 0) return "fusion=0";
  }
  return "unfused";
}

static cJSON *members_of(const cf_node *n) {
  cJSON *arr = cJSON_CreateArray();
  cf_strs m = cf_node_strs(n, CF_A_MEMBERS);
  if (m.n < 0 || cf_op_table[n->op].cat != CF_CAT_FUSED_COLLECTIVE) {
    cJSON_AddItemToArray(arr, cJSON_CreateString(n->name));
    return arr;
  }
  for (int k = 0; k < m.n; k++)
    cJSON_AddItemToArray(arr, cJSON_CreateString(m.v[k]));
  return arr;
}

cf_status cf_report_compile_json(const cf_graph *g, int collectives_before,
                                 const cf_pass_timing *timing, int n_timing) {
  cf_graph_stats st;
  char buf[128];
  cf_graph_stats_compute(g, &st);
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "graph", g->name);
  cJSON_AddNumberToObject(root, "nodes", st.nodes);
  cJSON_AddNumberToObject(root, "collectives_before", collectives_before);
  cJSON_AddNumberToObject(root, "collectives_after", st.collectives);
  cJSON_AddNumberToObject(root, "bytes_communicated", (double)st.comm_bytes);
  if (g->fingerprint) cJSON_AddStringToObject(root, "fingerprint", g->fingerprint);
  cJSON *buckets = cJSON_AddArrayToObject(root, "buckets");
  cJSON *fused_mm = cJSON_AddArrayToObject(root, "fused_matmul");
  for (int k = 0; k < g->n_nodes; k++) {
    const cf_node *n = &g->nodes[g->topo ? g->topo[k] : k];
    cf_category cat = cf_op_table[n->op].cat;
    if (cat == CF_CAT_FUSED_MATMUL) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "name", n->name);
      cJSON_AddStringToObject(o, "op", cf_op_table[n->op].name);
      /* members: the MatMuls (several for an AllGatherMatmul), then the
       * collective; "matmul" joins the MatMuls' names, "matmuls" lists them */
      cf_strs m = cf_node_strs(n, CF_A_MEMBERS);
      int n_mm = m.n >= 2 ? m.n - 1 : 0;
      size_t mm_len = 1;
      for (int j = 0; j < n_mm; j++)
        mm_len += strlen(m.v[j]) + 1;
      char *mm = malloc(mm_len), *p = mm;
      if (!mm) {
        cJSON_Delete(o);
        cJSON_Delete(root);
        return cf_error(g->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
      }
      for (int j = 0; j < n_mm; j++)
        p += sprintf(p, j ? ",%s" : "%s", m.v[j]);
      *p = 0;
      cJSON_AddStringToObject(o, "matmul", mm);
      cJSON_AddStringToObject(o, "collective", n_mm ? m.v[m.n - 1] : "");
      cJSON *list = cJSON_AddArrayToObject(o, "matmuls");
      for (int j = 0; j < n_mm; j++)
        cJSON_AddItemToArray(list, cJSON_CreateString(m.v[j]));
      free(mm);
      cJSON_AddItemToArray(fused_mm, o);
    }
    if (cat != CF_CAT_COLLECTIVE && cat != CF_CAT_FUSED_COLLECTIVE) continue;
    const cf_value *in = &g->nodes[n->in[0].node].out[n->in[0].port];
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "name", n->name);
    cJSON_AddStringToObject(b, "op", cf_op_table[cf_op_unfused(n->op)].name);
    cJSON_AddItemToObject(b, "members", members_of(n));
    cJSON_AddNumberToObject(b, "bytes", (double)cf_node_comm_bytes(g, n));
    /* a bucket of several dtypes (AllGather) is "mixed" */
    const char *dt = cf_dtype_name(in->dtype);
    for (int j = 1; j < n->n_in; j++)
      if (g->nodes[n->in[j].node].out[n->in[j].port].dtype != in->dtype) dt = "mixed";
    cJSON_AddStringToObject(b, "dtype", dt);
    if (cf_op_reduces(n->op))
      cJSON_AddStringToObject(b, "reduction", cf_reduction_name(cf_node_reduction(n)));
    else
      cJSON_AddNullToObject(b, "reduction");
    cJSON_AddStringToObject(b, "group", cf_node_group(n));
    cJSON_AddStringToObject(b, "reason", cf_report_reason(n, buf, sizeof buf));
    if (n->region) { /* in a loop's or a branch's body (cf_region) */
      char where[CF_MAX_NAME + 128];
      cJSON_AddStringToObject(b, "region", cf_region_text(g, n->region, where, sizeof where));
    }
    cJSON_AddItemToArray(buckets, b);
  }
  cJSON *pm = cJSON_AddObjectToObject(root, "pass_ms");
  for (int i = 0; i < n_timing; i++) cJSON_AddNumberToObject(pm, timing[i].name, timing[i].ms);
  char *text = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  if (!text) return cf_error(g->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
  puts(text);
  free(text);
  return CF_OK;
}
