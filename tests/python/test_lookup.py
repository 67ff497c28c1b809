#!/usr/bin/python3
"""Where the collfuse package finds libcollfuse.so (ctest e2e/python_lookup).

test_lookup.py LIBRARY VERSION SRC: LIBRARY is the build's libcollfuse.so,
VERSION CMake's project(VERSION). Each step of collfuse/_lib.py's lookup is
tried on a copy of the package laid out as that step expects (a source tree,
an install prefix, a bare directory), imported by Debian's python3 from
another directory with COLLFUSE_LIBRARY unset unless the step is the override.
"""

import _ctypes
import ctypes.util
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

LIB, VERSION, SRC = sys.argv[1:4]
# ctest's CF_TEST_TIME_SCALE (tests/CMakeLists.txt): slow or busy machines
TIME_SCALE = int(os.environ.get("CF_TEST_TIME_SCALE", "1"))
del sys.argv[1:4]
PKG = os.path.join(SRC, "python", "collfuse")
SONAME = "libcollfuse.so." + VERSION.split(".")[0]
SHOW = "import collfuse; print(collfuse._lib.lib._name, collfuse.__version__, collfuse.version())"
# The failure message, with the system loader finding nothing even where
# collfuse is installed system-wide.
NOSYS = "import ctypes.util; ctypes.util.find_library = lambda name: None\n"
MULTIARCH = subprocess.run(["/usr/bin/python3", "-c",
                            "import sysconfig; print(sysconfig.get_config_var('MULTIARCH') or '')"],
                           capture_output=True, text=True, check=True).stdout.strip()


def copy_package(dest_parent):
    os.makedirs(dest_parent, exist_ok=True)
    shutil.copytree(PKG, os.path.join(dest_parent, "collfuse"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    return dest_parent


def copy_library(dest):
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    shutil.copyfile(LIB, dest)
    return dest


class Lookup(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cf_lookup_")
        self.cwd = os.path.join(self.tmp, "elsewhere")
        os.makedirs(self.cwd)

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def py(self, path, code=SHOW, **env):
        e = {k: v for k, v in os.environ.items()
             if k not in ("COLLFUSE_LIBRARY", "LD_LIBRARY_PATH", "PYTHONPATH")}
        e.update(PYTHONPATH=path, PYTHONDONTWRITEBYTECODE="1", **env)
        return subprocess.run(["/usr/bin/python3", "-c", code], cwd=self.cwd, env=e,
                              capture_output=True, text=True, timeout=120 * TIME_SCALE)

    def loads(self, p, expect_lib):
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.split(), [expect_lib, VERSION, VERSION])

    def test_version(self):
        p = self.py(os.path.join(SRC, "python"), COLLFUSE_LIBRARY=LIB)
        self.loads(p, LIB)

    def test_override(self):
        path = copy_package(os.path.join(self.tmp, "prefix", "lib", "python3", "dist-packages"))
        copy_library(os.path.join(self.tmp, "prefix", "lib", SONAME))
        other = copy_library(os.path.join(self.tmp, "other", "libcollfuse.so"))
        self.loads(self.py(path, COLLFUSE_LIBRARY=other), other)
        # the override is the only place looked at, even with a library beside the package
        missing = os.path.join(self.tmp, "nowhere", "libcollfuse.so")
        p = self.py(path, COLLFUSE_LIBRARY=missing)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("ImportError: collfuse: cannot load libcollfuse.so;", p.stderr)
        self.assertIn("Looked at:\n  COLLFUSE_LIBRARY: %s (missing)\n" % missing, p.stderr)
        self.assertNotIn("installed:", p.stderr)
        # a library that loads but is not collfuse's (by name, by path): the
        # ImportError, never an AttributeError
        for wrong in (ctypes.util.find_library("m"), _ctypes.__file__):
            p = self.py(path, COLLFUSE_LIBRARY=wrong)
            self.assertNotEqual(p.returncode, 0)
            self.assertNotIn("AttributeError", p.stderr)
            self.assertIn("ImportError: collfuse: cannot load libcollfuse.so;", p.stderr)
            self.assertIn("Looked at:\n  COLLFUSE_LIBRARY: %s (not libcollfuse.so %s: it has no cf_version)\n"
                          % (wrong, VERSION), p.stderr)

    def test_build_tree(self):
        root = os.path.join(self.tmp, "src")
        copy_package(os.path.join(root, "python"))
        open(os.path.join(root, "CMakeLists.txt"), "w").close()
        built = copy_library(os.path.join(root, "build", "libcollfuse.so"))
        self.loads(self.py(os.path.join(root, "python")), built)
        # the real source tree, when this build is its build/
        own = os.path.join(SRC, "build", "libcollfuse.so")
        if os.path.exists(own) and os.path.samefile(own, LIB):
            self.loads(self.py(os.path.join(SRC, "python")), own)

    def test_installed_prefix(self):
        # Debian's /usr layout: lib/python3/dist-packages, the library in lib/<multiarch>
        prefix = os.path.join(self.tmp, "usr")
        path = copy_package(os.path.join(prefix, "lib", "python3", "dist-packages"))
        libdir = os.path.join(prefix, "lib", MULTIARCH) if MULTIARCH else os.path.join(prefix, "lib")
        installed = copy_library(os.path.join(libdir, SONAME))
        self.loads(self.py(path), installed)
        # /usr/local's and a venv's layout: lib/python3.X/{dist,site}-packages, the library in lib
        for packages in ("dist-packages", "site-packages"):
            prefix = os.path.join(self.tmp, packages)
            path = copy_package(os.path.join(prefix, "lib", "python3.11", packages))
            installed = copy_library(os.path.join(prefix, "lib", "libcollfuse.so"))
            self.loads(self.py(path), installed)

    def test_system_loader(self):
        path = copy_package(os.path.join(self.tmp, "plain"))
        libdir = os.path.dirname(copy_library(os.path.join(self.tmp, "ld", SONAME)))
        os.symlink(SONAME, os.path.join(libdir, "libcollfuse.so"))
        p = self.py(path, LD_LIBRARY_PATH=libdir)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.split()[0], SONAME)  # found by name, loaded by the loader

    def test_failure_lists_every_place(self):
        prefix = os.path.join(self.tmp, "usr")
        path = copy_package(os.path.join(prefix, "lib", "python3", "dist-packages"))
        p = self.py(path, NOSYS + "import collfuse")
        self.assertNotEqual(p.returncode, 0)
        places = ["installed: %s (missing)" % os.path.join(d, n)
                  for d in ([os.path.join(prefix, "lib", MULTIARCH)] if MULTIARCH else [])
                  + [os.path.join(prefix, "lib")]
                  for n in (SONAME, "libcollfuse.so")]
        expect = ("ImportError: collfuse: cannot load libcollfuse.so; install collfuse, build it in"
                  " the source tree's build/, or set COLLFUSE_LIBRARY to its path. Looked at:\n  "
                  + "\n  ".join(places) +
                  '\n  system loader: ctypes.util.find_library("collfuse") found nothing\n')
        self.assertTrue(p.stderr.endswith(expect), p.stderr)
        # a source tree without a build: the build tree's path is named
        root = os.path.join(self.tmp, "src")
        copy_package(os.path.join(root, "python"))
        open(os.path.join(root, "CMakeLists.txt"), "w").close()
        p = self.py(os.path.join(root, "python"), NOSYS + "import collfuse")
        self.assertIn("Looked at:\n  build tree: %s (missing)\n  system loader:"
                      % os.path.join(root, "build", "libcollfuse.so"), p.stderr)


if __name__ == "__main__":
    unittest.main()
