#!/usr/bin/env bash
# Compiles a generated kernels.cu for sm_90a (as the build does) and checks
# what ptxas and the SASS say about every kernel:
#   - no kernel may spill (ptxas -v: nonzero "bytes spill stores/loads");
#   - every mma.sync convolution (conv_*_mma_*) must contain HMMA and every
#     wgmma one (conv_*_wgmma_*) HGMMA instructions (cuobjdump --dump-sass);
#     skipped with a message when cuobjdump is not installed (the pip wheels
#     lack it).
# Prints one line per kernel: registers, static shared memory (the dynamic
# part is a launch parameter, see executor.rs), spill bytes, and the count of
# HMMA (mma.sync) or HGMMA (wgmma) instructions.
#
# Usage: bench/sass_check.sh [kernels.cu]   (default: generated/kernels.cu)
# Finds nvcc and cuobjdump via $NVCC / $CUOBJDUMP, PATH, /usr/local/cuda/bin
# and .tools/cuda (make cuda-tools). Exit status 0 only when every check
# that could run passed.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=${1:-$ROOT/generated/kernels.cu}
WHEEL_BIN=$ROOT/.tools/cuda/nvidia/cu13/bin

find_tool() { # name, override
  local name=$1 override=${2:-}
  if [ -n "$override" ]; then echo "$override"; return 0; fi
  if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return 0; fi
  for dir in /usr/local/cuda/bin "$WHEEL_BIN"; do
    if [ -x "$dir/$name" ]; then echo "$dir/$name"; return 0; fi
  done
  return 1
}

[ -f "$SRC" ] || { echo "sass_check: no such file: $SRC" >&2; exit 2; }
NVCC_BIN=$(find_tool nvcc "${NVCC:-}") || {
  echo "sass_check: no nvcc (set NVCC, or run make cuda-tools)" >&2
  exit 2
}
INCLUDES=()
NVCC_ROOT=$(cd "$(dirname "$NVCC_BIN")/.." && pwd)
# The wheels keep cuda_fp16.h next to bin/, not in a CUDA install's targets/.
if [ -f "$NVCC_ROOT/include/cuda_fp16.h" ] && [ ! -d "$NVCC_ROOT/targets" ]; then
  INCLUDES=(-I "$NVCC_ROOT/include")
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
CUBIN=$WORK/kernels.cubin
if ! "$NVCC_BIN" -cubin -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v "${INCLUDES[@]}" \
  -o "$CUBIN" "$SRC" >"$WORK/ptxas.log" 2>&1; then
  cat "$WORK/ptxas.log" >&2
  echo "sass_check: nvcc failed on $SRC" >&2
  exit 1
fi

# kernel <TAB> registers <TAB> static smem <TAB> spill stores <TAB> spill loads
awk '
  /Function properties for / { name = $NF; spill_st[name] = 0; spill_ld[name] = 0; order[n++] = name }
  /bytes spill stores/ && name != "" {
    for (i = 1; i <= NF; i++) {
      if ($(i + 1) == "bytes" && $(i + 2) == "spill" && $(i + 3) ~ /^stores/) spill_st[name] = $i + 0
      if ($(i + 1) == "bytes" && $(i + 2) == "spill" && $(i + 3) ~ /^loads/) spill_ld[name] = $i + 0
    }
  }
  /Used [0-9]+ registers/ && name != "" {
    for (i = 1; i <= NF; i++) {
      if ($i == "Used") regs[name] = $(i + 1) + 0
      if ($(i + 1) == "bytes" && $(i + 2) ~ /^smem/) smem[name] = $i + 0
    }
  }
  END {
    for (i = 0; i < n; i++) {
      k = order[i]
      printf "%s\t%d\t%d\t%d\t%d\n", k, regs[k], smem[k], spill_st[k], spill_ld[k]
    }
  }
' "$WORK/ptxas.log" >"$WORK/ptxas.tsv"

if [ ! -s "$WORK/ptxas.tsv" ]; then
  echo "sass_check: ptxas reported no kernels for $SRC" >&2
  exit 1
fi

SASS=yes
if CUOBJDUMP_BIN=$(find_tool cuobjdump "${CUOBJDUMP:-}"); then
  if ! "$CUOBJDUMP_BIN" --dump-sass "$CUBIN" >"$WORK/sass.txt" 2>"$WORK/cuobjdump.err"; then
    cat "$WORK/cuobjdump.err" >&2
    echo "sass_check: cuobjdump --dump-sass failed (it needs nvdisasm next to it or on PATH)" >&2
    exit 2
  fi
  # kernel <TAB> HMMA (or HGMMA) count
  awk '
    /Function : / { name = $NF; hmma[name] = 0; next }
    /H[G]?MMA/ && name != "" { hmma[name]++ }
    END { for (k in hmma) printf "%s\t%d\n", k, hmma[k] }
  ' "$WORK/sass.txt" >"$WORK/hmma.tsv"
else
  SASS=no
  : >"$WORK/hmma.tsv"
  echo "sass_check: no cuobjdump (set CUOBJDUMP or put it on PATH); skipping the HMMA check"
fi

awk -F'\t' -v sass="$SASS" -v hmma_file="$WORK/hmma.tsv" '
  BEGIN { while ((getline line < hmma_file) > 0) { split(line, f, "\t"); hmma[f[1]] = f[2] } }
  {
    k = $1; regs = $2; smem = $3; st = $4; ld = $5
    h = (sass == "yes") ? ((k in hmma) ? hmma[k] : 0) : "-"
    verdict = "ok"
    if (st > 0 || ld > 0) { verdict = "SPILLS"; bad++ }
    if (sass == "yes" && k ~ /^conv_.*_mma_/ && h == 0) { verdict = "NO HMMA"; bad++ }
    if (sass == "yes" && k ~ /^conv_.*_wgmma_/ && h == 0) { verdict = "NO HGMMA"; bad++ }
    printf "%-52s %3d regs %6d B smem %5d B spill st %5d B spill ld %5s HMMA  %s\n", k, regs, smem, st, ld, h, verdict
    kernels++
  }
  END {
    printf "sass_check: %d kernels, %d failing%s\n", kernels, bad, (sass == "yes") ? "" : " (HMMA not checked)"
    exit (bad > 0) ? 1 : 0
  }
' "$WORK/ptxas.tsv"
