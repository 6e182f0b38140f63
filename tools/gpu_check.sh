#!/usr/bin/env bash
# Everything to run on a borrowed NVIDIA GPU machine, in one call of at most ~8 minutes: the GPU tests (make test-gpu) and the GPU bench
# table (bench/run.py --device), then a short report. The machine has no network: materialize tinygrad/ here first (`make fork`) and
# carry it (the device tool's carry: ["tinygrad"]). Output goes to $OUT (the device tool's folder) or /tmp/gpu_check:
#   report.md (the failures by name, the bench table), test-gpu.log, bench.log, RESULTS-gpu.md, results-gpu.json
#   tools/gpu_check.sh                 GPU=NV tools/gpu_check.sh        TEST_S=200 BENCH_S=200 tools/gpu_check.sh  (seconds for each part)
# Try it out without a GPU: GPU=CPU BENCH_ARGS="--only W3" tools/gpu_check.sh (the same steps on tinygrad's CPU device).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check}; GPU=${GPU:-CUDA}; TEST_S=${TEST_S:-240}; BENCH_S=${BENCH_S:-200}; BENCH_ARGS=${BENCH_ARGS:-}
mkdir -p "$OUT"
export PYTHONPATH=.
{
  echo "# GPU check: $(date -u +%FT%TZ), git $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo; echo '```'; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -3
  python3 -c "import numpy, sys; print('python', sys.version.split()[0], 'numpy', numpy.__version__)"
  python3 -c "import jax; print('jax', jax.__version__, jax.devices())" 2>&1 | tail -1
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" 2>&1 | tail -1
  echo '```'
} > "$OUT/report.md"

# 1. the tests: make test-gpu, cut at TEST_S seconds with SIGINT (the failures so far are still listed)
if [ "$GPU" = CPU ]; then tests="env -u CUDA -u NV CPU=1 timeout -s INT $TEST_S python3 -m pytest -q -n auto -rfE --tb=line -p no:cacheprovider test/test_fixes.py"
else tests="make --no-print-directory test-gpu GPU=$GPU GPU_TIMEOUT=$TEST_S"; fi
start=$(date +%s); $tests > "$OUT/test-gpu.log" 2>&1; rc=$?
{ echo; echo "## make test-gpu (GPU=$GPU): exit $rc in $(( $(date +%s) - start )) s"; echo; echo '```'
  grep -E "^(FAILED|ERROR)|passed|failed|KeyboardInterrupt|gpu_env" "$OUT/test-gpu.log" | tail -60; echo '```'; } >> "$OUT/report.md"

# 2. the bench table: W1-W6 at 10x the CPU table's N on the GPU, every row checked against numpy
start=$(date +%s)
write=$([ "$GPU" = CPU ] || echo --write)   # a try-out on the CPU leaves bench/RESULTS-gpu.md alone
timeout "$BENCH_S" python3 bench/run.py --device "$GPU" $write --repeats 7 $BENCH_ARGS > "$OUT/bench.log" 2>&1; brc=$?
{ echo; echo "## bench/run.py --device $GPU: exit $brc in $(( $(date +%s) - start )) s"; echo
  if [ -f bench/RESULTS-gpu.md ] && [ bench/RESULTS-gpu.md -nt "$OUT/test-gpu.log" ]; then
    cp bench/RESULTS-gpu.md bench/results-gpu.json "$OUT/"; sed -n '/^| workload/,$p' bench/RESULTS-gpu.md
  else echo '```'; tail -40 "$OUT/bench.log"; echo '```'; fi; } >> "$OUT/report.md"
cat "$OUT/report.md"
