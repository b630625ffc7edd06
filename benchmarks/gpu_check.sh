#!/usr/bin/env bash
# Every GPU check of issue 24 in one go, for a machine with a CUDA GPU (e.g. one the `device`
# tool lends). Needs a CUDA build of torch in $PY (the CPU wheel in .venv sees no GPU).
# Writes its figures to $OUT (default /tmp/solaris-gpu-check); prints one JSON line per model.
#   PY=.venv/bin/python OUT=/tmp/out benchmarks/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-/tmp/solaris-gpu-check}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.csv"
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else \
'torch ' + torch.__version__ + ' sees no CUDA device')"
# the contract and serving tests on CUDA: fp32 equals CPU, bf16 close, both models
"$PY" -m pytest -q -p no:cacheprovider tests/unit/model/test_contract.py \
    tests/unit/model/test_online.py tests/unit/model/test_network.py 2>&1 | tee "$OUT/pytest.txt"
# pairs/s of the shared path against the naive path, fp32 and bf16, per model
for model in foundation two_tower; do
    "$PY" benchmarks/inference.py --model "$model" --device cuda --users 256 --items 200 \
        2>"$OUT/inference_$model.err" | tail -1 | tee "$OUT/inference_$model.json"
done
