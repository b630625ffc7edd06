"""The tiny pipeline world lives in tests/integration/conftest.py (shared with the reliability
tests, built once per session); its constants and helpers are re-exported here."""

from tests.integration.conftest import FIRST, ROOT, WORLD, airflow_cli, run_dag  # noqa: F401
