#!/usr/bin/env bash
# The GPU check (docs/benchmarks.md#the-gpu-check): on a CUDA machine, MFU of pre_ln at 400M-L24, FSDP2 at world
# size 1 with a sharded checkpoint save and load, decode speed, and compiled train-step ratios vs pre_ln at
# 400M-L24 / 400M-L32 with their targets, as JSON lines on stdout, within 8 minutes.
#   bash scripts/gpu_check.sh                 # CUDA
#   bash scripts/gpu_check.sh --cpu-smoke     # every part at tiny shapes on CPU (CI: tests/bench/test_gpu_check.py)
# Other options: python -m depthbench.bench.gpu_check --help
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export TOKENIZERS_PARALLELISM=false
exec "${PYTHON:-python}" -m depthbench.bench.gpu_check "$@"
