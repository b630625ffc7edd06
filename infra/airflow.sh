#!/usr/bin/env bash
# Start or stop a local Airflow (API server + scheduler + DAG processor) on 127.0.0.1.
#   infra/airflow.sh up     metadata DB migrated, pool created, UI at http://127.0.0.1:$SOLARIS_AIRFLOW_PORT
#   infra/airflow.sh down
# Metadata DB: PostgreSQL when SOLARIS_AIRFLOW_DB_URL is set (e.g.
# postgresql+psycopg2://postgres@127.0.0.1:5432/airflow), else SQLite under $SOLARIS_DATA_ROOT/airflow.
# Login: user `admin`, password generated once into $SOLARIS_DATA_ROOT/airflow/passwords.json and
# printed here; authentication is never turned off.
set -euo pipefail
source "$(dirname "$0")/env.sh"
case "${1:-}" in
  up) exec "$PROJECT_PYTHON" -m solaris_lib.devtools.airflow_services start ;;
  down) exec "$PROJECT_PYTHON" -m solaris_lib.devtools.airflow_services stop ;;
  env) exec "$PROJECT_PYTHON" -m solaris_lib.devtools.airflow_services env ;;
  *) echo "usage: $0 up|down|env" >&2; exit 2 ;;
esac
