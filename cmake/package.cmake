# `make deb` (cpack -G DEB in the build tree): one Debian package,
# collfuse_<version>_<arch>.deb, of everything `cmake --install` installs,
# relocated to /usr. Its version is project(VERSION); Depends is what
# dpkg-shlibdeps finds for the ELF files actually linked (libxml2, LLVM,
# graphviz, OpenBLAS, OpenMPI, cJSON, OpenSSL's libcrypto, libc) plus the Python package's
# python3 and python3-numpy. `make deb` packages a tree configured with
# -DCMAKE_INSTALL_PREFIX=/usr (build-deb/), so the library goes to
# lib/<multiarch> and the Python package to lib/python3/dist-packages; no
# RPATH, so the libraries are found by ld.so like any other package's.
#
# One package, not Debian's libcollfuse0/-dev/python3-collfuse split: that
# would need a COMPONENT on every install() rule, and a rule added without
# one would silently drop out of all the packages.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME collfuse)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "collfuse developers")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "graph compiler and executor for collective fusion")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# (the synopsis is CPACK_PACKAGE_DESCRIPTION_SUMMARY; these are the lines under it)
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "collfuse reads graphs with collective operations (its own XML, GraphML,
XLA HLO text, TensorFlow/Ascend GraphDef text), verifies them, buckets and
fuses their collectives and MatMul with its collective, runs them on CPU
ranks (threads or MPI) and draws them as DOT, SVG or PNG.
.
This package holds the collfuse driver, libcollfuse with its header,
pkg-config file and CMake package, and the collfuse Python package.")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "python3, python3-numpy")
# shlibs file for libcollfuse.so.0; cmake/deb/triggers runs ldconfig
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
# byte-compile the Python package on install and remove the .pyc files on
# removal (what dh_python3 adds), so apt-get remove leaves nothing behind
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/cmake/deb/postinst
    ${PROJECT_SOURCE_DIR}/cmake/deb/prerm ${PROJECT_SOURCE_DIR}/cmake/deb/triggers)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
