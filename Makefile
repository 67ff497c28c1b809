# Convenience wrapper around CMake (the README's commands).
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all deps configure build test demo install deb doc-ops clean

all: build

deps:
	@bash scripts/install-deps

configure: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

demo: build
	@bash scripts/demo.sh $(BUILD)

install: build
	@cmake --install $(BUILD)

# $(BUILD)/collfuse_<version>_<arch>.deb: what `install` installs, under /usr
# (cmake/package.cmake)
deb: build
	@cd $(BUILD) && cpack -G DEB

# docs/format.md's ops and attributes, generated from ir/ops.def
doc-ops: configure
	@cmake --build $(BUILD) --target doc-ops

clean:
	@rm -rf $(BUILD)
