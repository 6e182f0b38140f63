# tinygrad-vmap: pristine upstream tinygrad + the topic patches of its line's series (see README.md, "How the fork is kept")
# the default line is pyproject.toml's [tool.fork] default (0.14.0); UPSTREAM=0.12.0 (any line it pins): every target on that line, its
# own patches dir, baseline and bench rows. What differs per line (how it picks a device, which bench rows) is in pyproject's tables.
PYTHON ?= python3
export UPSTREAM
FORK := $(PYTHON) tools/fork.py
# SERIES=vmap: only the topics above `[vmap]` in patches/series (the fixes and the vmap features, not the CPU performance topics)
SERIES_ARG := $(if $(SERIES),--series $(SERIES))
PIP := $(PYTHON) -m pip install -q --disable-pip-version-check
# bytecode for the materialized package, as pip writes it at install: where .pyc files are not written on import
# (PYTHONDONTWRITEBYTECODE) a lazily imported module is otherwise compiled from source in the middle of a first call
BYTECODE := $(PYTHON) -m compileall -q -j 0 tinygrad
# every target that runs tinygrad names its device: a machine with an OpenCL runtime (PoCL) or a GPU would otherwise be picked before the
# CPU (tinygrad tries CL before CPU), and a device another variable in the shell names would be a second one ("multiple devices set in env")
NO_DEV := env -u CPU -u CL -u GPU -u CUDA -u NV -u AMD -u METAL -u LLVM -u PYTHON -u DEV
CPU_PIN = $(NO_DEV) $$($(PYTHON) $(CURDIR)/tools/fork.py env cpu_env)

.PHONY: fork patches check-patches setup setup-upstream test test-spec test-first-numpy test-upstream upstream-baseline demo bench

fork:            ## materialize pristine upstream + the series into tinygrad/ (SERIES=vmap: the vmap topics only; FORCE=1 discards edits not exported)
	$(FORK) fork $(if $(FORCE),--force) $(SERIES_ARG)
	@$(BYTECODE)
patches:         ## export edits under tinygrad/ into the topics whose lines they change (TOPIC=name: into that topic, or a new one)
	$(FORK) patches $(if $(TOPIC),--topic $(TOPIC))
check-patches:   ## fail when tinygrad/ and pristine + the series disagree, or a topic's message says TODO
	$(FORK) check $(SERIES_ARG)

setup:           ## everything `make test` needs on a fresh machine: clang, the Python test deps, the materialized fork
	@command -v clang >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then echo "installing clang with apt-get"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null; \
	  else echo "clang is missing and I cannot install it (need root and apt-get): install clang, then run make again" >&2; exit 1; fi; }
	$(if $(CI),@$(MAKE) --no-print-directory setup-viz)
	$(PIP) $$($(FORK) deps test)
	$(FORK) fork $(SERIES_ARG)
	@$(BYTECODE)
.PHONY: setup-viz
setup-viz:       ## what test/test_viz.py needs (CI's setup runs it): Debian's chromium via apt-get when root (~80 s), playwright via pip
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then echo "installing chromium with apt-get"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium is missing and I cannot install it (need root and apt-get): test/test_viz.py will be skipped" >&2; fi; }
	@$(PYTHON) -c "import playwright" 2>/dev/null || $(PIP) playwright
setup-upstream: setup
	$(PIP) $$($(FORK) deps test-upstream)

VMAP_TESTS := test/test_vmap.py test/test_vmap_realize.py test/test_vmap_api.py test/test_vmap_grad.py test/test_vmap_autodiff.py
# pytest on every core when pytest-xdist is there (the test deps install it); the PYTHON emulator device is the line's emulator_env
PYTEST = $(PYTHON) -m pytest $$($(PYTHON) -c 'import xdist' 2>/dev/null && printf -- '-n auto')
# TEST_ARGS: more pytest arguments for the first run (CI's SERIES=vmap run deselects what does not depend on the series with it)
# the emulator runs make test-gpu's files (a native sin, as CUDA's, showed cos's rounding): no int(inf) in its Python (its lack of half before
# Python 3.12 the half tests skip on, saying so). CI runs make test-cl (PoCL) instead on the default line (SKIP_EMULATOR=1): .ci/run says why
test: setup      ## the project's tests, then the GPU test files on the PYTHON device (a GPU emulator; SKIP_EMULATOR=1 skips it); SERIES=vmap too
	$(CPU_PIN) $(PYTEST) test $(TEST_ARGS)
	$(if $(SKIP_EMULATOR),,$(NO_DEV) $$($(FORK) env emulator_env) $(PYTEST) -q $(GPU_TESTS) -k "not cast_folding" || [ $$? = 5 ])   # 5: all skipped
test-spec: setup ## the vmap test files with SPEC=2: every UOp checked against its spec when it is created
	$(CPU_PIN) SPEC=2 $(PYTEST) -q $(VMAP_TESTS) test/test_vmap_outer.py test/test_vmap_multi.py test/test_jvp.py || [ $$? = 5 ]
test-first-numpy: setup   ## 0.14: the GPU test files with FIRST_NUMPY=1, each CPU kernel's first run numpy's (pytest leaves it off)
	$(CPU_PIN) FIRST_NUMPY=1 $(PYTEST) -q $(GPU_TESTS) test/test_scan.py test/test_scan_kernel.py test/test_trajopt.py test/test_vmap_fuzz.py || [ $$? = 5 ]
# the GPU: no set-up (a borrowed GPU machine may have no network: materialize tinygrad/ here and take it along), the vmap, jvp and Jacobian
# test files on GPU=CUDA (or NV) in parallel, cut at GPU_TIMEOUT seconds with SIGINT so the failures so far are still listed by name
GPU ?= CUDA
GPU_TIMEOUT ?= 470
GPU_WORKERS ?= 16
GPU_TESTS := $(VMAP_TESTS) test/test_vmap_outer.py test/test_vmap_multi.py test/test_jvp.py test/test_native_vmap_pad.py test/test_fixes.py
.PHONY: test-gpu
test-gpu:        ## the vmap, jvp and Jacobian tests on an NVIDIA GPU (GPU=CUDA or NV); tools/gpu_env.py finds libcuda and nvrtc or says what to set
	@env_lines="$$(PYTHONPATH=. $(PYTHON) tools/gpu_env.py $(GPU))" && eval "$$env_lines" && \
	  $(NO_DEV) $$($(FORK) env gpu_env --gpu $(GPU)) timeout -s INT $(GPU_TIMEOUT) $(PYTHON) -m pytest -q -n $(GPU_WORKERS) -rfE --tb=line -p no:cacheprovider $(GPU_TESTS)
# OpenCL without a GPU: PoCL (Debian's pocl-opencl-icd) runs tinygrad's CL backend on the CPU, OpenCL C compiled for real with its local
# sizes and barriers; four PoCL devices (POCL_DEVICES) for the sharded tests (SHARD_DEVICE=CL: CL:0..CL:3). The vmap, jvp, Jacobian,
# chunk, randomness, sharding and fuzz test files, and the fixes' repros; what skips there and why: docs/internals.md, "OpenCL (PoCL)"
CL_TESTS := $(VMAP_TESTS) test/test_jvp.py test/test_vmap_outer.py test/test_vmap_multi.py test/test_native_vmap_pad.py test/test_fixes.py \
  test/test_vmap_fuzz.py
# left out on CL, each for docs/internals.md's reason ("Without a GPU"): a replicated Tensor computed on the default CL device and sent to
# CL:0..CL:n fails the kernel graph's spec (vanilla 0.14.0 too, open), and the sharded fuzzer hits it (and took 330 s a test on PoCL)
CL_OPEN := $(addprefix test/test_vmap_multi.py::,TestShardedBatch::test_sharded_and_replicated_mapped_inputs \
  TestShardedBatch::test_replicated_weight TestConstructsShardedAxis0::test_matmul_2d TestConstructsShardedAxis0::test_matmul_row \
  TestConstructsShardedMiddleAxis::test_matmul_2d TestConstructsShardedMiddleAxis::test_matmul_row \
  TestConstructsShardedThreeDevices::test_matmul_2d TestConstructsShardedThreeDevices::test_matmul_row \
  TestShardedGradients::test_backward_one_example_per_device) test/test_vmap_fuzz.py::TestVmapFuzzSharded
.PHONY: setup-cl test-cl check-cuda
setup-cl:        ## PoCL and the OpenCL ICD loader (apt-get, when root), for make test-cl
	@[ -e /etc/OpenCL/vendors/pocl.icd ] || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then echo "installing pocl-opencl-icd with apt-get"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pocl-opencl-icd ocl-icd-libopencl1 >/dev/null; \
	  else echo "PoCL is missing and I cannot install it (need root and apt-get): install pocl-opencl-icd, then run make again" >&2; exit 1; fi; }
test-cl: setup setup-cl   ## make test-cl's files on DEV=CL through PoCL (the CPU as an OpenCL device)
	$(NO_DEV) $$($(FORK) env gpu_env --gpu CL) SHARD_DEVICE=CL POCL_DEVICES="pthread pthread pthread pthread" \
	  POCL_EXTRA_BUILD_FLAGS=-cl-opt-disable FUZZ_TIMEOUT=90 $(PYTEST) -q -rs --durations=10 $(CL_TESTS) $(CL_OPEN:%=--deselect %) $(TEST_ARGS)
# CUDA without a GPU: NVRTC (pip's nvidia-cuda-nvrtc-cu12, pinned in pyproject's cuda-check extra) compiles every kernel the vmap test
# files schedule, rendered by the CUDA renderer with its heuristics for sm_80 and sm_90 (PTX; sm_90 a CUBIN, ptxas too); then ptxas' registers and
# spills of the GPU table's kernels (bench/RESULTS-cuda-regs.md; a spilling kernel must be named in bench/analysis-gpu.md)
CUDA_CHECK_TESTS := $(VMAP_TESTS) test/test_vmap_outer.py test/test_vmap_multi.py test/test_jvp.py
check-cuda: setup   ## every kernel of the vmap test files through CUDA's renderer and nvrtc (sm_80, sm_90), no card; the register table
	$(PIP) $$($(FORK) deps cuda-check)
	$(CPU_PIN) PYTHONPATH=tools $(PYTEST) -q -p cuda_check $(CUDA_CHECK_TESTS)
	$(CPU_PIN) $(PYTHON) tools/cuda_check.py table $(if $(WRITE),--write)
demo: setup      ## examples/quickstart.py: vmap a per-example function, check it against numpy, show the kernel and kernel counts
	$(CPU_PIN) PYTHONPATH=. $(PYTHON) examples/quickstart.py
test-upstream: setup-upstream   ## upstream's own suite (the pinned sdist's test/*.py) on the fork; fails only on failures vanilla lacks
	cd tools && $(CPU_PIN) $(PYTHON) upstream_suite.py check
upstream-baseline: setup-upstream   ## record vanilla upstream's outcome of the same suite in test/upstream/vanilla-VERSION.json
	cd tools && $(CPU_PIN) $(PYTHON) upstream_suite.py baseline --runs 2
bench: setup     ## the benchmark (bench/README.md): bench/RESULTS.md, docs/bench.png; QUICK=1 is CI's smoke run; DEVICE=CUDA the GPU table
	$(if $(QUICK),,$(PIP) $$($(FORK) deps bench))
	$(CPU_PIN) PYTHONPATH=. $(PYTHON) bench/run.py $(if $(QUICK),--quick) $(if $(DEVICE),--device $(DEVICE))
	$(if $(DEVICE),,$(if $(shell UPSTREAM=$(UPSTREAM) $(FORK) flag bench_w7),$(CPU_PIN) PYTHONPATH=. $(PYTHON) bench/w7_trajopt.py $(if $(QUICK),--quick,--write)))   # W7, the trajectory optimizer (the lines whose bench_w7 says so)
	$(if $(DEVICE),,$(if $(shell UPSTREAM=$(UPSTREAM) $(FORK) flag bench_w7),$(CPU_PIN) PYTHONPATH=. $(PYTHON) bench/w8_mpc.py $(if $(QUICK),--quick,--write)))   # W8, model-predictive control on W7's solver (the same lines)
