# Thin wrapper over CMake. `make` builds, `make test` runs every test,
# `make demo` runs the main job, `make asan` runs the unit tests under
# AddressSanitizer + UBSan, `make tsan` the threaded tests under
# ThreadSanitizer, `make bench` runs the benchmarks, `make install
# PREFIX=DIR` installs the libraries, header, kvbound.pc and the tool;
# `make cross-aarch64` and `make test-aarch64` build for ARM and test under qemu.
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# tests run at once under make asan: its tests mostly use one core each
ASAN_TEST_JOBS ?= $(JOBS)
CMAKE_FLAGS ?=

PREFIX ?= /usr/local

.PHONY: all build test demo asan tsan bench fuzz install clean cross-aarch64 test-aarch64

all: build

build:
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# tests run at once under make test (KVB_TEST_JOBS overrides): one per core keeps it under ten minutes on two
TEST_JOBS ?= $(JOBS)
test: build
	@KVB_TEST_JOBS=$${KVB_TEST_JOBS:-$(TEST_JOBS)} sh tests/run_tests.sh $(BUILD)

demo: build
	@$(BUILD)/kvbound lab --scenario all --out lab-report

# the sanitizer builds are Debug at -O1: a test ran a quarter faster than at -O0 here (make asan and tsan had
# taken 25 and 21 minutes of CI's 60 on two cores), with the same reports
SAN_CFLAGS ?= -O1
asan:
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DKVB_SANITIZE=ON -DCMAKE_C_FLAGS="$(SAN_CFLAGS)" $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	@KVB_TEST_JOBS=$(ASAN_TEST_JOBS) KVB_TEST_QUICK=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 sh tests/run_tests.sh $(ASAN_BUILD)

# the threaded tests (thread pool, batches, attention workers) under ThreadSanitizer
TSAN_TESTS ?= test_batch test_core test_cache test_streaming_model test_recall
tsan:
	@cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DKVB_TSAN=ON -DCMAKE_C_FLAGS="$(SAN_CFLAGS)" $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(TSAN_BUILD) -j $(JOBS) --target $(TSAN_TESTS)
	@set -e; for t in $(TSAN_TESTS); do \
	  KVB_TEST_QUICK=1 TSAN_OPTIONS=halt_on_error=1:exitcode=66:second_deadlock_stack=1 $(TSAN_BUILD)/$$t > $(TSAN_BUILD)/$$t.log 2>&1 || { cat $(TSAN_BUILD)/$$t.log; exit 1; }; \
	  ! grep -q 'WARNING: ThreadSanitizer' $(TSAN_BUILD)/$$t.log || { cat $(TSAN_BUILD)/$$t.log; exit 1; }; \
	  echo "$$t: $$(tail -n 1 $(TSAN_BUILD)/$$t.log)"; done
	@# kvbound serve (connection threads, the scheduler, the store worker and its checkpoints, the connection guard, the batch's pool) through its HTTP tests
	@if grep -q 'KVB_HAVE_SERVE:INTERNAL=ON' $(TSAN_BUILD)/CMakeCache.txt; then \
	  cmake --build $(TSAN_BUILD) -j $(JOBS) --target kvbound && rm -f $(TSAN_BUILD)/serve-tsan.* && \
	  { TSAN_OPTIONS=halt_on_error=0:log_path=$$(pwd)/$(TSAN_BUILD)/serve-tsan sh tests/test_serve_cli.sh $(TSAN_BUILD) && \
	    TSAN_OPTIONS=halt_on_error=0:log_path=$$(pwd)/$(TSAN_BUILD)/serve-tsan sh tests/test_serve_faults_cli.sh $(TSAN_BUILD) && \
	    TSAN_OPTIONS=halt_on_error=0:log_path=$$(pwd)/$(TSAN_BUILD)/serve-tsan sh tests/test_serve_store_cli.sh $(TSAN_BUILD) && \
	    KVB_TEST_TSAN=1 TSAN_OPTIONS=halt_on_error=0:log_path=$$(pwd)/$(TSAN_BUILD)/serve-tsan sh tests/test_serve_implicit_cli.sh $(TSAN_BUILD); } > $(TSAN_BUILD)/serve.log 2>&1; rc=$$?; \
	  if ls $(TSAN_BUILD)/serve-tsan.* >/dev/null 2>&1; then cat $(TSAN_BUILD)/serve-tsan.*; exit 1; fi; \
	  [ $$rc -eq 0 ] || { cat $(TSAN_BUILD)/serve.log; exit 1; }; \
	  echo "kvbound serve: $$(tail -n 1 $(TSAN_BUILD)/serve.log)"; fi

bench: build
	@sh bench/run_bench.sh $(BUILD)

# every target with clang (the library, tools and tests too), plus the libFuzzer targets; CMAKE_FLAGS=-DKVB_WERROR=ON
# makes it CI's clang -Werror build as well
fuzz:
	@cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DKVB_FUZZ=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build build-fuzz -j $(JOBS)

# 64-bit ARM Linux with Debian's gcc-aarch64-linux-gnu (cmake/aarch64-linux-gnu.cmake) into build-aarch64/;
# make test-aarch64 runs its unit tests under qemu-aarch64 (Debian's qemu-user), once per forced kernel tier
# (KVB_KERNELS), ending with make test's closing line. AARCH64_TESTS picks tests (default: every unit test)
# and AARCH64_TIERS the tiers (default: every one, sve included: qemu's default CPU, max, has every feature
# and 512-bit SVE; QEMU_CPU=max,sve-default-vector-length=32 runs them at 256 bits)
AARCH64_BUILD ?= build-aarch64
AARCH64_TIERS ?= ref neon dotprod i8mm sve
AARCH64_TESTS ?=
cross-aarch64:
	@cmake -S . -B $(AARCH64_BUILD) -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(AARCH64_BUILD) -j $(JOBS)

test-aarch64: cross-aarch64
	@KVB_TEST_JOBS=$${KVB_TEST_JOBS:-$(TEST_JOBS)} sh tests/run_qemu_tests.sh $(AARCH64_BUILD) "$(AARCH64_TIERS)" $(AARCH64_TESTS)

install: build
	@cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)
	@cmake --install $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) build-fuzz $(AARCH64_BUILD)
