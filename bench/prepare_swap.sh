#!/usr/bin/env bash
# Builds the swapped-operand wgmma patch (docs/notes/wip/wgmma-swap-ab.patch)
# in a scratch worktree and puts its CLI and gpu_kernels test binary in
# .device/ as aotune-swap and gpu_kernels-swap, for bench/swap_ab_probe.sh
# (carry .device holding only these two, ~21 MB: the tracked tree is ~38 MB
# of the 64 MiB carry, so move .device/aotune aside for that call). No
# kernel is compiled here.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD tree=${SWAP_TREE:-/tmp/aotune-swap-tree}
rm -rf "$tree"
git worktree prune
git worktree add -q --detach "$tree" HEAD
git -C "$tree" apply "$root/docs/notes/wip/wgmma-swap-ab.patch"
export CARGO_TARGET_DIR=${SWAP_TARGET:-$root/target/swap} AOTUNE_NO_EMBED=1
(cd "$tree" && cargo build --release --bin aotune)
log=$(mktemp)
(cd "$tree" && cargo test --profile ci --no-run -p aotune --test gpu_kernels 2>&1 | tee "$log" >/dev/null)
mkdir -p .device
cp "$CARGO_TARGET_DIR/release/aotune" .device/aotune-swap && strip .device/aotune-swap
cp "$(sed -n 's/.*Executable tests\/gpu_kernels.rs (\(.*\))/\1/p' "$log" | head -1)" .device/gpu_kernels-swap
strip .device/gpu_kernels-swap
git worktree remove --force "$tree"
du -sh .device/*
