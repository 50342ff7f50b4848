#!/usr/bin/env bash
# Runs a GPU-machine command with its logs collected into one archive, since a
# device call returns only a few files from $OUT: the command sees OUT=/tmp/o
# (the bench scripts write there), its output is teed to /tmp/o/main.log, and
# /tmp/o is packed into the real $OUT as logs.tgz at the end, whatever the
# command's exit status. Usage, as a device command:
#   tar -xJf .carry/d.tar.xz && bash bench/with_logs.sh bash bench/transformers.sh
# Several steps: bash bench/with_logs.sh bash -c 'bash bench/a.sh; bash bench/b.sh'
set -u
real_out=${OUT:?set OUT to the folder the device call returns}
export OUT=/tmp/o
mkdir -p "$OUT"
"$@" 2>&1 | tee -a "$OUT/main.log"
rc=${PIPESTATUS[0]}
tar -czf "$real_out/logs.tgz" -C /tmp o
echo "== logs in logs.tgz (exit status $rc)"
exit "$rc"
