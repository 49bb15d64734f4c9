#!/usr/bin/env bash
# The GPU checks in one run, on a machine with a CUDA device and a CUDA build of torch:
#   1. the GPU tests (KIND_GPU on a listed GPU, one CUDA stream per instance, DISABLE_CUDNN,
#      cache cleaning, weight sharing on one device): tests/backends/pytorch/test_gpu.py;
#   2. benchmarks.gpu: a ResNet-50-sized CNN served in FP32/FP16/BF16 at batch 1 and 32 next to
#      in-process, and torch.compile(mode="reduce-overhead") through the Python runtime
#      (GPU_BENCH_ARGS adds flags, e.g. "--peer triton" with TRITON_START set).
# Results go to $OUT (default build/gpu): nvidia-smi.txt, gpu-tests.log, gpu-bench.log, gpu.md,
# gpu.json. Run from the repository root:  OUT=/tmp/gpu benchmarks/gpu.sh
# Where the machine cannot install packages, put wheels of what it lacks (httptools, orjson,
# hpack, tritonclient and its HTTP client's dependencies, ...) in a folder and set WHEELS to it.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
if [ -n "${WHEELS:-}" ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/ptserve-site \
    "$WHEELS"/*.whl || exit 1
  export PYTHONPATH=/tmp/ptserve-site
fi
export PYTHONPATH=$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "no CUDA device")' \
  || exit 1
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
status=0
"$PY" -m pytest -q -p no:cacheprovider -m gpu tests/backends/pytorch/test_gpu.py 2>&1 \
  | tee "$OUT/gpu-tests.log" || status=1
# shellcheck disable=SC2086
"$PY" -m benchmarks.gpu --out "$OUT" ${GPU_BENCH_ARGS:-} 2>&1 | tee "$OUT/gpu-bench.log" \
  || status=1
exit $status
