# shardc — thin wrapper over CMake. The two commands that matter:
#   make demo   run the main job on the built-in default (CPU, in-process)
#   make test   install/check dependencies, build, run the whole suite (ctest)
BUILD      ?= build
BUILD_ASAN ?= build-asan
BUILD_TSAN ?= build-tsan
JOBS       ?= $(shell nproc)
CMAKE_FLAGS ?=
ifeq ($(CI),true)
CMAKE_FLAGS += -DSHARDC_WERROR=ON
endif

.PHONY: all deps build test test-asan test-tsan demo fuzz bench samples clean install docs-images \
        wheel-manylinux

all: build

deps: .venv/.deps-ok
.venv/.deps-ok: scripts/install-deps.sh
	bash scripts/install-deps.sh

# Configured until the generate step has written build files (a configure
# that failed, say before the dependencies were installed, leaves a
# CMakeCache.txt behind but no cmake_install.cmake: the next make retries).
$(BUILD)/cmake_install.cmake:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)

build: $(BUILD)/cmake_install.cmake
	cmake --build $(BUILD) -j $(JOBS)

test: deps
	bash scripts/install-deps.sh >/dev/null
	$(MAKE) build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The same suite under AddressSanitizer + UndefinedBehaviorSanitizer, less
# the fuzz smoke run, the wheel test (it builds and runs its own unsanitized
# library), the conformance suite's mesh and opset shards, the emulated
# device check, the docs' commands, the planner's estimate grid, the second
# shard of the training meshes and the FP8 state's resume sweep, which run
# the C paths of other tests again over more operators, meshes, plans and
# sections: `.ci/run` took 82 minutes of its 90 on a 2-core machine
# (docs/testing.md).
ASAN_EXCLUDE ?= ^(fuzz\.|install\.test_wheel$$|models\.test_calibrate$$|gpu\.test_run_all$$|conformance\.test_conformance_(mesh|opsets)_|models\.test_(docs_commands|search_estimate|train_dist_meshes-2|fp8_state)$$)
test-asan: deps
	cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DSHARDC_SANITIZE=ON \
	  -DCMAKE_C_FLAGS_DEBUG='-g -O1' -DCMAKE_CXX_FLAGS_DEBUG='-g -O1' $(CMAKE_FLAGS)
	cmake --build $(BUILD_ASAN) -j $(JOBS)
	cd $(BUILD_ASAN) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  bash $(CURDIR)/scripts/ctest-sanitized.sh -j $(JOBS) -E '$(ASAN_EXCLUDE)'

# The tests of the runtime's threads under ThreadSanitizer (docs/testing.md):
# communicators over threads, the emulated GPU's streams and thread-ranks,
# the CPU pool, training over thread-ranks. Not part of `make test`.
TSAN_TESTS ?= ^(unit\.test_(comm|comm_cuda_local|fake_cuda|collective_ops|cpu|dist|runtime|pp)|models\.test_train_dist_rest)$$
test-tsan: deps
	cmake -S . -B $(BUILD_TSAN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDC_TSAN=ON $(CMAKE_FLAGS)
	cmake --build $(BUILD_TSAN) -j $(JOBS)
	cd $(BUILD_TSAN) && TSAN_OPTIONS="suppressions=$(CURDIR)/tests/tsan.supp second_deadlock_stack=1" \
	  ctest --output-on-failure -j $(JOBS) -R '$(TSAN_TESTS)'

demo: deps build
	BUILD=$(BUILD) bash scripts/demo.sh

# The header, libshardc.so, the communicator modules, pkg-config and CMake
# package files and the command, under PREFIX (docs/api.md).
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

# The Python wheel with the libraries it links vendored by auditwheel
# (docs/python.md, "A portable wheel"), into $(BUILD)/wheel-manylinux/repaired/.
# Opt-in: not part of `make test`.
wheel-manylinux: deps
	BUILD=$(BUILD) bash scripts/wheel-manylinux.sh

# Long fuzzing run (the suite runs a ~60 s smoke run of the same target).
FUZZ_SECONDS ?= 3600
fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) bash tests/fuzz/run.sh

bench: deps build
	.venv/bin/python bench/bench_inspect.py --shardc $(BUILD)/shardc
	.venv/bin/python bench/bench_run.py --shardc $(BUILD)/shardc
	.venv/bin/python bench/bench_partition.py --shardc $(BUILD)/shardc
	.venv/bin/python bench/bench_planner.py --shardc $(BUILD)/shardc
	.venv/bin/python bench/bench_planner_accuracy.py --shardc $(BUILD)/shardc
	.venv/bin/python bench/bench_megatron.py --shardc $(BUILD)/shardc
	.venv/bin/python bench/bench_param_init.py --shardc $(BUILD)/shardc
	bash samples/install-torch.sh
	.venv-samples/bin/python bench/bench_train.py --shardc $(BUILD)/shardc

# The screenshots docs/report.md shows (plan --html pages in headless
# Chromium), into docs/images/ (not committed: regenerated from the samples).
docs-images: deps build
	SHARDC=$(CURDIR)/$(BUILD)/shardc SHARDC_SOURCE_DIR=$(CURDIR) \
	  .venv/bin/python tests/models/test_html_report.py --images docs/images

samples:
	bash samples/install-torch.sh
	.venv-samples/bin/python samples/make_samples.py
	.venv-samples/bin/python samples/make_train_refs.py
	.venv/bin/python samples/check_samples.py

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) build-fuzz
