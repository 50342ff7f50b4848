# Sourced by the bench/*.sh scripts that run on the GPU machine: the CUDA
# toolkit there, the kernel cache, $OUT, the carried binary ($B, built by
# bench/prepare_device.sh) and zoo ResNet-50 at /tmp/r50.onnx.
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NVCC=/usr/local/cuda/bin/nvcc CUDA_HOME=/usr/local/cuda
export AOTUNE_CACHE=/tmp/aotune-cache
# Every GPU test must run here: a skip (no driver, no nvcc, no fixtures) fails.
export AOTUNE_REQUIRE_GPU=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
B=${B:-.device/aotune}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
[ -f /tmp/r50.onnx ] || $B zoo resnet50 -o /tmp/r50.onnx >/dev/null
