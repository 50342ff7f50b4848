#!/usr/bin/env bash
# One GPU-machine call (no carry needed): builds bench/probes/cluster_reduce_probe.cu
# with the machine's nvcc and runs it: µs per launch of each way of summing a
# cluster's split-K slices, at the b1 cluster tasks' sizes. The .cu file says
# what the variants are; docs/history.md what it decided.
set -euo pipefail
cd "$(dirname "$0")/../.."
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
[ -x "$NVCC" ] || NVCC=.tools/cuda/nvidia/cu13/bin/nvcc
bin=$(mktemp -d)/cluster_reduce_probe
"$NVCC" -O3 -std=c++17 -arch=sm_90a -o "$bin" bench/probes/cluster_reduce_probe.cu
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true
timeout 120 "$bin"
