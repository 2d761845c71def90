# pagedkv — top-level commands. Each target installs its own dependencies
# (scripts/install-deps.sh is a no-op when everything is present), so any of
# them works as the first command on a fresh Debian 12 machine.
#
#   make run            serve the default model over HTTP on 127.0.0.1:$(PORT) (default 8000)
#                       (builds only the pagedkv binary, not the test suite)
#   make demo           the two-prompt prefix-cache demo (pagedkv generate)
#   make test           build and run every test
#   make bench          build and run the benchmarks (figures: docs/performance.md)
#   make test-sanitize  unit tests under AddressSanitizer + UndefinedBehaviorSanitizer
#   make test-tsan      engine, server and cold-tier tests under ThreadSanitizer
#   make fuzz           libFuzzer targets (clang, ASan+UBSan), FUZZ_SECONDS (60) each;
#                       prints executions and coverage per target (docs/fuzzing.md)
#   make format         clang-format every C++ source
#   make build          just build (build/)

JOBS ?= $(shell nproc)
BUILD ?= build
SAN_BUILD ?= build-sanitize
BENCH_BUILD ?= build-bench
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
# ctest -R pattern for `make test-tsan`: the engine suites (the hybrid and gemma
# families', the scheduler's and the state-checkpoint store's too), the HTTP
# server's, and every cold-tier suite.
TSAN_TESTS ?= ^(Engine|Cold|ModelFingerprint|Sampler|ChatFormatter|BenchCli|Scheduler|OwnerRegistry|StateCheckpoint|PublicApi|Server|ServeCli|Random/EngineWorkload|Families/(Hybrid|Gemma)EngineTest)
CMAKE_FLAGS ?=
PORT ?= 8000

# No "gmake[1]: Entering directory" lines from the make that cmake --build runs.
MAKEFLAGS += --no-print-directory

.PHONY: all deps build run demo test bench test-sanitize test-tsan fuzz format clean

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	@echo "pagedkv: first build of $(BUILD)/ — configuring and compiling takes a few minutes;"
	@echo "         later builds only recompile what changed."
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# Only the binary the main job runs.
run: deps $(BUILD)/CMakeCache.txt
	@cmake --build $(BUILD) -j $(JOBS) --target pagedkv
	@bash scripts/run-server.sh $(BUILD) $(PORT)

demo: deps $(BUILD)/CMakeCache.txt
	@cmake --build $(BUILD) -j $(JOBS) --target pagedkv
	@bash scripts/run-demo.sh $(BUILD)

test: build
	@bash scripts/fetch-test-assets.sh
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

test-sanitize: deps
	cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DPAGEDKV_SANITIZE=ON $(CMAKE_FLAGS)
	cmake --build $(SAN_BUILD) -j $(JOBS)
	@bash scripts/fetch-test-assets.sh
	cd $(SAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) -L unit --timeout 1800

test-tsan: deps
	cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPAGEDKV_TSAN=ON $(CMAKE_FLAGS)
	cmake --build $(TSAN_BUILD) -j $(JOBS)
	@bash scripts/fetch-test-assets.sh
	cd $(TSAN_BUILD) && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/scripts/tsan.supp" \
	  ctest --output-on-failure -j $(JOBS) -R '$(TSAN_TESTS)' --timeout 1800

fuzz:
	@bash scripts/install-deps.sh --fuzz
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPAGEDKV_FUZZ=ON -DPAGEDKV_BUILD_TESTS=OFF $(CMAKE_FLAGS)
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target $$(cat $(FUZZ_BUILD)/fuzz-targets.txt | tr ';' '\n' | sed 's/^/fuzz_/')
	FUZZ_SECONDS=$(FUZZ_SECONDS) bash scripts/run-fuzz.sh $(FUZZ_BUILD)

bench: deps
	cmake -S . -B $(BENCH_BUILD) -DCMAKE_BUILD_TYPE=Release -DPAGEDKV_BUILD_TESTS=OFF \
	  -DPAGEDKV_BUILD_BENCH=ON $(CMAKE_FLAGS)
	cmake --build $(BENCH_BUILD) -j $(JOBS)
	@bash scripts/run-benchmarks.sh $(BENCH_BUILD)

format:
	@find include src tests bench \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \) -print0 \
	  | xargs -0 -r clang-format -i

clean:
	rm -rf $(BUILD) $(SAN_BUILD) $(BENCH_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD)
