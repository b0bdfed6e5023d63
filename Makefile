# Thin wrapper over CMake. `make run` and `make test` work on a fresh Debian
# bookworm machine: they install the packages first (scripts/install-deps.sh).
BUILD    ?= build
TYPE     ?= RelWithDebInfo
SANITIZE ?=
JOBS     ?= $(shell nproc)
FUZZ_SECONDS ?= 60
FUZZ_DATA_SECONDS ?= 30
FUZZ_REPL_SECONDS ?= 10
CMAKE_FLAGS ?=

.PHONY: all deps configure build run test test-tsan soak bench fuzz clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(TYPE) -DMAESTRO_SANITIZE=$(SANITIZE) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/maestro-run models/tiny_mllm.sect

test: build
	@ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# The actor tests and the planner's threads under ThreadSanitizer
# (docs/runtime.md, "Checking with TSan").
test-tsan: deps
	@cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMAESTRO_SANITIZE=tsan $(CMAKE_FLAGS) >/dev/null
	@cmake --build build-tsan -j $(JOBS) --target test_actors test_plan_threads
	@ctest --test-dir build-tsan -R 'unit\.actors|unit\.plan_threads' --output-on-failure

# The checkpoint soak (tests/faults): random SIGINT/SIGTERM/kill -9 and
# resumes for SOAK_SECONDS; `make test` runs a 30 s version.
SOAK_SECONDS ?= 600
soak: build
	@/usr/bin/python3 tests/faults/faults_test.py soak $(BUILD)/maestro-run $(SOAK_SECONDS)

bench: build
	@bash bench/run.sh $(BUILD)

fuzz: deps
	@cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMAESTRO_FUZZ=ON \
	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target fuzz_frontend fuzz_data fuzz_repl
	@bash tests/fuzz/run.sh build-fuzz $(FUZZ_SECONDS)
	@bash tests/fuzz/run.sh build-fuzz $(FUZZ_DATA_SECONDS) fuzz_data
	@bash tests/fuzz/run.sh build-fuzz $(FUZZ_REPL_SECONDS) fuzz_repl

clean:
	rm -rf build build-*
