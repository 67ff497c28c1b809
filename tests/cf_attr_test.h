/* cf_attr_test.h - an attribute as the text the XML carries ("a,b" for a
 * bucket's members, "0,64" for its offsets), for tests that compare it with
 * a literal. */
#ifndef COLLFUSE_CF_ATTR_TEST_H
#define COLLFUSE_CF_ATTR_TEST_H

#include "ir/ir.h"

/* n's attribute id as text, dflt when unset; the text stays until eight
 * more calls. */
static inline const char *attr_text(const cf_node *n, cf_attr_id id, const char *dflt) {
  static char buf[8][1 << 16];
  static int k;
  const cf_attr *a = cf_node_attr(n, id);
  if (!a) return dflt;
  k = (k + 1) % 8;
  cf_attr_text(a, buf[k], sizeof buf[k]);
  return buf[k];
}

#endif
