/* gen_ops_doc.c - prints docs/format.md's reference of ops and attributes
 * from ir/ops.def: every op with its operand count, category and attributes,
 * every attribute with its kind, default and meaning, and the aliases.
 *
 * A test-only program (never installed): ctest e2e/doc_ops compares its
 * output with the section of docs/format.md between the marker comments,
 * and `cmake --build build --target doc-ops` rewrites that section
 * (tests/e2e/doctest.py ops). The names and masks come from the IR's tables;
 * the defaults and meanings, which the IR does not keep, from a second pass
 * over ops.def's ATTR rows.
 */
#include "ir/ir.h"

#include <stdio.h>

static const struct {
  const char *dflt, *doc;
} attr_doc[CF_A_COUNT] = {
#define ATTR(id, nm, kind, dflt, doc) [CF_A_##id] = {dflt, doc},
#include "ir/ops.def"
#undef ATTR
};

static const char *category_name(cf_category c) {
  switch (c) {
  case CF_CAT_SOURCE: return "source";
  case CF_CAT_SINK: return "sink";
  case CF_CAT_COMPUTE: return "compute";
  case CF_CAT_COLLECTIVE: return "collective";
  case CF_CAT_FUSED_COLLECTIVE: return "fused collective";
  case CF_CAT_FUSED_MATMUL: return "fused MatMul + collective";
  }
  return "?";
}

/* The kind column: the values of the enumerated kinds come from the IR. */
static void print_kind(cf_attr_kind k) {
  switch (k) {
  case CF_AK_INT: printf("integer"); return;
  case CF_AK_STR: printf("string"); return;
  case CF_AK_DTYPE: printf("dtype"); return;
  case CF_AK_SHAPE: printf("shape"); return;
  case CF_AK_FLOAT: printf("number"); return;
  case CF_AK_RED:
    for (int r = 0; r < CF_RED_COUNT; r++)
      printf("%s`%s`", r ? " " : "", cf_reduction_name((cf_reduction)r));
    return;
  case CF_AK_LAYOUT:
    printf("`%s` `%s`", cf_layout_name(CF_LAYOUT_STACK), cf_layout_name(CF_LAYOUT_CONCAT));
    return;
  case CF_AK_STRS: printf("list of strings"); return;
  case CF_AK_INTS: printf("list of integers"); return;
  }
}

static void print_attrs(uint32_t mask) {
  int n = 0;
  for (int a = 0; a < CF_A_COUNT; a++)
    if (mask & (1u << a)) printf("%s`%s`", n++ ? " " : "", cf_attr_table[a].name);
  if (!n) printf("none");
}

int main(void) {
  printf("| op | operands | category | required attributes | optional attributes |\n");
  printf("|---|---|---|---|---|\n");
  for (int i = 1; i < CF_OP_COUNT; i++) {
    const cf_op_info *o = &cf_op_table[i];
    printf("| `%s` | ", o->name);
    if (o->max_in < 0)
      printf("%d or more", o->min_in);
    else if (o->min_in == o->max_in)
      printf("%d", o->min_in);
    else
      printf("%d to %d", o->min_in, o->max_in);
    printf(" | %s | ", category_name(o->cat));
    print_attrs(o->required);
    printf(" | ");
    print_attrs(o->allowed & ~o->required);
    printf(" |\n");
  }

  printf("\n| attribute | kind | default | meaning |\n|---|---|---|---|\n");
  for (int a = 0; a < CF_A_COUNT; a++) {
    printf("| `%s` | ", cf_attr_table[a].name);
    print_kind(cf_attr_table[a].kind);
    printf(" | %s | %s |\n", attr_doc[a].dflt, attr_doc[a].doc);
  }

  printf("\nOther names the readers accept:");
  for (size_t i = 0; i < cf_op_alias_count; i++) {
    const cf_op_alias *al = &cf_op_aliases[i];
    printf("%s `%s` (`%s`", i ? "," : "", al->name, cf_op_table[al->op].name);
    if (al->layout >= 0) printf(", `layout` `%s`", cf_layout_name((cf_layout)al->layout));
    printf(")");
  }
  printf(".\n");
  return 0;
}
