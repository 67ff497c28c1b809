# Convenience wrapper around CMake (the README's commands).
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all deps configure build test check-long demo install deb doc-ops clean

all: build

deps:
	@bash scripts/install-deps

configure: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# the suite without the long stress and scale runs (ctest label long,
# tests/CMakeLists.txt), which check-long runs
test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE long

check-long: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -L long

demo: build
	@bash scripts/demo.sh $(BUILD)

install: build
	@cmake --install $(BUILD)

# $(DEB_BUILD)/collfuse_<version>_<arch>.deb: what `install` installs from a
# tree configured for /usr, so the package has Debian's layout (the library
# in lib/<multiarch>, the Python package in lib/python3/dist-packages) while
# $(BUILD) keeps the prefix `make install` uses (cmake/package.cmake)
DEB_BUILD ?= build-deb
deb: deps
	@cmake -S . -B $(DEB_BUILD) -DCMAKE_INSTALL_PREFIX=/usr -DCOLLFUSE_TESTS=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(DEB_BUILD) -j $(JOBS)
	@cd $(DEB_BUILD) && cpack -G DEB

# docs/format.md's ops and attributes, generated from ir/ops.def
doc-ops: configure
	@cmake --build $(BUILD) --target doc-ops

clean:
	@rm -rf $(BUILD)
