#!/usr/bin/env bash
# The main job: start manyshot-server on its defaults (data in ./manyshot-data, gRPC on
# 127.0.0.1:50051, /metrics on 127.0.0.1:9464), run a short real client session (create an SST-2
# task, classify test sentences, get, info, /metrics), stop the server with SIGTERM.
# Run from the repository root after `cmake --build build`; BUILD=DIR picks another build dir.
# Running it again is fine: the task already exists with the same content (idempotent create).
set -euo pipefail
BUILD=${BUILD:-build}
SERVER="$BUILD/server/manyshot-server"
CLI="$BUILD/client/manyshot"
SST2_DIR=${SST2_DIR:-../shared/datasets/sst2_cbu}  # SST2_DIR=/nonexistent tries the bundled file
BUNDLED=client/examples/sst2_small.tsv

tmp=$(mktemp -d)
server_pid=
cleanup() {
  if [[ -n $server_pid ]]; then kill -TERM "$server_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# Demonstrations and test inputs: the real SST-2 files when they sit next to the repository,
# else the bundled 40-line excerpt (36 demonstrations, its last 4 sentences as inputs); from the
# real test file, its first three negative and first three positive sentences.
if [[ -f $SST2_DIR/stsa.binary.train && -f $SST2_DIR/stsa.binary.test ]]; then
  source_desc="$SST2_DIR/stsa.binary.train (first 64 lines)"
  { printf 'label\ttext\n'; head -n 64 "$SST2_DIR/stsa.binary.train" | sed -E 's/^([01]) /\1\t/'; } \
    >"$tmp/train.tsv"
  { grep -m 3 '^0 ' "$SST2_DIR/stsa.binary.test"; grep -m 3 '^1 ' "$SST2_DIR/stsa.binary.test"; } \
    >"$tmp/test.labeled"
else
  source_desc="$BUNDLED (bundled excerpt; $SST2_DIR not found)"
  head -n 37 "$BUNDLED" >"$tmp/train.tsv"
  tail -n 4 "$BUNDLED" | tr '\t' ' ' >"$tmp/test.labeled"
fi
cut -d' ' -f2- "$tmp/test.labeled" >"$tmp/test.txt"

"$SERVER" &
server_pid=$!

# Wait (up to 120 s: the first start may generate the default model) until health says SERVING.
for _ in $(seq 1 600); do
  if "$CLI" --timeout=1 health >/dev/null 2>&1; then break; fi
  if ! kill -0 "$server_pid" 2>/dev/null; then echo "demo: server exited" >&2; exit 1; fi
  sleep 0.2
done

echo "== manyshot health"
"$CLI" health
echo "NOTE: the default model (default-gpt2-tiny) has RANDOM weights: labels and probabilities"
echo "      below show the service working end to end, not accuracy (serve a trained model with --model_dir=DIR)."
echo "== manyshot create sst2-demo  ($((  $(wc -l <"$tmp/train.tsv") - 1 )) demonstrations from $source_desc)"
"$CLI" create sst2-demo --file="$tmp/train.tsv" --template='Sentence: {text}\nLabel:' \
  --labels=negative,positive --replace
echo "== manyshot classify sst2-demo  (true labels: $(cut -d' ' -f1 "$tmp/test.labeled" | tr '\n' ' ')- 0=negative 1=positive)"
"$CLI" classify sst2-demo --file="$tmp/test.txt" --format=text
echo "== manyshot get sst2-demo"
"$CLI" get sst2-demo
echo "== manyshot info"
"$CLI" info
echo "== /metrics (manyshot_requests_total, manyshot_cache_*, manyshot_inputs_classified_total)"
if ! metrics=$(curl -sf http://127.0.0.1:9464/metrics); then
  echo "demo: the metrics port did not answer /metrics" >&2
  exit 1
fi
grep -E '^(manyshot_requests_total|manyshot_cache_|manyshot_inputs_classified_total)' <<<"$metrics"

kill -TERM "$server_pid"
status=0
wait "$server_pid" || status=$?
server_pid=
if [[ $status -ne 0 ]]; then echo "demo: server exited with status $status" >&2; exit 1; fi
echo "demo: server stopped cleanly (SIGTERM, exit 0)"
