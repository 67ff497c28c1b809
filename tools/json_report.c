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
  const char *m = cf_node_str(n, CF_A_MEMBERS, NULL);
  if (!m || cf_op_table[n->op].cat != CF_CAT_FUSED_COLLECTIVE) {
    cJSON_AddItemToArray(arr, cJSON_CreateString(n->name));
    return arr;
  }
  char buf[4096];
  while (*m) {
    size_t k = 0;
    while (m[k] && m[k] != ',') k++;
    size_t c = k < sizeof buf - 1 ? k : sizeof buf - 1;
    memcpy(buf, m, c);
    buf[c] = 0;
    cJSON_AddItemToArray(arr, cJSON_CreateString(buf));
    m += k + (m[k] == ',');
  }
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
      const char *m = cf_node_str(n, CF_A_MEMBERS, "");
      const char *cut = strrchr(m, ',');
      size_t mm_len = cut ? (size_t)(cut - m) : 0;
      char *mm = malloc(mm_len + 1);
      if (!mm) {
        cJSON_Delete(o);
        cJSON_Delete(root);
        return cf_error(g->ctx, CF_ERR_NO_MEMORY, NULL, 0, "out of memory");
      }
      memcpy(mm, m, mm_len);
      mm[mm_len] = 0;
      cJSON_AddStringToObject(o, "matmul", mm);
      cJSON_AddStringToObject(o, "collective", cut ? cut + 1 : "");
      cJSON *list = cJSON_AddArrayToObject(o, "matmuls");
      for (char *p = mm; *mm && p;) {
        char *e = strchr(p, ',');
        if (e) *e = 0;
        cJSON_AddItemToArray(list, cJSON_CreateString(p));
        p = e ? e + 1 : NULL;
      }
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
    cJSON_AddStringToObject(b, "dtype", cf_dtype_name(in->dtype));
    if (cf_op_reduces(n->op))
      cJSON_AddStringToObject(b, "reduction", cf_reduction_name(cf_node_reduction(n)));
    else
      cJSON_AddNullToObject(b, "reduction");
    cJSON_AddStringToObject(b, "group", cf_node_group(n));
    cJSON_AddStringToObject(b, "reason", cf_report_reason(n, buf, sizeof buf));
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
