#!/bin/sh
# Renders nginx.conf.template (next to this script) on stdout: the proxy's listen address and one
# `server HOST:PORT max_fails=0;` line per manyshot-server replica.
#
#   deploy/proxy/render-nginx-conf.sh 0.0.0.0:50051 10.0.0.11:50051 10.0.0.12:50051 \
#     > /etc/manyshot-proxy/nginx.conf
#
# Only POSIX sh and awk. List the replicas by stable addresses, in any order (the ring does not
# depend on the order); adding or removing one moves about 1/N of the tasks.
set -eu

usage() {
  echo "usage: $0 LISTEN_HOST:PORT REPLICA_HOST:PORT [REPLICA_HOST:PORT ...]" >&2
  exit 2
}
[ "$#" -ge 2 ] || usage
listen=$1
shift
template=$(dirname "$0")/nginx.conf.template
[ -r "$template" ] || { echo "$0: cannot read $template" >&2; exit 1; }

check_address() {
  case $1 in
    "" | *[!A-Za-z0-9.:_\[\]-]*) echo "$0: not a HOST:PORT address: '$1'" >&2; exit 2 ;;
  esac
}
check_address "$listen"
replicas=""
for replica in "$@"; do
  check_address "$replica"
  # max_fails=0: nginx never marks a replica failed, so its tasks are never hashed elsewhere.
  replicas="${replicas}server ${replica} max_fails=0;\n    "
done

awk -v listen="$listen" -v replicas="$replicas" '
  { gsub(/\$\{MANYSHOT_PROXY_LISTEN\}/, listen); gsub(/\$\{MANYSHOT_REPLICAS\}/, replicas); print }
' "$template"
