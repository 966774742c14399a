#!/usr/bin/env bash
# The ARM check: the engine (-DMANYSHOT_ENGINE_ONLY=ON) cross-compiled with Debian's aarch64
# toolchain, and its CPU kernel and model tests run under qemu-user. Correctness only: emulated
# timings say nothing about an ARM server's speed. qemu's default CPU ("max") offers SVE and SVE2;
# the kernels are compiled for NEON alone on ARM (engine/CMakeLists.txt says why), which they must
# choose. ctest runs this as `arm_check` (tests/CMakeLists.txt); the packages come from
# `scripts/setup.sh` (debian_packages.sh arm).
#   scripts/arm_check.sh [BUILD_DIR]     default build-arm64
set -euo pipefail
BUILD=$(realpath -m "${1:-build-arm64}")
cd "$(dirname "$0")/.."
for tool in aarch64-linux-gnu-g++ qemu-aarch64; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "arm_check: $tool not found; scripts/setup.sh installs the ARM toolchain" >&2
    exit 77
  fi
done
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMANYSHOT_ENGINE_ONLY=ON -DMANYSHOT_CUDA=OFF \
  -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake "${launcher[@]}" >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target cpu_kernel_tests model_io_tests

# The programs run on the :arm64 C library of the multiarch packages (cmake/aarch64-linux-gnu.cmake
# says why not -L /usr/aarch64-linux-gnu). Each test binary runs once, every test in one process:
# a process per test (ctest --test-dir "$BUILD" does that) pays qemu's start-up each time.
targets=$(qemu-aarch64 "$BUILD/cpu_kernel_tests" --gtest_list_tests |
  sed -n 's/.*GetParam() = "\(.*\)"/\1/p' | sort -u | tr '\n' ' ')
echo "arm_check: the kernel tests run on these targets under qemu: ${targets:-none}"
# The two binaries side by side (one core each); the model tests' output after the kernels'.
qemu-aarch64 "$BUILD/model_io_tests" --gtest_brief=1 >"$BUILD/model_io_tests.log" 2>&1 &
model_tests=$!
echo "arm_check: cpu_kernel_tests"
qemu-aarch64 "$BUILD/cpu_kernel_tests" --gtest_brief=1
model_status=0
wait "$model_tests" || model_status=$?
echo "arm_check: model_io_tests"
cat "$BUILD/model_io_tests.log"
[ "$model_status" -eq 0 ]
# The environment variable forcing the baseline, and refusing a target no CPU runs.
for value in neon avx9000; do
  MANYSHOT_CPU_TARGET=$value qemu-aarch64 "$BUILD/cpu_kernel_tests" --gtest_brief=1 \
    --gtest_filter=CpuTargetChoiceTest.TheEnvironmentVariableChoosesTheTarget
done
echo "arm_check: ok"
