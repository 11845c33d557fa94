#!/usr/bin/env bash
# Calibrate an accelerator kind through onnxruntime's CUDA provider and compare it with measured zoo
# models: bash benchmarks/gpu_calibrate.sh a100|h100 [--out-dir DIR] [--repeats N] (see gpu_calibrate.py).
# Needs onnxruntime-gpu on a machine with an NVIDIA GPU; refuses (exit 2) without the CUDA provider.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python -m benchmarks.gpu_calibrate "$@"
