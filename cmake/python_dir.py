"""Print where `cmake --install` puts the collfuse Python package, relative to PREFIX.

Usage: python3 cmake/python_dir.py PREFIX. The interpreter running this script
decides, through its sysconfig install schemes: Debian's python3 (it has the
'deb_system' scheme) imports /usr/lib/python3/dist-packages for the prefix
/usr ('deb_system') and PREFIX/lib/python3.X/dist-packages for /usr/local
('posix_local', whose paths are /usr/local/... for base /usr); any other
prefix gets that same posix_local layout. Other interpreters get their
'posix_prefix' purelib for PREFIX (lib/python3.X/site-packages).
"""

import os
import sys
import sysconfig

prefix = os.path.normpath(sys.argv[1])
if "deb_system" in sysconfig.get_scheme_names():
    if prefix == "/usr":
        path = sysconfig.get_path("purelib", "deb_system", vars={"base": prefix, "platbase": prefix})
    else:
        local = sysconfig.get_path("purelib", "posix_local", vars={"base": "/usr", "platbase": "/usr"})
        path = os.path.join(prefix, os.path.relpath(local, "/usr/local"))
else:
    path = sysconfig.get_path("purelib", "posix_prefix", vars={"base": prefix, "platbase": prefix})
print(os.path.relpath(path, prefix))
