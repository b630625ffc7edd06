#!/usr/bin/env bash
# Start or stop a private Redis for SOLARIS on 127.0.0.1 (never touches another server).
#   infra/redis.sh up [PORT]    prints the SOLARIS_REDIS_URL to export
#   infra/redis.sh down
# Uses infra/redis.conf when present (memory policy, encodings and the append-only file
# recommended for the cache; the AOF lives in .solaris/redis and survives a restart).
set -euo pipefail
source "$(dirname "$0")/env.sh"
run="$PROJECT_ROOT/.solaris/redis"
mkdir -p "$run"
case "${1:-}" in
  up)
    port=${2:-6380}
    conf=()
    [ -f "$PROJECT_ROOT/infra/redis.conf" ] && conf=("$PROJECT_ROOT/infra/redis.conf")
    redis-server "${conf[@]}" --port "$port" --bind 127.0.0.1 \
      --dir "$run" --logfile "$run/redis.log" --daemonize yes --pidfile "$run/redis.pid"
    sleep 0.3
    echo "export SOLARIS_REDIS_URL=redis://127.0.0.1:$port/0"
    ;;
  down)
    [ -f "$run/redis.pid" ] && kill "$(cat "$run/redis.pid")" 2>/dev/null || true
    rm -f "$run/redis.pid"
    echo "private Redis stopped"
    ;;
  *) echo "usage: $0 up [PORT]|down" >&2; exit 2 ;;
esac
