#!/usr/bin/env bash
# Can this bundle run on this machine? Checked first on a GPU machine, in seconds (each probe is
# bounded; the whole script by 30 s), so a device call never spends its minutes finding out:
#   1. glibc here >= the bundle's floor (GLIBC_FLOOR, written by bundle.sh: the newest GLIBC_x.y
#      symbol version any bundled binary or library needs);
#   2. libcudart.so.13 and libcublasLt.so.13 load (the CUDA backend plugin opens them);
#   3. the driver: nvidia-smi answers, and its version runs CUDA 13 (>= 580);
#   4. ldd of every bundled binary and of the plugin finds every library.
# Prints one line per check and exits 1 naming what failed, 0 when all passed.
#   tools/gpu/preflight.sh BUNDLE_DIR
# Rehearsal on the emulated plugin (MANYSHOT_CUDA_PLUGIN set, no GPU here): checks 2 and 3 are
# reported as skipped.
set -uo pipefail
bundle=$(cd "${1:?bundle dir}" && pwd)
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
failed=0
ok() { echo "preflight: ok      $*"; }
bad() { echo "preflight: FAILED  $*"; failed=1; }
skip() { echo "preflight: skipped $*"; }
version_ge() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$2" ]; }  # $1 >= $2

need=$(cat "$bundle/GLIBC_FLOOR" 2>/dev/null)
have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
if [ -z "$need" ]; then
  bad "glibc: the bundle has no GLIBC_FLOOR (remake it with tools/gpu/bundle.sh)"
elif [ -z "$have" ]; then
  bad "glibc: getconf GNU_LIBC_VERSION does not answer here"
elif version_ge "$have" "$need"; then
  ok "glibc $have >= $need, the bundle's floor"
else
  bad "glibc $have here, the bundle needs $need: build on an older distribution"
fi

emulated=${MANYSHOT_CUDA_PLUGIN:-}
for lib in libcudart.so.13 libcublasLt.so.13; do
  if [ -n "$emulated" ]; then
    skip "$lib (emulated plugin: $emulated)"
  elif timeout 10 python3 -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1])' "$lib" 2>/dev/null; then
    ok "$lib loads"
  else
    bad "$lib not found in LD_LIBRARY_PATH ($LD_LIBRARY_PATH) or the loader's cache"
  fi
done

if [ -n "$emulated" ]; then
  skip "driver (emulated plugin)"
else
  gpu=$(timeout 10 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)
  driver=$(echo "$gpu" | awk -F', *' '{print $2}')
  if [ -z "$driver" ] || ! [[ "$driver" =~ ^[0-9]+(\.[0-9]+)*$ ]]; then
    bad "driver: nvidia-smi gave no GPU (${gpu:-no output})"
  elif version_ge "$driver" 580; then
    ok "driver $driver on $(echo "$gpu" | awk -F', *' '{print $1}') (CUDA 13 needs >= 580)"
  else
    bad "driver $driver is older than 580, the oldest that runs CUDA 13"
  fi
fi

for binary in "$bundle"/bin/* "$bundle"/lib/libmanyshot_cuda.so; do
  [ -e "$binary" ] || continue
  missing=$(timeout 10 ldd "$binary" 2>&1 | grep -E 'not found|not a dynamic' | sed 's/^[[:space:]]*//' | tr '\n' ';')
  if [ -n "$missing" ]; then
    bad "ldd $(basename "$binary"): $missing"
  else
    ok "ldd $(basename "$binary")"
  fi
done

if [ "$failed" -ne 0 ]; then
  echo "preflight: this machine cannot run the bundle; nothing else was started"
  exit 1
fi
echo "preflight: passed"
