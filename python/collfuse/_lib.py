"""Loading libcollfuse.so with ctypes and declaring its C API.

find_library() looks for the library in this order and loads the first
candidate that exists and loads:
  1. $COLLFUSE_LIBRARY, when set and not empty: that path and nothing else
     (an override: a path, or a bare name for the system loader).
  2. The installed layout: when this package sits in
     PREFIX/lib*/python3*/{dist,site}-packages/collfuse (Debian's
     /usr/lib/python3/dist-packages, /usr/local/lib/python3.11/dist-packages,
     a venv's lib/python3.11/site-packages), the prefix's library directories
     PREFIX/lib/<multiarch> (e.g. /usr/lib/x86_64-linux-gnu) and PREFIX/lib,
     each with libcollfuse.so.<major> (the runtime library's SONAME) and then
     libcollfuse.so.
  3. The build tree: when this package is the source tree's python/collfuse
     (python/'s parent holds CMakeLists.txt), ROOT/build/libcollfuse.so (the
     README's `cmake -B build`; other build directories need step 1).
  4. The system loader: ctypes.util.find_library("collfuse") (ldconfig's
     cache, LD_LIBRARY_PATH), loaded by the name it returns.
Paths are the package's as imported (os.path.abspath of this file, links not
resolved). A library that loads but lacks a function of the API below (another
library, an older collfuse) does not count as loaded. When nothing loads,
ImportError lists every place looked at and why each failed.
"""

import ctypes
import ctypes.util
import os
import sys
import sysconfig

from ._version import __version__

_HERE = os.path.dirname(os.path.abspath(__file__))
_NAMES = ("libcollfuse.so." + __version__.split(".")[0], "libcollfuse.so")


def _prefix_of(pkg_dir):
    """PREFIX when pkg_dir is PREFIX/lib*/python3*/{dist,site}-packages/collfuse, else None."""
    packages = os.path.dirname(pkg_dir)
    pyver = os.path.dirname(packages)
    libdir = os.path.dirname(pyver)
    if (os.path.basename(packages) in ("dist-packages", "site-packages")
            and os.path.basename(pyver).startswith("python3")
            and os.path.basename(libdir).startswith("lib")):
        return os.path.dirname(libdir)
    return None


def _candidates(pkg_dir=_HERE, environ=os.environ):
    """(step, candidate) pairs in find_library()'s order (see the module's doc)."""
    env = environ.get("COLLFUSE_LIBRARY")
    if env:
        yield "COLLFUSE_LIBRARY", env
        return
    prefix = _prefix_of(pkg_dir)
    if prefix is not None:
        multiarch = sysconfig.get_config_var("MULTIARCH") or getattr(sys.implementation, "_multiarch", "")
        dirs = [os.path.join(prefix, "lib", multiarch)] if multiarch else []
        for d in dirs + [os.path.join(prefix, "lib")]:
            for name in _NAMES:
                yield "installed", os.path.join(d, name)
    root = os.path.dirname(os.path.dirname(pkg_dir))
    if (os.path.basename(os.path.dirname(pkg_dir)) == "python"
            and os.path.isfile(os.path.join(root, "CMakeLists.txt"))):
        yield "build tree", os.path.join(root, "build", "libcollfuse.so")
    yield "system loader", None


def find_library(pkg_dir=_HERE, environ=os.environ):
    """Load libcollfuse.so as the module's doc says; returns the ctypes.CDLL.

    Raises ImportError naming each place looked at when none loads."""
    tried = []
    for step, path in _candidates(pkg_dir, environ):
        if path is None:
            path = ctypes.util.find_library("collfuse")
            if not path:
                tried.append('%s: ctypes.util.find_library("collfuse") found nothing' % step)
                continue
        elif os.path.sep in path and not os.path.exists(path):
            tried.append("%s: %s (missing)" % (step, path))
            continue
        try:
            found = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s: %s (%s)" % (step, path, e))
            continue
        missing = [name for name in _PROTOS if not hasattr(found, name)]
        if not missing:
            return found
        tried.append("%s: %s (not libcollfuse.so %s: it has no %s)" % (step, path, __version__, missing[0]))
    raise ImportError(
        "collfuse: cannot load libcollfuse.so; install collfuse, build it in the source"
        " tree's build/, or set COLLFUSE_LIBRARY to its path. Looked at:\n  " + "\n  ".join(tried))


c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p
c_int = ctypes.c_int
c_int64 = ctypes.c_int64
c_size_t = ctypes.c_size_t
c_double = ctypes.c_double
P = ctypes.POINTER

LOG_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_char_p)
RUN_DONE_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_char_p)  # cf_run_done_fn

_PROTOS = {
    # name: (restype, argtypes)
    "cf_version": (c_char_p, []),
    "cf_version_number": (c_int, []),
    "cf_context_create": (c_int, [P(c_void_p)]),
    "cf_context_destroy": (None, [c_void_p]),
    "cf_context_errmsg": (c_char_p, [c_void_p]),
    "cf_context_set_log": (None, [c_void_p, LOG_FN, c_void_p]),
    "cf_graph_load": (c_int, [c_void_p, c_char_p, P(c_void_p)]),
    "cf_graph_parse": (c_int, [c_void_p, c_char_p, c_char_p, c_size_t, P(c_void_p)]),
    "cf_graph_destroy": (None, [c_void_p]),
    "cf_graph_verify": (c_int, [c_void_p, c_char_p]),
    "cf_graph_write_xml": (c_int, [c_void_p, c_char_p]),
    "cf_graph_write_dot": (c_int, [c_void_p, c_char_p]),
    "cf_graph_node_count": (c_size_t, [c_void_p]),
    "cf_graph_collective_count": (c_size_t, [c_void_p]),
    "cf_target_name": (c_char_p, [c_size_t]),
    "cf_graph_create": (c_int, [c_void_p, c_char_p, c_int, P(c_void_p)]),
    "cf_graph_set_world_size": (c_int, [c_void_p, c_int]),
    "cf_graph_define_group": (c_int, [c_void_p, c_char_p, P(c_int), c_size_t]),
    "cf_graph_define_group_parts": (c_int, [c_void_p, c_char_p, P(c_int), c_size_t, c_size_t]),
    "cf_graph_add_op": (c_int, [c_void_p, c_char_p, c_char_p, P(c_char_p), c_size_t]),
    "cf_graph_add_op_attrs": (c_int, [c_void_p, c_char_p, c_char_p, P(c_char_p), c_size_t, P(c_char_p),
                                      P(c_char_p), c_size_t]),
    "cf_graph_add_constant": (c_int, [c_void_p, c_char_p, c_char_p, P(c_int64), c_int, c_double]),
    "cf_graph_add_opaque": (c_int, [c_void_p, c_char_p, c_char_p, P(c_char_p), c_size_t, c_char_p,
                                    P(c_int64), c_int]),
    "cf_graph_set_attr": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p]),
    "cf_graph_node_name": (c_char_p, [c_void_p, c_size_t]),
    "cf_graph_collective_name": (c_char_p, [c_void_p, c_size_t]),
    "cf_graph_node_op": (c_char_p, [c_void_p, c_char_p]),
    "cf_graph_get_attr": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p, c_size_t]),
    "cf_options_create": (c_int, [c_void_p, P(c_void_p)]),
    "cf_options_set": (c_int, [c_void_p, c_char_p, c_char_p]),
    "cf_options_destroy": (None, [c_void_p]),
    "cf_graph_run_pipeline": (c_int, [c_void_p, c_char_p, c_void_p]),
    "cf_executable_create": (c_int, [c_void_p, c_void_p, P(c_void_p)]),
    "cf_executable_destroy": (None, [c_void_p]),
    "cf_executable_check": (c_int, [c_void_p]),
    "cf_executable_ranks": (c_int, [c_void_p]),
    "cf_executable_io_count": (c_size_t, [c_void_p, c_int]),
    "cf_executable_io_find": (c_int, [c_void_p, c_int, c_char_p]),
    "cf_executable_io_name": (c_char_p, [c_void_p, c_int, c_size_t]),
    "cf_executable_io_dtype": (c_char_p, [c_void_p, c_int, c_size_t]),
    "cf_executable_io_shape": (c_int, [c_void_p, c_int, c_size_t, P(c_int64)]),
    "cf_executable_io_bytes": (c_size_t, [c_void_p, c_int, c_size_t]),
    "cf_executable_io_in_place": (c_int, [c_void_p, c_int, c_size_t]),
    "cf_executable_run": (c_int, [c_void_p, P(c_void_p), P(c_void_p)]),
    "cf_executable_run_rank": (c_int, [c_void_p, c_int, P(c_void_p), P(c_void_p)]),
    "cf_runner_create": (c_int, [c_void_p, P(c_void_p)]),
    "cf_runner_wait": (None, [c_void_p]),
    "cf_runner_destroy": (None, [c_void_p]),
    "cf_executable_start_rank": (c_int, [c_void_p, c_void_p, c_int, P(c_void_p), P(c_void_p), RUN_DONE_FN,
                                         c_void_p]),
    "cf_executable_last_time_ms": (c_double, [c_void_p]),
    "cf_executable_last_copies": (c_size_t, [c_void_p, P(c_size_t)]),
    "cf_executable_set_trace": (c_int, [c_void_p, c_char_p]),
    "cf_launcher_find": (c_int, [c_void_p, P(c_char_p), P(c_char_p), P(c_int), P(c_int), P(c_int), P(c_int)]),
    "cf_executable_bucket_count": (c_size_t, [c_void_p]),
    "cf_executable_bucket_name": (c_char_p, [c_void_p, c_size_t]),
    "cf_executable_bucket_bytes": (c_size_t, [c_void_p, c_size_t, c_int]),
    "cf_executable_io_bucket": (c_int, [c_void_p, c_int, c_size_t, P(c_size_t)]),
    "cf_executable_bucket_bind": (c_int, [c_void_p, c_int, c_size_t, c_int, c_void_p]),
    "cf_executable_bucket_buffer": (c_void_p, [c_void_p, c_int, c_size_t, c_int]),
    "cf_shm_register": (c_int, [c_void_p, c_void_p, c_size_t, c_int]),
    "cf_shm_unregister": (c_int, [c_void_p, c_void_p]),
    "cf_shm_memory": (c_int, [c_void_p, c_size_t, P(c_int)]),
}

lib = find_library()

for _name, (_res, _args) in _PROTOS.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args

CF_IO_INPUT = 0
CF_IO_OUTPUT = 1
MAX_DIMS = 8
