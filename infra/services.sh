#!/usr/bin/env bash
# Make sure Java, the Spark class archive (solaris_lib/sparkcds.py) and a Redis server are there, export the environment SOLARIS needs, then run
# the given command. A private redis-server started here is stopped when the command ends.
#
#   infra/services.sh COMMAND [ARGS...]
#
# Redis: the server answering at $SOLARIS_REDIS_URL (default redis://127.0.0.1:6379/0) is used;
# otherwise a private redis-server starts on a free loopback port (installed with apt-get when
# missing and running as root).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/infra/env.sh"

need_root_install() {  # package
  if [ "$(id -u)" != "0" ]; then
    echo "[services] $1 is missing and this is not root: install it and retry" >&2
    exit 1
  fi
  echo "[services] installing $1 with apt-get"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null
}

ensure_java() {
  if ! command -v java >/dev/null 2>&1; then
    need_root_install openjdk-17-jre-headless
  fi
}

ensure_spark_archive() {  # the JVM class archive every Spark job starts with (built once, ~30 s)
  # and PySpark's modules byte-compiled in its zip (solaris_lib/sparkpyc.py, once, ~2 s)
  "$PROJECT_PYTHON" -m solaris_lib.sparkpyc --quiet-when-present || true
  "$PROJECT_PYTHON" -m solaris_lib.sparkcds --quiet-when-present
}

redis_answers() {  # url (passed through the environment: argv is visible to every user)
  REDIS_PROBE_URL="$1" "$PROJECT_PYTHON" -c "import os, sys; from solaris_lib.devtools.redis_server import answers; sys.exit(0 if answers(os.environ.pop('REDIS_PROBE_URL')) else 1)"
}

redacted() {  # url -> the url with its password replaced by ***
  sed -E 's#(://[^:/@]*):[^/]*@#\1:***@#' <<<"$1"
}

PRIVATE_REDIS_PID=""
ensure_redis() {
  export SOLARIS_REDIS_URL=${SOLARIS_REDIS_URL:-redis://127.0.0.1:6379/0}
  if redis_answers "$SOLARIS_REDIS_URL"; then
    echo "[services] using Redis at $(redacted "$SOLARIS_REDIS_URL")"
    return
  fi
  command -v redis-server >/dev/null 2>&1 || need_root_install redis-server
  local port dir
  port=$("$PROJECT_PYTHON" -c "from solaris_lib.devtools.redis_server import free_port; print(free_port())")
  dir="$ROOT/.solaris/redis-$port"
  mkdir -p "$dir"
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
    --logfile "$dir/redis.log" --daemonize yes --pidfile "$dir/redis.pid"
  for _ in $(seq 50); do
    redis_answers "redis://127.0.0.1:$port/0" && break
    sleep 0.1
  done
  PRIVATE_REDIS_PID=$(cat "$dir/redis.pid")
  export SOLARIS_REDIS_URL="redis://127.0.0.1:$port/0"
  echo "[services] no Redis answered; started a private redis-server at $SOLARIS_REDIS_URL"
}

stop_private() {
  if [ -n "$PRIVATE_REDIS_PID" ]; then
    kill "$PRIVATE_REDIS_PID" 2>/dev/null || true
  fi
}

ensure_java
ensure_spark_archive
ensure_redis
trap stop_private EXIT
"$@"
