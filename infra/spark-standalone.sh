#!/usr/bin/env bash
# Start or stop a Spark standalone master and worker(s) on 127.0.0.1 (pip's pyspark, no install).
#   infra/spark-standalone.sh up [WORKERS]   master at spark://127.0.0.1:${SPARK_MASTER_PORT:-7077}
#   infra/spark-standalone.sh down
# Point Airflow's spark_default connection (or SOLARIS_SPARK_MASTER) at the printed master URL.
set -euo pipefail
source "$(dirname "$0")/env.sh"
run="$PROJECT_ROOT/.solaris/spark"
mkdir -p "$run"
case "${1:-}" in
  up)
    nohup "$PROJECT_PYTHON" -m solaris_lib.devtools.spark_standalone start "${2:-1}" \
      >"$run/cluster.out" 2>&1 &
    echo $! >"$run/cluster.pid"
    for _ in $(seq 120); do
      grep -q "Spark standalone master" "$run/cluster.out" 2>/dev/null && break
      sleep 0.5
    done
    grep "Spark standalone master" "$run/cluster.out" || { cat "$run/cluster.out"; exit 1; }
    ;;
  down)
    [ -f "$run/cluster.pid" ] && kill "$(cat "$run/cluster.pid")" 2>/dev/null || true
    rm -f "$run/cluster.pid"
    echo "Spark standalone stopped"
    ;;
  *) echo "usage: $0 up [WORKERS]|down" >&2; exit 2 ;;
esac
