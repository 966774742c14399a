#!/usr/bin/env bash
# On a GPU machine: runs the CUDA tests (the ctest label gpu: every test instantiated as Cuda/...)
# and the GPU benchmarks from a bundle made by tools/gpu/bundle.sh, writing logs to $OUT.
#   tools/gpu/run_checks.sh BUNDLE_DIR [tests|bench|sanitize|all]
# sanitize: compute-sanitizer's memcheck, racecheck and synccheck over the Cuda* suites, when the
# host has it (else reported as skipped), each run bounded like the benchmarks.
# Rehearsal without a GPU: MANYSHOT_CUDA_PLUGIN=build/testing/simt/libmanyshot_cuda_simt.so runs the
# tests on the emulated plugin (the benchmarks' references are too large for the emulator).
set -uo pipefail
bundle=$(cd "${1:?bundle dir}" && pwd)
what=${2:-all}
out=${OUT:-/tmp/manyshot-gpu-out}
mkdir -p "$out"
repo=$(pwd)
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# The test binaries look for the sources, tokenizer and data where they were built.
mkdir -p /work /usr/local/share/manyshot
[ -e /work/main ] || ln -s "$repo" /work/main
[ -e /work/shared ] || ln -s "$bundle/shared" /work/shared
[ -e /usr/local/share/manyshot/gpt2 ] || ln -s "$bundle/share/gpt2" /usr/local/share/manyshot/gpt2
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv | tee "$out/gpu.txt"
status=0
if [ "$what" = tests ] || [ "$what" = all ]; then
  # integration_tests' Cuda/GpuServerTest runs the bundle's manyshot-server on --backend=cuda.
  for t in backend_tests transformer_tests prompting_tests t5_tests cache_tests integration_tests; do
    MANYSHOT_TEST_BIN_DIR="$bundle/bin" "$bundle/bin/$t" --gtest_filter='Cuda*' \
      --gtest_output="xml:$out/$t.xml" >"$out/$t.log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || status=1
    echo "== $t rc=$rc: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/$t.log" | tr '\n' ' ')"
    # A skipped Cuda test did not use the GPU (the plugin did not load, no device...): that is a
    # failure here, except for the tests that need the emulator's own switches.
    skipped=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$out/$t.log")
    emulator_only=$(grep -c 'only the emulated cuBLASLt can be made' "$out/$t.log")
    if [ "$skipped" -gt "$emulator_only" ]; then
      status=1
      echo "== $t: $((skipped - emulator_only)) Cuda test(s) SKIPPED, so not run on the GPU; why:"
      grep -A1 -E ': Skipped$' "$out/$t.log" | grep -vE ': Skipped$|^--$|only the emulated' | sort | uniq -c | head -5
    fi
    grep -E '^\[  FAILED  \]|Failure|rel_err|error' "$out/$t.log" | head -40
  done
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  # The speed targets (docs/performance.md): context attention and queries/s against same-run
  # references and the PyTorch peer; then restore of the 1000-shot task (its f32 K/V) from RocksDB
  # into GPU memory against re-encoding it (--quick: the scaling rounds stop at 1000 shots).
  # BENCH_TIMEOUT (seconds, default 300) bounds each; BENCH_DEADLINE (epoch seconds) all of them.
  for bench in attention cache; do
    limit=${BENCH_TIMEOUT:-300}
    if [ -n "${BENCH_DEADLINE:-}" ]; then
      until_deadline=$((BENCH_DEADLINE - $(date +%s)))
      [ "$until_deadline" -lt "$limit" ] && limit=$until_deadline
    fi
    if [ "$limit" -lt 20 ]; then
      echo "== bench $bench: not run, ${limit}s left before BENCH_DEADLINE"
      status=1
      continue
    fi
    args=(--backend=cuda --json)
    [ "$bench" = attention ] && args+=(--torch_peer="$bundle/torch_peer.py")
    [ "$bench" = cache ] && args+=(--quick)
    timeout -k 10 "$limit" "$bundle/bin/manyshot-bench" "$bench" "${args[@]}" \
      >"$out/bench_$bench.json" 2>"$out/bench_$bench.err"
    rc=$?
    [ $rc -eq 0 ] || status=1
    echo "== bench $bench rc=$rc"
    tail -c 3000 "$out/bench_$bench.json"; tail -5 "$out/bench_$bench.err"
  done
fi
if [ "$what" = sanitize ]; then
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  if [ -z "$sanitizer" ]; then
    echo "== sanitize: skipped, no compute-sanitizer on this host"
  else
    # The kernels' own suite first: it covers every kernel at the most shapes per second.
    for t in backend_tests transformer_tests prompting_tests t5_tests cache_tests; do
      for tool in memcheck racecheck synccheck; do
        limit=${BENCH_TIMEOUT:-300}
        if [ -n "${BENCH_DEADLINE:-}" ]; then
          until_deadline=$((BENCH_DEADLINE - $(date +%s)))
          [ "$until_deadline" -lt "$limit" ] && limit=$until_deadline
        fi
        if [ "$limit" -lt 20 ]; then
          echo "== sanitize $tool $t: not run, ${limit}s left before BENCH_DEADLINE"
          continue
        fi
        timeout -k 10 "$limit" "$sanitizer" --tool "$tool" --error-exitcode 99 \
          "$bundle/bin/$t" --gtest_filter='Cuda*' >"$out/sanitize_${tool}_$t.log" 2>&1
        rc=$?
        [ $rc -eq 0 ] || status=1
        echo "== sanitize $tool $t rc=$rc: $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED) ' "$out/sanitize_${tool}_$t.log" | tr '\n' ' ')"
      done
    done
  fi
fi
exit $status
