/* gen_algo_doc.c - prints docs/executor.md's table of AllReduce algorithms
 * from the executor's algorithm table (executor/algo.c): one row per
 * algorithm of collfuse's own (the transport's own, `mpi-native`, has a
 * section of its own there), in table order, with its name, what it does,
 * its steps and the order it reduces in.
 *
 * A test-only program (never installed): ctest e2e/doc_algos compares its
 * output with the section of docs/executor.md between the marker comments,
 * and `cmake --build build --target doc-algos` rewrites that section
 * (tests/e2e/doctest.py algos).
 */
#include "executor/algo.h"

#include <stdio.h>

int main(void) {
  printf("| `--algo` | what | steps | order of reduction |\n");
  printf("|---|---|---|---|\n");
  for (int a = 0; a < cf_algo_count; a++) {
    const cf_algo_info *r = &cf_algo_table[a];
    if (r->native) continue;
    printf("| `%s` | %s | %s | %s |\n", r->name, r->description, r->steps, r->order);
  }
  return 0;
}
