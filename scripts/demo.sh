#!/usr/bin/env bash
# The main job: start manyshot-server on its defaults (data in ./manyshot-data, gRPC on
# 127.0.0.1:50051, /metrics on 127.0.0.1:9464), run a short client session, stop it cleanly.
set -euo pipefail
BUILD=${BUILD:-build}
SERVER="$BUILD/server/manyshot-server"
CLI="$BUILD/client/manyshot"

"$SERVER" &
server_pid=$!
trap 'kill -TERM $server_pid 2>/dev/null || true' EXIT

# Wait (up to 120 s: the first start may generate the default model) until health says SERVING.
for _ in $(seq 1 600); do
  if "$CLI" --timeout=1 health >/dev/null 2>&1; then break; fi
  if ! kill -0 "$server_pid" 2>/dev/null; then echo "demo: server exited" >&2; exit 1; fi
  sleep 0.2
done

echo "== manyshot health"
"$CLI" health
echo "== manyshot info"
"$CLI" info
echo "== /metrics (manyshot_ and process_ samples)"
curl -sf http://127.0.0.1:9464/metrics | grep -E '^(manyshot_|process_)' | head -20

kill -TERM "$server_pid"
wait "$server_pid"
trap - EXIT
echo "demo: server stopped cleanly"
