# Environment shared by make targets, the demo and the Airflow/Spark scripts. Source it.
# The venv's bin/ goes first on PATH: spark-submit runs `python3` from PATH (find-spark-home),
# and Airflow's Spark hook runs the bare name `spark-submit`.
PROJECT_ROOT=${PROJECT_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
export PROJECT_ROOT
export PROJECT_PYTHON=${PROJECT_PYTHON:-$PROJECT_ROOT/.venv/bin/python}
export PATH="$(dirname "$PROJECT_PYTHON"):$PATH"
export SOLARIS_DATA_ROOT=${SOLARIS_DATA_ROOT:-$PROJECT_ROOT/var/data}
export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1}
export PYSPARK_PYTHON=${PYSPARK_PYTHON:-$PROJECT_PYTHON}
export PYSPARK_DRIVER_PYTHON=${PYSPARK_DRIVER_PYTHON:-$PROJECT_PYTHON}
export PYTHONUNBUFFERED=1
