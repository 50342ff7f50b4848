#!/usr/bin/env bash
# NVRTC compile throughput on this machine: one wgmma candidate of the
# committed generated/kernels.cu (its common code plus the first wgmma
# instantiation) compiled by 1..N threads of one process and by N processes
# (bench/probes/nvrtc_scaling.c). Needs gcc and NVRTC (CUDA's include/ and lib64/,
# or the pinned wheels' .tools/cuda/nvidia/cu13). No GPU needed.
#   bash bench/probes/nvrtc_scaling.sh [WORKER_COUNTS]   (default "1 4 8 16")
set -euo pipefail
cd "$(dirname "$0")/../.."
cuda=/usr/local/cuda inc=$cuda/include lib=$cuda/lib64
if [ ! -f "$inc/nvrtc.h" ]; then
  cuda=.tools/cuda/nvidia/cu13 inc=$cuda/include lib=$cuda/lib
fi
export LD_LIBRARY_PATH="$PWD/$lib:$lib:${LD_LIBRARY_PATH:-}"
work=$(mktemp -d)
gcc -O2 -I"$inc" bench/probes/nvrtc_scaling.c -L"$lib" -l:libnvrtc.so.13 -lpthread \
  -Wl,-rpath,"$PWD/$lib" -Wl,-rpath,"$lib" -o "$work/nvrtc_scaling"
python3 - "$work/candidate.cu" <<'PY'
import re, sys
text = open("generated/kernels.cu").read()
head, inst = text.split("// ---- instantiations ----", 1)
blocks = re.split(r"\n(?=// \w+ task [0-9a-f]{16}:)", inst)
pick = next(b for b in blocks if "_wgmma_" in b)
open(sys.argv[1], "w").write(head + pick)
print("candidate:", re.search(r"(conv_\w+_wgmma_\w+)\(", pick).group(1))
PY
echo "cores: $(nproc)   $(lscpu | sed -n 's/^Model name: *//p')"
for n in ${1:-1 4 8 16}; do
  "$work/nvrtc_scaling" "$work/candidate.cu" "$inc" "$n" 4
  [ "$n" -gt 1 ] && "$work/nvrtc_scaling" "$work/candidate.cu" "$inc" "$n" 4 proc
done
rm -rf "$work"
