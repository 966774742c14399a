#!/usr/bin/env bash
# A GPU session's device calls (a session has ~15 minutes of device time, ~2 of them the
# machine's start, and a call may run 10), each within a time budget, leaving under $OUT only
# what a device run brings back (at most 8 files of at most 16 MiB).
#
#   tools/gpu/session.sh [checks|train]          (default checks)
#
# checks: the verification call. tools/gpu/preflight.sh first (glibc, CUDA 13 libraries, driver,
#   ldd of every binary: a machine that cannot run the bundle fails in seconds, nothing else
#   started), then the Cuda/ tests, then the benchmarks with the GPU to themselves, then
#   compute-sanitizer over the Cuda* suites in what is left of SESSION_SECONDS (default 560: give
#   the call timeout_s 590 or more). Carry .gpu (tools/gpu/bundle.sh BUILD /tmp/bundle
#   .gpu/bundle.tar.xz on a -DMANYSHOT_NATIVE=OFF build).
# train: the demonstration model's training alone (its own call, so it never takes the
#   benchmarks' time). Carry tools/icl_model/work (tools/icl_model/prepare_data.py).
# Comes back:
#   $OUT/results.tar.xz   every log: this script's, the preflight's, the tests' logs and XML, the
#                         benchmarks' JSON, the sanitizer's logs; train: the training log and
#                         PROVENANCE.json
#   $OUT/icl/model/*      train: the trained model's files (config, index, bf16 shards, split into
#                         parts of at most 15 MiB: tools/icl_model/transport.py join)
set -uo pipefail
what=${1:-checks}
case "$what" in checks | train) ;; *) echo "usage: $0 [checks|train]" >&2; exit 2 ;; esac
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
timeout 10 nvidia-smi 2>&1 | tee -a "$logs/session.log"

train_pid=
if [ "$what" = train ]; then
  # train_icl_model.sh's own budgets: 4 minutes of steps, 5 in all, killed at 330 s.
  say "training starts (tools/gpu/train_icl_model.sh)"
  OUT="$out/icl" ICL_MAX_MINUTES=${ICL_MAX_MINUTES:-4} ICL_TOTAL_MINUTES=${ICL_TOTAL_MINUTES:-5} \
    ICL_TIMEOUT=${ICL_TIMEOUT:-330} bash tools/gpu/train_icl_model.sh >"$logs/icl_console.log" 2>&1 &
  train_pid=$!
fi

bundle=
if [ "$what" = checks ]; then
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
  # pipefail: the pipeline fails when the preflight does (or runs past 30 s).
  if ! timeout -k 5 30 bash "$bundle/preflight.sh" "$bundle" 2>&1 | tee -a "$logs/session.log"; then
    say "preflight failed: nothing else runs"
    bundle=
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
    # Attention first (the main speed targets), then the restore; both end by the deadline.
    say "benchmarks, ${remaining}s"
    deadline=$(($(date +%s) + remaining))
    OUT="$logs/checks" BENCH_DEADLINE=$deadline bash tools/gpu/run_checks.sh \
      "$bundle" bench 2>&1 | tee -a "$logs/session.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    say "compute-sanitizer, $((deadline - $(date +%s)))s"
    OUT="$logs/checks" BENCH_DEADLINE=$deadline bash tools/gpu/run_checks.sh \
      "$bundle" sanitize 2>&1 | tee -a "$logs/session.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  fi
fi

say "exit status $status; packing the logs"
xz_tar c "$out/results.tar.xz" "$out" logs && rm -rf "$logs"
find "$out" -type f -printf '%s %P\n' | sort -k2
exit $status
