"""The precompute DAG on a multi-node deployment on loopback, driven as an operator drives it
and configured only through the ``spark_default`` connection and ``SOLARIS_*`` settings.

Airflow's API server, scheduler and DAG processor run on loopback; the test logs in through
REST API v2 (anonymous access is refused), triggers the interval after FIRST (the tiny world and
models of the shared ``pipeline`` fixture), unpauses the DAG and polls the run to success. Its
Spark tasks go to a Spark standalone master with two workers in cluster deploy mode (each
job's driver on one worker, its executor on the other) and publish into a password-protected
Redis Cluster of three masters with a replica each. The lookup client then serves the pairs,
keeps serving the other shards while one master is killed, and serves that master's users
again from its promoted replica, byte for byte. The run's metrics reach XCom, the asset event
and StatsD."""

from __future__ import annotations

import importlib
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from datetime import timedelta

import numpy as np
import pyarrow.parquet as pq
import pytest

from solaris_lib import sparkcds
from solaris_lib.client import SolarisClient
from solaris_lib.config import SolarisSettings
from solaris_lib.devtools.airflow_services import ADMIN_USER, AirflowServices
from solaris_lib.devtools.redis_cluster import RedisClusterServers
from solaris_lib.devtools.redis_server import free_port
from solaris_lib.devtools.spark_standalone import SparkStandalone
from solaris_lib.evaluation.serving import read_evaluation
from solaris_lib.layout import EMBEDDINGS, DataLayout
from solaris_lib.runs import read_report
from tests.budgets import TEST_TIMEOUT_MS
from tests.integration.orchestration.conftest import FIRST, ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SECOND = FIRST.shift(timedelta(hours=1))
DAG_ID = "solaris_precompute"
PASSWORD = "multi-Node-Pa55"  # a secret: never a Spark property (sparkconf.is_secret)
JOBS = ("mine_logs", "speculate", "infer_embeddings", "evaluate", "publish_cache")
# The cluster's own properties, from the connection. Each worker offers two cores and 1 GB: a
# job's driver takes one core and the memory of one worker, so its two-core executor runs on the
# other. The JVMs plan small queries on a small machine: the suite's options and the archive
JVM = sparkcds.with_archive(sparkcds.SMALL_MACHINE_JVM)
CLUSTER_CONF = {"spark.executor.cores": "2", "spark.cores.max": "2", "spark.executor.memory": "1g",
                "spark.driver.memory": "1g", "spark.driver.extraJavaOptions": JVM,
                "spark.executor.extraJavaOptions": JVM, "spark.sql.shuffle.partitions": "4",
                "spark.ui.enabled": "false"}


class StatsdSink:
    """A UDP socket as the deployment's StatsD server, drained by a thread into ``gauges``
    (the scheduler and the DAG processor send metrics all the time: an undrained socket
    buffer fills and drops the tasks' later packets)."""

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.settimeout(0.2)
        self.gauges: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def env(self) -> dict[str, str]:
        return {f"AIRFLOW__METRICS__{key}": value for key, value in {
            "STATSD_ON": "True", "STATSD_HOST": "127.0.0.1",
            "STATSD_PORT": str(self.socket.getsockname()[1]), "STATSD_PREFIX": "airflow"}.items()}

    def _drain(self) -> None:
        while not self._stop.is_set():
            try:
                packet = self.socket.recv(65536).decode(errors="replace")
            except (TimeoutError, OSError):
                continue
            for line in packet.splitlines():
                name, _, rest = line.partition(":")
                if rest.endswith("|g"):
                    self.gauges[name] = float(rest[:-2])

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.socket.close()


@pytest.fixture
def statsd():
    sink = StatsdSink()
    yield sink
    sink.close()


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


def login(base: str, password: str) -> str:
    """A bearer token of the local admin; anonymous calls are refused first."""
    status, _ = call(base, "GET", f"/api/v2/dags/{DAG_ID}")
    assert status == 401
    status, answer = call(base, "POST", "/auth/token",
                          {"username": ADMIN_USER, "password": password})
    assert status == 201, answer
    return answer["access_token"]


def trigger_and_wait(base: str, token: str, run_id: str, timeout_s: float = 900) -> dict:
    """Trigger ``run_id`` for SECOND, unpause the DAG, poll the run until it ends."""
    deadline = time.monotonic() + 180
    while call(base, "GET", f"/api/v2/dags/{DAG_ID}", token=token)[0] != 200:
        assert time.monotonic() < deadline, f"{DAG_ID} was not parsed within 180 s"
        time.sleep(2)
    # run_after: the interval's end, as for a backfill. Unpausing also creates the scheduled run
    # of the latest hour; with max_active_runs=1 the scheduler starts the queued run due first,
    # so the default run_after (now) would queue this run behind that one's sensor timeout.
    status, created = call(base, "POST", f"/api/v2/dags/{DAG_ID}/dagRuns", {
        "dag_run_id": run_id, "logical_date": SECOND.end.isoformat(),
        "run_after": SECOND.end.isoformat(), "data_interval_start": SECOND.start.isoformat(),
        "data_interval_end": SECOND.end.isoformat(), "conf": {}}, token)
    assert status == 200, created
    status, _ = call(base, "PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False}, token)
    assert status == 200
    run, deadline = {}, time.monotonic() + timeout_s
    while time.monotonic() < deadline and run.get("state") not in ("success", "failed"):
        time.sleep(5)
        status, answer = call(base, "GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}", token=token)
        run = answer if status == 200 else run
    return run


def test_precompute_dag_on_spark_and_redis_clusters_serves_through_a_failover(
        pipeline, precompute_first, statsd, tmp_path):
    run_id = f"rest-{SECOND.key}"
    with RedisClusterServers(masters=3, replicas=1, password=PASSWORD) as redis_cluster, \
            SparkStandalone(workers=2, cores_per_worker=2, memory_per_worker="1g",
                            rest_port=free_port(), workdir=tmp_path / "spark") as spark:
        # the cluster fits one job (driver and executor take a worker each): one pool slot, so
        # the scheduler does not start mine and evaluate together (two drivers, no executor)
        services = AirflowServices(home=tmp_path / "airflow", dags_folder=ROOT / "dags",
                                   spark_slots=1, extra_env={
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({
                "conn_type": "spark", "host": spark.master_url,
                "extra": {"deploy-mode": "cluster", "rest-port": spark.rest_port,
                          "conf": CLUSTER_CONF}}),
            "SOLARIS_REDIS_URL": redis_cluster.url,
            "SOLARIS_LOG_WAIT_TIMEOUT": "60s",  # the scheduled run of "now" fails fast
            **statsd.env()})
        services.start(timeout_s=180)
        try:
            base = services.base_url
            token = login(base, services.password())
            run = trigger_and_wait(base, token, run_id)
            assert run.get("state") == "success", (
                f"run {run_id} ended {run.get('state')}; logs under {services.home}/logs")
            assert run["data_interval_start"].startswith(SECOND.start.strftime("%Y-%m-%dT%H:%M"))
            check_metrics_reached_airflow(base, token, run_id, pipeline, statsd)
        finally:
            services.stop()
        status = spark.status()
        assert [d["state"] for d in status["completeddrivers"]] == ["FINISHED"] * len(JOBS)
        names = {importlib.import_module(f"solaris_lib.jobs.{job}").JOB.name for job in JOBS}
        assert {app["name"] for app in status["completedapps"]} == {f"solaris-{n}" for n in names}
        assert status["aliveworkers"] == 2
        serve_through_a_failover(pipeline, redis_cluster)


def check_metrics_reached_airflow(base: str, token: str, run_id: str, pipeline, statsd) -> None:
    layout = DataLayout.from_settings(SolarisSettings(data_root=str(pipeline.data_root)))
    evaluation = read_evaluation(layout, SECOND)
    assert evaluation["published"] and 0 < evaluation["coverage"] <= 1  # FIRST's pairs, scored
    status, xcom = call(base, "GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/"
                        "evaluate/xcomEntries/metrics?deserialize=true", token=token)
    assert status == 200, xcom
    metrics = xcom["value"]
    status, events = call(base, "GET", f"/api/v2/assets/events?source_dag_id={DAG_ID}&"
                          f"source_run_id={run_id}", token=token)
    assert status == 200, events
    [event] = events["asset_events"]
    extra = event["extra"]
    assert metrics["coverage"] == evaluation["coverage"] and metrics["waste"] == evaluation["waste"]
    assert extra["evaluate.coverage"] == evaluation["coverage"]
    speculated = pq.read_table(layout.output("speculated", SECOND)).num_rows
    assert extra["speculate.pairs"] == speculated == extra["publish.pairs"] > 0
    assert extra["mine.quarantined_rows"] == 0 and extra["mine.rows.pair_stats"] > 0
    # SECOND's run reads FIRST's misses again, from the Redis Cluster's stream, which never held
    # the 6 pairs FIRST's own run read from the single server (precompute_first wrote them)
    first = read_report(SolarisSettings(data_root=str(pipeline.data_root)), "speculate", FIRST)
    assert extra["speculate.misses_previous.lost_pairs"] == first["misses"]["pairs"] == 6
    wanted, deadline = {"airflow.solaris.evaluate.coverage", "airflow.solaris.publish.pairs"}, \
        time.monotonic() + 10
    while not wanted <= set(statsd.gauges) and time.monotonic() < deadline:
        time.sleep(0.2)  # the last task's packets may still be on their way
    sent = statsd.gauges
    assert sent["airflow.solaris.evaluate.coverage"] == pytest.approx(evaluation["coverage"])
    assert sent["airflow.solaris.publish.pairs"] == speculated


def serve_through_a_failover(pipeline, redis_cluster: RedisClusterServers) -> None:
    layout = DataLayout.from_settings(SolarisSettings(data_root=str(pipeline.data_root)))
    table = pq.read_table(layout.output(EMBEDDINGS, SECOND)).to_pandas()
    by_user = table.groupby("user_id")["item_id"].apply(lambda s: s.astype(int).tolist())
    owners = {int(user): redis_cluster.owner(str(int(user)).encode()).port for user in by_user.index}
    victim_user = next(iter(owners))
    victim = next(s for s in redis_cluster.servers if s.port == owners[victim_user])
    bystander = next(u for u, port in owners.items() if port != victim.port)
    replicas = {s.port for s in redis_cluster.servers} - {s.port for s in redis_cluster.primaries()}
    redis_cluster.wait_replicated()

    with SolarisClient.from_url(redis_cluster.url, key_prefix=pipeline.key_prefix,
                                timeout_ms=TEST_TIMEOUT_MS, refresh_interval_s=0.2) as client:
        before = client.lookup(victim_user, by_user[victim_user])
        assert before.hit.all()
        expected = table[table["user_id"] == victim_user].set_index("item_id")["embedding"]
        for row, item in enumerate(by_user[victim_user]):
            assert np.array_equal(before.embeddings[row],
                                  np.frombuffer(expected[item], "<f2").astype(np.float32))
        victim.stop(hard=True)  # a crash: SIGKILL
        served_again = None
        for _ in range(600):  # the replica takes over after the cluster's node timeout
            assert client.lookup(bystander, by_user[bystander]).hit.all()  # other shards serve
            after = client.lookup(victim_user, by_user[victim_user])
            if after.hit.all():
                served_again = after
                break
            time.sleep(0.1)
        assert served_again is not None, client.stats()
        assert np.array_equal(served_again.embeddings, before.embeddings)
        assert client.stats().errors >= 1  # the lookups that met the dead master
    assert redis_cluster.owner(str(victim_user).encode()).port in replicas  # promoted
