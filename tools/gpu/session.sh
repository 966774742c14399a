#!/usr/bin/env bash
# A whole GPU session in ONE device call (a session has ~15 minutes of device time, ~2 of them
# the machine's start, and a call may run 10): issue 9's checks (the Cuda/ tests and the section 4
# benchmarks) and issue 15's training of the demonstration model, within a time budget, leaving
# under $OUT only what a device run brings back (at most 8 files of at most 16 MiB).
#
#   tools/gpu/session.sh [all|checks|train]          (default all)
#
# Carry (both git-ignored): .gpu (tools/gpu/bundle.sh BUILD /tmp/bundle .gpu/bundle.tar.xz on a
# -DMANYSHOT_NATIVE=OFF build) for checks, tools/icl_model/work (tools/icl_model/prepare_data.py)
# for train. all: the training starts at once and the tests run beside it (they check results, not
# speed); the benchmarks run after the training, with the GPU to themselves, in what is left of
# SESSION_SECONDS (default 560: give the call timeout_s 590 or more). Comes back:
#   $OUT/results.tar.xz   every log: this script's, the tests' logs and XML, the benchmarks' JSON,
#                         the training log and PROVENANCE.json
#   $OUT/icl/model/*      the trained model's files (config, index, bf16 shards, split into parts
#                         of at most 15 MiB: tools/icl_model/transport.py join)
set -uo pipefail
what=${1:-all}
case "$what" in all | checks | train) ;; *) echo "usage: $0 [all|checks|train]" >&2; exit 2 ;; esac
out=${OUT:-/tmp/manyshot-gpu-session}
budget=${SESSION_SECONDS:-560}
start=$(date +%s)
left() { echo $((budget - ($(date +%s) - start))); }
logs="$out/logs"
mkdir -p "$logs"
say() { echo "== [$(($(date +%s) - start))s] $*" | tee -a "$logs/session.log"; }
# xz_tar x ARCHIVE DIR | xz_tar c ARCHIVE DIR NAME: tar with xz, or Python's tarfile where the
# machine has no xz (the GPU image's python3 always has it).
xz_tar() {
  if command -v xz >/dev/null; then
    if [ "$1" = x ]; then tar -C "$3" -xJf "$2"; else tar -C "$3" -cJf "$2" "$4"; fi
  else
    python3 - "$@" <<'PY'
import os, sys, tarfile
mode, archive, folder = sys.argv[1:4]
if mode == "x":
    with tarfile.open(archive, "r:xz") as t:
        t.extractall(folder)
else:
    with tarfile.open(archive, "w:xz") as t:
        t.add(os.path.join(folder, sys.argv[4]), arcname=sys.argv[4])
PY
  fi
}
status=0

say "session.sh $what, budget ${budget}s, commit ${COMMIT:-unknown}"
nvidia-smi 2>&1 | tee -a "$logs/session.log"

train_pid=
if [ "$what" != checks ]; then
  # train_icl_model.sh's own budgets: 4 minutes of steps, 5 in all, killed at 330 s.
  say "training starts (tools/gpu/train_icl_model.sh)"
  OUT="$out/icl" ICL_MAX_MINUTES=${ICL_MAX_MINUTES:-4} ICL_TOTAL_MINUTES=${ICL_TOTAL_MINUTES:-5} \
    ICL_TIMEOUT=${ICL_TIMEOUT:-330} bash tools/gpu/train_icl_model.sh >"$logs/icl_console.log" 2>&1 &
  train_pid=$!
fi

bundle=
if [ "$what" != train ]; then
  if [ -f .gpu/bundle.tar.xz ]; then
    rm -rf /tmp/manyshot-gpu && mkdir -p /tmp/manyshot-gpu
    xz_tar x .gpu/bundle.tar.xz /tmp/manyshot-gpu && bundle=/tmp/manyshot-gpu/bundle
    say "bundle unpacked: $(du -sh /tmp/manyshot-gpu | cut -f1)"
  else
    say "no .gpu/bundle.tar.xz: make it with tools/gpu/bundle.sh and carry .gpu"
    status=1
  fi
fi
if [ -n "$bundle" ]; then
  OUT="$logs/checks" bash tools/gpu/run_checks.sh "$bundle" tests 2>&1 | tee -a "$logs/session.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  say "tests done"
fi

if [ -n "$train_pid" ]; then
  wait "$train_pid"
  rc=$?
  [ $rc -eq 0 ] || status=1
  say "training exit status $rc"
  tail -25 "$logs/icl_console.log" | tee -a "$logs/session.log"
  for f in train.log PROVENANCE.json; do
    [ -f "$out/icl/$f" ] && mv "$out/icl/$f" "$logs/icl_$f"
  done
fi

if [ -n "$bundle" ]; then
  remaining=$(($(left) - 20))
  if [ "$remaining" -lt 60 ]; then
    say "no time left for the benchmarks (${remaining}s)"
    status=1
  else
    # Attention first (issue 9's main figures), then the restore; both end by the deadline.
    say "benchmarks, ${remaining}s"
    OUT="$logs/checks" BENCH_DEADLINE=$(($(date +%s) + remaining)) bash tools/gpu/run_checks.sh \
      "$bundle" bench 2>&1 | tee -a "$logs/session.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  fi
fi

say "exit status $status; packing the logs"
xz_tar c "$out/results.tar.xz" "$out" logs && rm -rf "$logs"
find "$out" -type f -printf '%s %P\n' | sort -k2
exit $status
