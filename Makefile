# The two commands of the quick start: `make demo` and `make test`.
# Both install what is missing (scripts/install-deps.sh), configure and build first.
BUILD ?= build
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc)

.PHONY: deps configure build demo test sanitize bench clean

# The demo needs only the build's packages; tests and benchmarks also need PyTorch and Chromium.
DEPS ?= all
demo: DEPS = demo

deps:
	./scripts/install-deps.sh $(DEPS)

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

configure: deps $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The demo needs only the loom binary: skipping the tests and benchmarks keeps a fresh
# machine's first run well inside its 5 minutes.
demo: configure
	cmake --build $(BUILD) -j $(JOBS) --target loom
	./scripts/demo.sh $(BUILD)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# AddressSanitizer + UBSan build (build-asan) and run of every single-process test and the
# whole MPI suite at 2 ranks. `make test` (and CI) runs the same script as the CTest case
# sanitize.asan_ubsan, in $(BUILD)/asan, leaving out the longest training run.
sanitize: deps
	./scripts/sanitize-tests.sh build-asan

bench: build
	./bench/run_all.sh $(BUILD)

clean:
	rm -rf $(BUILD)
