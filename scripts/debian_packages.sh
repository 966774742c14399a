#!/usr/bin/env bash
# The Debian 12 packages manyshot needs, by purpose. The one list scripts/setup.sh and the
# Dockerfile both install from, so the image builds with exactly what the tests build with.
#   debian_packages.sh build    compile manyshot-server and the manyshot CLI (-DBUILD_TESTING=OFF)
#   debian_packages.sh runtime  run them: the shared libraries they load (`ldd` of both binaries)
#                               and the font of the CLI's plots
#   debian_packages.sh test     what the test suite, the benchmarks and the tools add to "build"
#   debian_packages.sh arm      the ARM check (scripts/arm_check.sh): the aarch64 cross toolchain,
#                               qemu-user and the :arm64 libraries the engine and its tests link
#                               (setup.sh adds the arm64 architecture to dpkg first)
#   debian_packages.sh all      build + test + arm (what scripts/setup.sh installs)
set -euo pipefail

build=(
  build-essential cmake pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler librocksdb-dev
  libspdlog-dev prometheus-cpp-dev libabsl-dev libopenblas-dev nlohmann-json3-dev
  # the metrics port's HTTP server (server/metrics_http.h)
  libcpp-httplib-dev
  # checksums for the KV blob format; SHA-256 and constant-time compares for bearer tokens
  libxxhash-dev libssl-dev
  # the google.rpc error-model protos (status, error details), compiled by proto/CMakeLists.txt
  golang-github-gogo-googleapis-dev
  # cairo: the PNG plot of `manyshot eval --plot`; utf8proc: eval's Latin-1 dataset lines
  libcairo2-dev libutf8proc-dev
  # Google Highway: the CPU kernels for every instruction set, chosen at run time
  libhwy-dev
  # scripts/demo.sh (the README's command (1)) reads the server's /metrics with it
  curl
)
runtime=(
  libgrpc++1.51 libgrpc29 libprotobuf32 libabsl20220623 libre2-9 libc-ares2 libssl3
  libspdlog1.10 libfmt9 libprometheus-cpp-core1.0 libcpp-httplib0.11
  libopenblas0-pthread libgfortran5 libquadmath0 libxxhash0
  # RocksDB is linked statically; these are its compression libraries
  libsnappy1v5 liblz4-1 libzstd1 libbz2-1.0 zlib1g
  # the manyshot CLI's plots, and the font fontconfig gives the `sans-serif` they ask cairo for
  # (titles, axis labels, legend): libcairo2's fontconfig-config pulls it in as the first of its
  # font alternatives, named here so the plots' text does not rest on that choice (without any
  # font, cairo falls back to its built-in stroked "twin" font)
  libcairo2 fonts-dejavu-core
  # `manyshot eval` reads its datasets' Latin-1 lines with it
  libutf8proc2
  # the CPU kernels' run-time dispatch (Google Highway)
  libhwy1
)
test=(
  clang-format libgtest-dev libgmock-dev
  # SentencePiece: tokenizer.model support and the parity reference for Llama-2 ids
  libsentencepiece-dev sentencepiece python3-sentencepiece
  # the independent NumPy reference, and gRPC clients/reflection checks from Python
  python3-numpy python3-grpcio python3-protobuf
  curl ca-certificates openssl
  # deploy/: a real Prometheus (and promtool) for the rules and dashboard tests, nginx and
  # HAProxy as the proxies, yamllint and PyYAML for the Kubernetes and Envoy checks
  prometheus nginx haproxy yamllint python3-yaml
  # the container image test (tests/deploy/docker): a base image from debootstrap, built with
  # podman (no Docker daemon needed) and run from its mounted filesystem
  podman debootstrap
  # the fuzzing campaign (tools/fuzz/run_campaign.sh): clang with libFuzzer and the sanitizer
  # runtimes (libclang_rt.fuzzer-x86_64.a is in libclang-rt-14-dev on Debian 12)
  clang libclang-rt-14-dev
)

arm=(
  crossbuild-essential-arm64 qemu-user
  libhwy-dev:arm64 libabsl-dev:arm64 libopenblas-dev:arm64 libxxhash-dev:arm64
  libgtest-dev:arm64 libgmock-dev:arm64
)

case "${1:-}" in
  build) printf '%s\n' "${build[@]}" ;;
  runtime) printf '%s\n' "${runtime[@]}" ;;
  test) printf '%s\n' "${test[@]}" ;;
  arm) printf '%s\n' "${arm[@]}" ;;
  all) printf '%s\n' "${build[@]}" "${test[@]}" "${arm[@]}" ;;
  *)
    echo "usage: debian_packages.sh build|runtime|test|arm|all" >&2
    exit 2
    ;;
esac
