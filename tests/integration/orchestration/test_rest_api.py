"""The precompute DAG driven like an operator drives it: API server, scheduler and DAG processor
on loopback, login through REST API v2, unpause, trigger an interval, poll the run to success.

The interval triggered is FIRST, which the session's ``precompute_first`` already ran with
``dag.test()``: this run through the scheduler is also the rerun (a retry, a backfill) that
must publish the same content under the same version."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from solaris_lib.client import SolarisClient
from solaris_lib.devtools.airflow_services import ADMIN_USER, AirflowServices
from solaris_lib.evaluation.serving import read_evaluation
from solaris_lib.layout import DataLayout
from tests.budgets import TEST_TIMEOUT_MS
from tests.integration.conftest import published_content
from tests.integration.orchestration.conftest import FIRST, ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]
DAG_ID = "solaris_precompute"


def call(base: str, method: str, path: str, body: dict | None = None, token: str | None = None):
    request = urllib.request.Request(
        f"{base}{path}", method=method, data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json",
                 **({"Authorization": f"Bearer {token}"} if token else {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def wait_for_dag(base: str, token: str, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if call(base, "GET", f"/api/v2/dags/{DAG_ID}", token=token)[0] == 200:
            return
        time.sleep(2)
    raise AssertionError(f"{DAG_ID} was not parsed within {timeout_s} s")


def test_trigger_through_the_rest_api_runs_to_success_and_republishes_the_same(
        pipeline, precompute_first, tmp_path, monkeypatch):
    monkeypatch.setenv("SOLARIS_LOG_WAIT_TIMEOUT", "60s")  # scheduled runs of "now" fail fast
    services = AirflowServices(home=tmp_path / "airflow", dags_folder=ROOT / "dags")
    services.start(timeout_s=180)
    try:
        base = services.base_url
        status, _ = call(base, "GET", f"/api/v2/dags/{DAG_ID}")
        assert status == 401  # anonymous access is refused
        status, login = call(base, "POST", "/auth/token",
                             {"username": ADMIN_USER, "password": services.password()})
        assert status == 201, login
        token = login["access_token"]
        wait_for_dag(base, token)

        interval = FIRST
        run_id = f"rest-{interval.key}"
        # run_after: the interval's end, as for a backfill. Unpausing also creates the scheduled
        # run of the latest hour, and with max_active_runs=1 the scheduler starts the queued run
        # due first: the default run_after (now) would queue this run behind that one's sensor
        # timeout.
        status, created = call(base, "POST", f"/api/v2/dags/{DAG_ID}/dagRuns", {
            "dag_run_id": run_id, "logical_date": interval.end.isoformat(),
            "run_after": interval.end.isoformat(),
            "data_interval_start": interval.start.isoformat(),
            "data_interval_end": interval.end.isoformat(), "conf": {}}, token)
        assert status == 200, created
        status, _ = call(base, "PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False}, token)
        assert status == 200

        state, deadline = None, time.monotonic() + 900
        while time.monotonic() < deadline and state not in ("success", "failed"):
            time.sleep(5)
            status, run = call(base, "GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}", token=token)
            state = run["state"] if status == 200 else state
        assert state == "success", f"run {run_id} ended {state}; logs under {services.home}/logs"
        assert run["data_interval_start"].startswith(interval.start.strftime("%Y-%m-%dT%H:%M"))
    finally:
        services.stop()
    layout = DataLayout(root=str(pipeline.data_root), models_root=str(pipeline.data_root / "models"))
    evaluation = read_evaluation(layout, interval)
    assert evaluation is not None and evaluation["interval"] == interval.key
    with SolarisClient.from_url(pipeline.redis_url, key_prefix=pipeline.key_prefix,
                                timeout_ms=TEST_TIMEOUT_MS) as client:
        assert client.version == precompute_first.version
    assert published_content(pipeline.redis_url, pipeline.key_prefix,
                             precompute_first.version) == precompute_first.content
