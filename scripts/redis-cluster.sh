#!/usr/bin/env bash
# A Redis Cluster on loopback for the tests and the bench: 6 nodes (3 primaries, one replica
# each) on ports 7101-7106 (OUTBOX_TEST_CLUSTER_PORT moves the first), their files in
# ${TMPDIR:-/tmp}/outbox-redis-cluster-<port>.
#
#   scripts/redis-cluster.sh [start]   start it unless it is up and healthy; print its REDIS_URL
#   scripts/redis-cluster.sh stop      shut every node down and remove the files
#   scripts/redis-cluster.sh kill PORT    kill one node at once (SIGKILL: a crash, no shutdown)
#   scripts/redis-cluster.sh revive PORT  start a killed node again with its cluster identity
#                                         (it rejoins, as a replica if it lost its slots)
#
# A cluster that is not healthy (a node down, slots not all served) is wiped and made again:
# it holds test data only. Needs redis-server and redis-cli (scripts/services.sh installs them).
set -euo pipefail
base="${OUTBOX_TEST_CLUSTER_PORT:-7101}"
dir="${TMPDIR:-/tmp}/outbox-redis-cluster-$base"
ports=()
for i in 0 1 2 3 4 5; do ports+=("$((base + i))"); done
url="redis+cluster://$(printf '127.0.0.1:%s,' "${ports[@]:0:3}" | sed 's/,$//')"

stop_nodes() {
  for port in "${ports[@]}"; do
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  done
  for port in "${ports[@]}"; do
    for _ in $(seq 50); do
      redis-cli -p "$port" ping >/dev/null 2>&1 || break
      sleep 0.1
    done
  done
}

start_node() {
  redis-server --port "$1" --bind 127.0.0.1 --daemonize yes \
    --cluster-enabled yes --cluster-config-file "$dir/nodes-$1.conf" \
    --cluster-node-timeout 2000 --cluster-replica-validity-factor 0 \
    --appendonly no --save '' \
    --dir "$dir" --logfile "$dir/$1.log" --pidfile "$dir/$1.pid" >/dev/null
  for _ in $(seq 100); do
    redis-cli -p "$1" ping >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "node $1 did not start; see $dir/$1.log" >&2
  return 1
}

healthy() {
  for port in "${ports[@]}"; do
    redis-cli -p "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
  done
  # Three primaries, each with a replica, all connected.
  local nodes
  nodes="$(redis-cli -p "$base" cluster nodes 2>/dev/null)" || return 1
  [ "$(grep -c 'master' <<<"$nodes")" -eq 3 ] || return 1
  [ "$(grep -c 'slave' <<<"$nodes")" -eq 3 ] || return 1
  ! grep -q 'fail\|disconnected' <<<"$nodes" || return 1
  # Every replica has finished its first sync: a failover before that would find no replica
  # able to take over.
  for port in "${ports[@]}"; do
    local replication
    replication="$(redis-cli -p "$port" info replication 2>/dev/null)" || return 1
    if grep -q '^role:slave' <<<"$replication"; then
      grep -q '^master_link_status:up' <<<"$replication" || return 1
    fi
  done
}

case "${1:-start}" in
  stop)
    stop_nodes
    rm -rf "$dir"
    exit 0
    ;;
  kill)
    kill -9 "$(cat "$dir/${2:?port}.pid")"
    rm -f "$dir/$2.pid"
    exit 0
    ;;
  revive)
    start_node "${2:?port}"
    exit 0
    ;;
  start) ;;
  *)
    echo "usage: $0 [start|stop|kill PORT|revive PORT]" >&2
    exit 2
    ;;
esac

if healthy; then
  echo "$url"
  exit 0
fi

command -v redis-server >/dev/null && command -v redis-cli >/dev/null || {
  echo "redis-server and redis-cli are needed (scripts/services.sh installs them)" >&2
  exit 1
}
stop_nodes
rm -rf "$dir"
mkdir -p "$dir"
for port in "${ports[@]}"; do
  start_node "$port"
done
redis-cli --cluster create $(printf '127.0.0.1:%s ' "${ports[@]}") \
  --cluster-replicas 1 --cluster-yes >"$dir/create.log" 2>&1 || {
  cat "$dir/create.log" >&2
  exit 1
}
for _ in $(seq 300); do
  if healthy; then
    echo "$url"
    exit 0
  fi
  sleep 0.1
done
echo "the Redis Cluster on ports ${ports[*]} did not become healthy; see $dir" >&2
exit 1
