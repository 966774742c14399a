#!/usr/bin/env bash
# The fuzzing campaign (tests/fuzz/README.md): builds the libFuzzer targets with Debian's clang and
# -fsanitize=fuzzer,address,undefined into build-fuzz/, runs each target for a number of executions
# (default 1e6) starting from its committed seed corpus, and prints one line per target: executions,
# seconds, executions per second, and what libFuzzer found (crash, leak, timeout, OOM artifacts).
#
#   tools/fuzz/run_campaign.sh [--runs=N] [--max_total_time=SECONDS] [--no_build] [TARGET...]
#
# Everything it writes is under build-fuzz/campaign/: <target>.log (libFuzzer's output),
# corpus/<target>/ (the seeds plus what libFuzzer found interesting; not committed: minimize with
# -merge=1 into tests/fuzz/corpus/<target>/ when a new seed is worth keeping), artifacts/ (inputs
# that failed, to replay with `build-fuzz/tests/fuzz/<target>_fuzzer FILE`). Builds take
# /tmp/build.lock when it exists, so that they never run beside the other builds on a shared
# machine. The exit status is non-zero when any target failed or did not reach its executions.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${MANYSHOT_FUZZ_BUILD_DIR:-$root/build-fuzz}
runs=1000000
max_total_time=0  # 0: no time limit, stop at --runs
do_build=1
targets=()
for arg in "$@"; do
  case "$arg" in
    --runs=*) runs=${arg#--runs=} ;;
    --max_total_time=*) max_total_time=${arg#--max_total_time=} ;;
    --no_build) do_build=0 ;;
    -*) echo "unknown option $arg" >&2; exit 2 ;;
    *) targets+=("$arg") ;;
  esac
done
all_targets=(safetensors config_json tokenizer_json vocab_merges tokenizer_model rpc metrics_http)
[[ ${#targets[@]} -gt 0 ]] || targets=("${all_targets[@]}")

# Largest input each target is given: room for the seeds' size and some growth, no more, since
# the cost of an execution grows with it.
max_len() {
  case "$1" in
    tokenizer_json | tokenizer_model | vocab_merges) echo 16384 ;;
    rpc) echo 4096 ;;
    *) echo 4096 ;;
  esac
}

# libFuzzer's per-input leak check runs LeakSanitizer whenever an input's mallocs outnumber its
# frees, which the in-process server's own threads make true for almost every RPC input: it halves
# that target's rate. For rpc and metrics_http (whose servers run threads of their own), leaks are
# checked once, when the process exits (ASAN_OPTIONS below).
per_input_leaks() {
  case "$1" in
    rpc | metrics_http) echo 0 ;;
    *) echo 1 ;;
  esac
}

locked() {
  if [[ -e /tmp/build.lock ]]; then flock /tmp/build.lock "$@"; else "$@"; fi
}

if [[ $do_build == 1 ]]; then
  # Coverage instrumentation and the sanitizers on all of manyshot's code (so that the parsers'
  # branches guide libFuzzer); the system libraries (gRPC, protobuf, RocksDB, OpenBLAS) stay
  # uninstrumented. -O1 for readable reports and quick builds. Werror off: warnings are the GCC
  # build's job (CI), this build only has to produce fuzzers.
  sanitize="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
  sanitize+=" -fno-omit-frame-pointer -gline-tables-only"
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Fuzz \
    -DCMAKE_C_FLAGS_FUZZ="-O1 $sanitize" -DCMAKE_CXX_FLAGS_FUZZ="-O1 $sanitize" \
    -DMANYSHOT_FUZZ=ON -DMANYSHOT_CUDA=OFF -DMANYSHOT_WERROR=OFF \
    -DMANYSHOT_FUZZ_ASAN_TESTS=OFF >/dev/null
  locked cmake --build "$build" -j2 --target "${targets[@]/%/_fuzzer}"
fi

out=$build/campaign
mkdir -p "$out/artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=0
printf '%-16s %10s %8s %9s %s\n' target executions seconds exec/s findings
for t in "${targets[@]}"; do
  corpus=$out/corpus/$t
  mkdir -p "$corpus"
  log=$out/$t.log
  start=$(date +%s)
  rc=0
  "$build/tests/fuzz/${t}_fuzzer" -runs="$runs" -max_total_time="$max_total_time" \
    -timeout=30 -rss_limit_mb=4096 -malloc_limit_mb=4096 -detect_leaks="$(per_input_leaks "$t")" \
    -max_len="$(max_len "$t")" -print_final_stats=1 -close_fd_mask=0 \
    -artifact_prefix="$out/artifacts/$t-" "$corpus" "$root/tests/fuzz/corpus/$t" \
    >"$log" 2>&1 || rc=$?
  seconds=$(($(date +%s) - start))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  # Artifacts of earlier runs count too: a failing input stays a failure until it is removed.
  found=$(ls "$out/artifacts" | grep -c "^$t-" || true)
  verdict="none"
  if [[ $rc != 0 || $found != 0 ]]; then
    verdict="rc=$rc, $found artifact(s): $(ls "$out/artifacts" | grep "^$t-" | tr '\n' ' ')"
    failed=1
  elif [[ -z $execs || $execs -lt $runs ]]; then
    verdict="stopped before $runs executions (--max_total_time)"
    failed=1
  fi
  printf '%-16s %10s %8s %9s %s\n' "$t" "${execs:-?}" "$seconds" "${rate:-?}" "$verdict"
done
exit $failed
