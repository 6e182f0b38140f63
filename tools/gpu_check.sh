#!/usr/bin/env bash
# Everything to run on a borrowed NVIDIA GPU machine, in one call of under ~9.5 minutes: the GPU tests (make test-gpu), the GPU bench
# table (bench/run.py --device, with each TinyJit row's kernels timed alone), then launch shapes of W1's and W2's kernels timed over a
# grid (bench/kernel_opts.py), and a short report. The machine has no network: materialize tinygrad/ here first (`make fork`) and carry it
# (the device tool's carry: ["tinygrad"]). Output goes to $OUT (the device tool's folder) or /tmp/gpu_check:
#   report.md (the failures by name, the bench table, the grids), test-gpu.log, bench.log, kernel_opts.log, RESULTS-gpu.md, results-gpu.json
#   tools/gpu_check.sh          GPU=NV tools/gpu_check.sh          BENCH_S=230 TEST_S=200 OPTS_S=70 tools/gpu_check.sh  (seconds per part)
# UPSTREAM=0.14.0 checks that line (materialize it with `make fork UPSTREAM=0.14.0`): its bench run goes to results-gpu-0.14.0.json beside
# the default line's table, and the launch-shape grid, which reads 0.12's Tensor.schedule, is left out.
# Try it out without a GPU: GPU=CPU BENCH_ARGS="--only W3" tools/gpu_check.sh (the same steps on tinygrad's CPU device).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check}; GPU=${GPU:-CUDA}; export UPSTREAM=${UPSTREAM:-}
# the line and how its tinygrad picks a device: CUDA=1 on 0.12, DEV=CUDA on 0.14 (whose CUDA=1 is an error)
read -r LINE SELECT < <(cd tools && python3 -c "import fork; p = fork.ROOT; print(fork.upstream_line(p), 'DEV=$GPU' if 'DEV' in fork.pin(p)['cpu_env'] else '$GPU=1')")
BENCH_S=${BENCH_S:-230}; TEST_S=${TEST_S:-200}; OPTS_S=${OPTS_S:-70}; BENCH_ARGS=${BENCH_ARGS:-}
mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1
{
  echo "# GPU check: $(date -u +%FT%TZ), git $(git rev-parse --short HEAD 2>/dev/null || echo '?'), tinygrad $LINE line ($SELECT)"
  echo; echo '```'; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -3
  python3 -c "import numpy, sys; print('python', sys.version.split()[0], 'numpy', numpy.__version__)"
  python3 -c "import jax; print('jax', jax.__version__)" 2>&1 | tail -1
  python3 -c "import torch; print('torch', torch.__version__)" 2>&1 | tail -1
  echo '```'
} > "$OUT/report.md"

# 1. the tests, first (a loan cut short still names the failures): make test-gpu, cut at TEST_S seconds with SIGINT (the failures so
# far are still listed); a test over 90 s fails by name
if [ "$GPU" = CPU ]; then tests="env -u CUDA -u NV -u DEV $SELECT timeout -s INT $TEST_S python3 -m pytest -q -n auto -rfE --tb=line -p no:cacheprovider test/test_fixes.py"
elif command -v make >/dev/null; then tests="make --no-print-directory test-gpu GPU=$GPU GPU_TIMEOUT=$TEST_S"
else   # no make on the machine: the same command as the Makefile's test-gpu, its file list read from the Makefile
  files=$(sed -n 's/^VMAP_TESTS := //p' Makefile)" "$(sed -n 's/^GPU_TESTS := \$(VMAP_TESTS) //p' Makefile)
  tests="env_lines=\"\$(python3 tools/gpu_env.py $GPU)\" && eval \"\$env_lines\" && env -u CPU -u DEV $SELECT timeout -s INT $TEST_S python3 -m pytest -q -n 16 -rfE --tb=line -p no:cacheprovider $files"
fi
start=$(date +%s); PYTEST_ADDOPTS="--durations=12 $(python3 -c 'import pytest_timeout' 2>/dev/null && echo --timeout=90)" bash -c "$tests" > "$OUT/test-gpu.log" 2>&1; rc=$?
{ echo; echo "## make test-gpu (GPU=$GPU): exit $rc in $(( $(date +%s) - start )) s"; echo; echo '```'
  grep -E "^(FAILED|ERROR)|passed|failed|KeyboardInterrupt|Timeout|gpu_env|^[0-9.]+s (call|setup)" "$OUT/test-gpu.log" | tail -80; echo '```'; } >> "$OUT/report.md"

# 2. the bench table: W1-W6 at 10x the CPU table's N on the GPU, every row checked against numpy; the BEAM rows last, cut at BENCH_S
start=$(date +%s); touch "$OUT/.bench-start"
write=$([ "$GPU" = CPU ] || echo --write)   # a try-out on the CPU leaves bench/RESULTS-gpu.md alone (another line writes results-gpu-LINE.json)
timeout $((BENCH_S + 30)) python3 bench/run.py --device "$GPU" $write --repeats 7 --deadline "$BENCH_S" $BENCH_ARGS > "$OUT/bench.log" 2>&1; brc=$?
{ echo; echo "## bench/run.py --device $GPU: exit $brc in $(( $(date +%s) - start )) s"; echo
  if [ -f "bench/results-gpu-$LINE.json" ] && [ "bench/results-gpu-$LINE.json" -nt "$OUT/.bench-start" ]; then
    cp "bench/results-gpu-$LINE.json" "$OUT/"; echo '```'; grep -E "^\| W[0-9]|^workloads" "$OUT/bench.log" | tail -60; echo '```'
  elif [ -f bench/RESULTS-gpu.md ] && [ bench/RESULTS-gpu.md -nt "$OUT/.bench-start" ]; then
    cp bench/RESULTS-gpu.md bench/results-gpu.json "$OUT/"; sed -n '/^| workload/,/^$/p' bench/RESULTS-gpu.md
  else echo '```'; tail -40 "$OUT/bench.log"; echo '```'; fi; } >> "$OUT/report.md"

# 3. launch shapes: W1's row reduce and W2's MLP kernel under a grid of opts, beside the heuristic's and BEAM=2's picks
start=$(date +%s)
[ "$SELECT" = "DEV=$GPU" ] && OPTS_S=0   # kernel_opts.py reads 0.12's Tensor.schedule
{ for w in W1 W2; do
    [ "$OPTS_S" -gt 0 ] || { echo "left out on the $LINE line"; break; }
    env -u CPU -u CUDA -u NV -u DEV $SELECT timeout $((OPTS_S / 2)) python3 bench/kernel_opts.py $w --scale 10 --grid --beam --top 12 --seconds $((OPTS_S / 2 - 15))
  done; } > "$OUT/kernel_opts.log" 2>&1
{ echo; echo "## bench/kernel_opts.py (grid) in $(( $(date +%s) - start )) s"; echo; echo '```'; grep -v "^\s*\^" "$OUT/kernel_opts.log" | tail -40; echo '```'; } >> "$OUT/report.md"
cat "$OUT/report.md"
