"""The precompute DAG on a multi-node deployment on loopback, configured only through the
``spark_default`` connection and ``SOLARIS_*`` settings: a Spark standalone master with two
workers in cluster deploy mode (each job's driver on one worker, its executor on the other),
and a password-protected Redis Cluster of three masters with a replica each. One ``dag.test()`` run
of the interval after FIRST (the tiny world and models of the shared ``pipeline`` fixture)
publishes into the cluster; the lookup client then serves the pairs, keeps serving the other
shards while one master is killed, and serves that master's users again from its promoted
replica, byte for byte. The run's metrics reach XCom, the asset event and StatsD."""

from __future__ import annotations

import importlib
import json
import socket
import time
from datetime import timedelta

import numpy as np
import pyarrow.parquet as pq
import pytest

from solaris_lib.client import SolarisClient
from solaris_lib.config import SolarisSettings
from solaris_lib.devtools.redis_cluster import RedisClusterServers
from solaris_lib.devtools.redis_server import free_port
from solaris_lib.devtools.spark_standalone import SparkStandalone
from solaris_lib.evaluation.serving import read_evaluation
from solaris_lib.layout import EMBEDDINGS, DataLayout
from tests.budgets import TEST_TIMEOUT_MS
from tests.integration.conftest import run_dag
from tests.integration.orchestration.conftest import FIRST

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SECOND = FIRST.shift(timedelta(hours=1))
PASSWORD = "multi-Node-Pa55"  # a secret: never a Spark property (sparkconf.is_secret)
JOBS = ("mine_logs", "speculate", "infer_embeddings", "evaluate", "publish_cache")
# The cluster's own properties, from the connection. Each worker offers two cores and 1 GB: a
# job's driver takes one core and the memory of one worker, so its two-core executor runs on the
# other. The JVMs plan small queries: C1 only (as the suite's spark-submit, tests/conftest.py)
JVM = "-XX:TieredStopAtLevel=1 -XX:+UseParallelGC -Xss16m"
CLUSTER_CONF = {"spark.executor.cores": "2", "spark.cores.max": "2", "spark.executor.memory": "1g",
                "spark.driver.memory": "1g", "spark.driver.extraJavaOptions": JVM,
                "spark.executor.extraJavaOptions": JVM, "spark.sql.shuffle.partitions": "4",
                "spark.ui.enabled": "false"}


@pytest.fixture
def statsd(monkeypatch):
    """A UDP socket as Airflow's StatsD server (Airflow's own StatsD client sends to it)."""
    from airflow.sdk._shared.observability.metrics import stats
    from airflow.sdk.observability.metrics.stats_utils import get_stats_factory

    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    sink.setblocking(False)
    for key, value in {"STATSD_ON": "True", "STATSD_HOST": "127.0.0.1",
                       "STATSD_PORT": str(sink.getsockname()[1]), "STATSD_PREFIX": "airflow"
                       }.items():
        monkeypatch.setenv(f"AIRFLOW__METRICS__{key}", value)
    stats.initialize(factory=get_stats_factory(), export_legacy_names=False)
    yield sink
    monkeypatch.delenv("AIRFLOW__METRICS__STATSD_ON")
    stats.initialize(factory=get_stats_factory(), export_legacy_names=False)
    sink.close()


def gauges(sink: socket.socket) -> dict[str, float]:
    found = {}
    while True:
        try:
            packet = sink.recv(65536).decode()
        except BlockingIOError:
            return found
        for line in packet.splitlines():
            name, _, rest = line.partition(":")
            if rest.endswith("|g"):
                found[name] = float(rest[:-2])


def test_precompute_dag_on_spark_and_redis_clusters_serves_through_a_failover(
        pipeline, precompute_first, statsd, monkeypatch):
    with RedisClusterServers(masters=3, replicas=1, password=PASSWORD) as redis_cluster, \
            SparkStandalone(workers=2, cores_per_worker=2, memory_per_worker="1g",
                            rest_port=free_port()) as spark:
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({
            "conn_type": "spark", "host": spark.master_url,
            "extra": {"deploy-mode": "cluster", "rest-port": spark.rest_port,
                      "conf": CLUSTER_CONF}}))
        monkeypatch.setenv("SOLARIS_REDIS_URL", redis_cluster.url)

        run = run_dag("solaris_precompute", SECOND.end)

        assert run.state == "success"
        status = spark.status()
        assert [d["state"] for d in status["completeddrivers"]] == ["FINISHED"] * len(JOBS)
        names = {importlib.import_module(f"solaris_lib.jobs.{job}").JOB.name for job in JOBS}
        assert {app["name"] for app in status["completedapps"]} == {f"solaris-{n}" for n in names}
        assert status["aliveworkers"] == 2
        check_metrics_reached_airflow(run, pipeline, statsd)
        serve_through_a_failover(pipeline, redis_cluster)


def check_metrics_reached_airflow(run, pipeline, statsd) -> None:
    from airflow.models.asset import AssetEvent
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    layout = DataLayout.from_settings(SolarisSettings(data_root=str(pipeline.data_root)))
    evaluation = read_evaluation(layout, SECOND)
    assert evaluation["published"] and 0 < evaluation["coverage"] <= 1  # FIRST's pairs, scored
    with create_session() as session:
        row = session.scalars(XComModel.get_many(run_id=run.run_id, key="metrics",
                                                 task_ids="evaluate", dag_ids=run.dag_id)).first()
        metrics = XComModel.deserialize_value(row)
        event = session.scalars(select(AssetEvent).where(
            AssetEvent.source_run_id == run.run_id)).one()
        extra = dict(event.extra)
    assert metrics["coverage"] == evaluation["coverage"] and metrics["waste"] == evaluation["waste"]
    assert extra["evaluate.coverage"] == evaluation["coverage"]
    speculated = pq.read_table(layout.output("speculated", SECOND)).num_rows
    assert extra["speculate.pairs"] == speculated == extra["publish.pairs"] > 0
    sent = gauges(statsd)
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
