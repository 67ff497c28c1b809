"""What the Python test scripts share (each is run as a script, so this
folder is on its path): failing with the script's name, and expecting a
call to raise an exception that says given words."""

import os
import sys


def fail(msg):
    """Exit with 'SCRIPT: msg' (SCRIPT: the running script's name without .py)."""
    sys.exit("%s: %s" % (os.path.splitext(os.path.basename(sys.argv[0]))[0], msg))


def expect_raises(kind, fn, *words):
    """fn() must raise kind, its message saying each of words."""
    try:
        fn()
    except kind as e:
        for w in words:
            if w not in str(e):
                fail("%s: %r does not say %r" % (kind.__name__, str(e), w))
        return
    fail("no %s (want one saying %s)" % (kind.__name__, words))
