#!/usr/bin/env bash
# Puts Triton's load generator, perf_analyzer, into .device/perf_analyzer/ for
# the GPU machine (which has no network), or into $DEST (`make perf-analyzer`:
# .tools/perf_analyzer, for tests/serve_perf_analyzer.rs): the binary from the tritonclient
# wheel, and the two shared libraries it loads that a bare machine lacks,
# libcudart.so.12 (from the nvidia-cuda-runtime-cu12 wheel; perf_analyzer
# loads it even for plain gRPC) and libb64.so.0d (Debian's libb64-0d).
# tritonclient 2.49.0's perf_analyzer runs on glibc 2.36 (2.55.0's needs 2.38).
# Needs pip and apt-get here (network); about 5 MB
# once xz-compressed in the carry. Then, on the GPU machine:
#   PERF_ANALYZER=.device/perf_analyzer/perf_analyzer bash bench/serve_gpu.sh
# runs it against the same server after the project's load client.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${TRITONCLIENT_VERSION:-2.49.0}
dest=${DEST:-.device/perf_analyzer}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download --quiet --no-deps "tritonclient==$VERSION" -d "$work"
python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
  nvidia-cuda-runtime-cu12 -d "$work"
(cd "$work" && apt-get download -o APT::Sandbox::User=root libb64-0d >/dev/null)
mkdir -p "$work/x" "$work/out"
for w in "$work"/*.whl; do unzip -q -o "$w" -d "$work/x"; done
dpkg-deb -x "$work"/libb64-0d_*.deb "$work/x"
cp "$(find "$work/x" -path '*bin/perf_analyzer' -type f | head -1)" "$work/out/perf_analyzer"
cp "$(find "$work/x" -name 'libcudart.so.12' | head -1)" "$work/out/"
cp "$(find "$work/x" -name 'libb64.so.0d*' -type f | head -1)" "$work/out/libb64.so.0d"
chmod +x "$work/out/perf_analyzer"
# All three or none: a binary without its libraries would fail the test.
rm -rf "$dest" && mkdir -p "$(dirname "$dest")" && mv "$work/out" "$dest"
LD_LIBRARY_PATH="$dest" "$dest/perf_analyzer" --version 2>&1 | head -1 || true
du -sh "$dest"
