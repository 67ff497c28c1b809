/* testctl_off.c - cf_test_control in a build without tests: no fault is
 * ever injected (testctl.c is the test builds' one). */
#include "tools.h"

#include <stdarg.h>

int cf_test_control(cf_testctl op, ...) {
  if (op == CF_TESTCTL_VERIFY_WINDOW) { /* the default window */
    va_list ap;
    va_start(ap, op);
    *va_arg(ap, int64_t *) = 0;
    va_end(ap);
  }
  return 0;
}
