"""Loading libcollfuse.so with ctypes and declaring its C API.

The library is looked for, in order:
  1. $COLLFUSE_LIBRARY: a path to libcollfuse.so (the build tree's tests set it);
  2. the installed layout: `cmake --install` writes _install.py next to this
     file with the library directory relative to the package;
  3. the package's own directory and its parents' lib*/ folders (a copy of
     the package dropped next to the library);
  4. ctypes.util.find_library("collfuse") (ldconfig, LD_LIBRARY_PATH).
"""

import ctypes
import ctypes.util
import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def _candidates():
    env = os.environ.get("COLLFUSE_LIBRARY")
    if env:
        yield env
        return
    try:
        from . import _install  # written by cmake --install

        yield os.path.normpath(os.path.join(_HERE, _install.LIBDIR_FROM_PACKAGE, "libcollfuse.so.0"))
        yield os.path.normpath(os.path.join(_HERE, _install.LIBDIR_FROM_PACKAGE, "libcollfuse.so"))
    except ImportError:
        pass
    for d in (_HERE, os.path.dirname(_HERE)):
        yield os.path.join(d, "libcollfuse.so")
    found = ctypes.util.find_library("collfuse")
    if found:
        yield found


def _load():
    tried = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(path + " (missing)")
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError(
        "collfuse: cannot find libcollfuse.so; set COLLFUSE_LIBRARY to its path. Tried: "
        + ("; ".join(tried) if tried else "nothing (no install record, find_library found nothing)")
    )


lib = _load()

c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p
c_int = ctypes.c_int
c_int64 = ctypes.c_int64
c_size_t = ctypes.c_size_t
c_double = ctypes.c_double
P = ctypes.POINTER

LOG_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_char_p)

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
    "cf_executable_last_time_ms": (c_double, [c_void_p]),
}

for _name, (_res, _args) in _PROTOS.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args

CF_IO_INPUT = 0
CF_IO_OUTPUT = 1
MAX_DIMS = 8
