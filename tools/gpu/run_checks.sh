#!/usr/bin/env bash
# On a GPU machine: runs the CUDA tests (the ctest label gpu: every test instantiated as Cuda/...)
# and the GPU benchmarks from a bundle made by tools/gpu/bundle.sh, writing logs to $OUT.
#   tools/gpu/run_checks.sh BUNDLE_DIR [tests|bench|all]
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
  for t in backend_tests transformer_tests prompting_tests t5_tests; do
    "$bundle/bin/$t" --gtest_filter='Cuda*' --gtest_output="xml:$out/$t.xml" >"$out/$t.log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || status=1
    echo "== $t rc=$rc: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/$t.log" | tr '\n' ' ')"
    grep -E '^\[  FAILED  \]|Failure|rel_err|error' "$out/$t.log" | head -40
  done
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  "$bundle/bin/manyshot-bench" attention --backend=cuda --json --torch_peer="$bundle/torch_peer.py" \
    >"$out/bench_attention.json" 2>"$out/bench_attention.err"
  echo "== bench attention rc=$?"
  tail -c 3000 "$out/bench_attention.json"; tail -5 "$out/bench_attention.err"
fi
exit $status
