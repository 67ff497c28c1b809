/* gen_env_doc.c - prints docs/cli.md's "Environment" table from ir/env.c:
 * every variable collfuse reads, the value it takes, its default and its
 * meaning.
 *
 * A test-only program (never installed): ctest e2e/doc_env compares its
 * output with the section of docs/cli.md between the marker comments, and
 * `cmake --build build --target doc-env` rewrites that section
 * (tests/e2e/doctest.py env). The man page's ENVIRONMENT section is written
 * from the same table (tools/gendocs.c).
 */
#include "ir/ir.h"

#include <stdio.h>

int main(void) {
  printf("| variable | value | default | meaning |\n|---|---|---|---|\n");
  for (int v = 0; v < CF_ENV_COUNT; v++) {
    const cf_env_knob *k = &cf_env_table[v];
    printf("| `%s` | %s | %s | %s |\n", k->name, k->value, k->dflt, k->doc);
  }
  return 0;
}
