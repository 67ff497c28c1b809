/* fuzz_reader.c - libFuzzer target for one of collfuse's readers, picked at
 * build time with -DCF_FUZZ_FORMAT_<xml|graphml|hlo|stablehlo|pbtxt> (CMake
 * builds one executable per format from this file: fuzz_xml, fuzz_graphml,
 * fuzz_hlo, fuzz_stablehlo, fuzz_pbtxt).
 *
 * Every input must either be refused with a message naming the file (never a
 * crash, a sanitizer report, a hang or a leak) or give a graph that survives
 * the round trip the driver promises: written as native XML by compile -o,
 * the graph reads back. A graph that does not is a bug, so the target
 * aborts and libFuzzer keeps the input.
 */
#include "frontend/frontend.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(CF_FUZZ_FORMAT_xml)
#define NAME "fuzz.xml"
#elif defined(CF_FUZZ_FORMAT_graphml)
#define NAME "fuzz.graphml"
#elif defined(CF_FUZZ_FORMAT_hlo)
#define NAME "fuzz.hlo"
#elif defined(CF_FUZZ_FORMAT_stablehlo)
#define NAME "fuzz.mlir"
#elif defined(CF_FUZZ_FORMAT_pbtxt)
#define NAME "fuzz.pbtxt"
#else
#error "define CF_FUZZ_FORMAT_xml, _graphml, _hlo, _stablehlo or _pbtxt"
#endif

static void round_trip(cf_context *ctx, const cf_graph *g) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return;
  cf_status st = cf_xml_write(g, f);
  fclose(f);
  if (!st) {
    cf_graph *back = NULL;
    if (cf_frontend_parse(ctx, "roundtrip.xml", buf, len, &back)) {
      fprintf(stderr, "round trip failed: %s\n--- written XML ---\n%.*s\n", cf_errmsg(ctx),
              (int)(len > 4000 ? 4000 : len), buf);
      abort();
    }
    cf_graph_release(back);
  }
  free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static cf_context *ctx;
  if (!ctx && cf_ctx_create(&ctx)) abort();
  cf_graph *g = (cf_graph *)0x1;
  /* the reader NAME's extension picks, then the frontend's checks */
  cf_status st = cf_frontend_parse(ctx, NAME, (const char *)data, size, &g);
  if (st) {
    /* refused: no graph, and a message that names the file */
    if (g || strncmp(cf_errmsg(ctx), NAME, strlen(NAME)) != 0) {
      fprintf(stderr, "bad refusal: status %d, graph %p, message '%s'\n", st, (void *)g,
              cf_errmsg(ctx));
      abort();
    }
    return 0;
  }
  round_trip(ctx, g);
  cf_graph_release(g);
  return 0;
}
