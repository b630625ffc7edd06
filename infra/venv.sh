#!/usr/bin/env bash
# Create .venv (when missing) and install the pinned requirements and SOLARIS itself.
# Re-runs only when requirements.txt or setup.cfg changed (a stamp file records their hash).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
hash=$(cat requirements.txt setup.cfg | sha1sum | cut -c1-16)
stamp="$VENV/.solaris-installed-$hash"
if [ -f "$stamp" ]; then
  exit 0
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "[venv] creating $VENV with $($PYTHON --version)"
  "$PYTHON" -m venv "$VENV"
fi
echo "[venv] installing pinned requirements (first time: about 2 minutes)"
"$VENV/bin/python" -m pip install --quiet --upgrade pip 2>&1 | grep -v "is ignored" || true
# Spark and what its warm-up job imports first: the JVM class archive (solaris_lib/sparkcds.py,
# about 30 s) is built from them while pip installs the rest. A build that fails here is
# retried by infra/services.sh before the first Spark job.
"$VENV/bin/python" -m pip install --quiet -c requirements.txt pyspark pandas pyarrow numpy 2>&1 \
  | grep -v "is ignored" || true
# PySpark's modules byte-compiled in its zip first (solaris_lib/sparkpyc.py, about 2 s)
PYTHONPATH=. "$VENV/bin/python" -m solaris_lib.sparkpyc --quiet-when-present || true
PYTHONPATH=. "$VENV/bin/python" -m solaris_lib.sparkcds --quiet-when-present \
  > "$VENV/spark-archive.log" 2>&1 &
archive=$!
"$VENV/bin/python" -m pip install --quiet -r requirements.txt 2>&1 | grep -v "is ignored" || true
wait "$archive" || true
grep "^\[spark-archive\]" "$VENV/spark-archive.log" || true
# the distribution was called `solaris` before (a name taken on the public index)
"$VENV/bin/python" -m pip uninstall --quiet --yes solaris 2>/dev/null || true
"$VENV/bin/python" -m pip install --quiet --no-deps -e . 2>&1 | grep -v "is ignored" || true
"$VENV/bin/python" - <<'PY'
import importlib, sys
missing = [m for m in ("torch", "pyspark", "faiss", "redis", "airflow", "pyarrow", "tqdm",
                     "prometheus_client", "statsd", "solaris_lib")
           if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"[venv] install incomplete, missing: {', '.join(missing)}")
PY
rm -f "$VENV"/.solaris-installed-*
touch "$stamp"
echo "[venv] ready"
