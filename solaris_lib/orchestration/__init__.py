"""Runtime helpers of the Airflow DAGs (called inside tasks, never at DAG parse time)."""
