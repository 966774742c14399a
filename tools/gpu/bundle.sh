#!/usr/bin/env bash
# Packs what a GPU machine without this project's Debian packages needs to run the CUDA tests and
# benchmarks: the binaries of a CUDA build (stripped), the shared libraries they need beyond
# glibc/libstdc++ and CUDA's own, the GPT-2 tokenizer files and the SST-2 data. The GPU machine has
# nvcc, the CUDA libraries and python3 with torch, but none of gRPC, RocksDB, abseil or OpenBLAS.
#
#   tools/gpu/bundle.sh BUILD_DIR OUT_DIR [ARCHIVE]    then run tools/gpu/run_checks.sh OUT_DIR there
#
# The bundle is ~131 MB; a device run carries at most 64 MiB with the working tree, so ARCHIVE
# (e.g. .gpu/bundle.tar.xz, ~30 MB; .gpu/ is git-ignored) packs it with xz for the trip, and
# tools/gpu/session.sh unpacks it there.
set -euo pipefail
build=${1:?build dir}
out=${2:?output dir}
archive=${3:-}
root=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/share/gpt2" "$out/shared/datasets"
bins=(tests/backend_tests tests/transformer_tests tests/prompting_tests tests/t5_tests tests/cache/cache_tests
      tests/integration/integration_tests bench/manyshot-bench
      server/manyshot-server client/manyshot)
for b in "${bins[@]}"; do
  [ -f "$build/$b" ] || { echo "bundle.sh: missing $build/$b" >&2; exit 1; }
  strip -o "$out/bin/$(basename "$b")" "$build/$b"
done
# The newest GLIBC_x.y symbol version a file needs (the glibc it cannot run below).
# (A library may need none: grep finding nothing is not an error here.)
glibc_floor() {
  { objdump -T "$1" 2>/dev/null || true; } | { grep -oE 'GLIBC_[0-9]+\.[0-9]+' || true; } |
    sed 's/GLIBC_//' | sort -uV | tail -1
}
floor=$(for b in "$out"/bin/*; do glibc_floor "$b"; done | sort -V | tail -1)
# Shared libraries outside glibc, libstdc++/libgcc and CUDA (the GPU machine has its own), except
# those that need a newer glibc than the binaries themselves (libexpat needs 2.36, libcairo 2.35 on
# Debian 12): bundled, they would raise the floor for the whole bundle; left out, the GPU host's
# own build of them is used (python3 needs libexpat; tools/gpu/preflight.sh's ldd check names any
# the host lacks, in seconds).
for b in "$out"/bin/*; do
  ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | grep -vE '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux)[.-]|libcu|libnv' |
  while read -r lib; do
    lib_floor=$(glibc_floor "$lib")
    if [ -n "$lib_floor" ] && [ "$(printf '%s\n%s\n' "$lib_floor" "$floor" | sort -V | tail -1)" != "$floor" ]; then
      echo "bundle.sh: left out $(basename "$lib") (needs glibc $lib_floor, the binaries $floor)" >&2
      continue
    fi
    cp -L "$lib" "$out/lib/"
  done
# The CUDA backend plugin (found through LD_LIBRARY_PATH by its file name).
cp "$build/engine/libmanyshot_cuda.so" "$out/lib/"
cp /usr/local/share/manyshot/gpt2/* "$out/share/gpt2/"
cp -r "$root/../shared/datasets/sst2_cbu" "$out/shared/datasets/" 2>/dev/null || true
cp "$root/tools/gpu/run_checks.sh" "$root/tools/gpu/preflight.sh" "$out/"
# What tools/gpu/preflight.sh compares with the GPU host's glibc (the plugin counts too).
for f in "$out"/bin/* "$out"/lib/*; do glibc_floor "$f"; done | sort -V | tail -1 >"$out/GLIBC_FLOOR"
echo "bundle.sh: glibc floor $(cat "$out/GLIBC_FLOOR")"
cp "$root/bench/torch_peer.py" "$out/" 2>/dev/null || true
du -sh "$out"
if [ -n "$archive" ]; then
  mkdir -p "$(dirname "$archive")"
  # Its top folder is always bundle/, whatever OUT_DIR was called.
  tar -C "$(dirname "$out")" --transform "s,^$(basename "$out"),bundle," -cf - "$(basename "$out")" |
    xz -6 -T2 >"$archive.partial"
  mv "$archive.partial" "$archive"
  ls -l "$archive"
fi
