#!/usr/bin/env bash
# The one device call of benchmarks/gpu_figures.py: the Python packages the CLI needs and
# the GPU image lacks come from carried wheels (.whl/, installed into /tmp/site when
# pydantic is missing), the GPU and its software are printed, then every step runs into
# $OUT (results.json, summary.md, steps.log, power.csv; log is the whole output).
#   OUT=/tmp/figs benchmarks/gpu_figures.sh [--budget-s 480] [--only ...]
set -o pipefail
PYTHON=${PYTHON:-python3}
OUT=${OUT:?set OUT to the output directory}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ! "$PYTHON" -c "import pydantic" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
{
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total,pstate \
      --format=csv
  fi
  "$PYTHON" -c "import torch, sys; print('python', sys.version.split()[0], 'torch', \
torch.__version__, 'cuda', torch.version.cuda)"
  "$PYTHON" benchmarks/gpu_figures.py --out "$OUT" "$@"
} 2>&1 | tee "$OUT/log"
