#!/bin/sh
# Renders haproxy.cfg.template (next to this script) on stdout: the proxy's listen address, its
# metrics address, and the replicas, each given as
#   HOST:PORT            one `server` line (a replica at a fixed address), or
#   dns+NAME:PORT/SLOTS  a `server-template` of SLOTS servers filled from NAME's DNS records
#                        (Kubernetes: the headless Service of a Deployment's pods). NAME may be
#                        an environment variable of HAProxy's, `${VAR}`, expanded when it starts:
#                        HAProxy's resolvers use no search domains, so a Service needs its full
#                        name, which holds the namespace.
#
#   deploy/proxy/render-haproxy-cfg.sh [--metrics HOST:PORT] LISTEN_HOST:PORT REPLICA [REPLICA ...]
#
# Only POSIX sh and awk. Replica server names are r1, r2, ... in argument order: keep the order
# when re-rendering after a change of the replica set, so the ring moves as little as possible.
set -eu

usage() {
  echo "usage: $0 [--metrics HOST:PORT] LISTEN_HOST:PORT REPLICA [REPLICA ...]" >&2
  echo "  REPLICA: HOST:PORT or dns+NAME:PORT/SLOTS" >&2
  exit 2
}
metrics=127.0.0.1:8404
if [ "${1:-}" = "--metrics" ]; then
  [ "$#" -ge 2 ] || usage
  metrics=$2
  shift 2
fi
[ "$#" -ge 2 ] || usage
listen=$1
shift
template=$(dirname "$0")/haproxy.cfg.template
[ -r "$template" ] || { echo "$0: cannot read $template" >&2; exit 1; }

check_address() {
  case $1 in
    "" | *[!A-Za-z0-9.:_\[\]-]*) echo "$0: not a HOST:PORT address: '$1'" >&2; exit 2 ;;
  esac
}
check_address "$listen"
check_address "$metrics"
replicas=""
n=0
for replica in "$@"; do
  n=$((n + 1))
  case $replica in
    dns+*/*)
      address=${replica#dns+}
      slots=${address##*/}
      address=${address%/*}
      case $address in
        '${'*) # HAProxy expands a variable inside double quotes
          variable=${address#??}
          variable=${variable%%\}*}
          case $variable in
            "" | *[!A-Z0-9_]*) echo "$0: not an environment variable: '$address'" >&2; exit 2 ;;
          esac
          check_address "${address#*\}}"
          address="\"$address\""
          ;;
        *) check_address "$address" ;;
      esac
      case $slots in "" | *[!0-9]*) echo "$0: not a slot count: '$slots'" >&2; exit 2 ;; esac
      line="server-template r${n}- ${slots} ${address} resolvers cluster_dns init-addr none"
      ;;
    *)
      check_address "$replica"
      line="server r${n} ${replica}"
      ;;
  esac
  replicas="${replicas}${line}\n  "
done

awk -v listen="$listen" -v metrics="$metrics" -v replicas="$replicas" '
  { gsub(/\$\{MANYSHOT_PROXY_LISTEN\}/, listen); gsub(/\$\{MANYSHOT_PROXY_METRICS\}/, metrics);
    gsub(/\$\{MANYSHOT_REPLICAS\}/, replicas); print }
' "$template"
