"""``make demo``: the product's showcase on embedded defaults.

1. simulate a small ad-request world into the data root and validate it against the contract;
2. run the training DAGs once with Airflow's ``dag.test`` (ALS retrieval factors, the foundation
   model, which is promoted to serving), in one Airflow worker process with step 3
   (:class:`~solaris_lib.orchestration.local.DagRunner`);
3. run the precompute DAG for consecutive hourly intervals the same way (sensor, mine,
   speculate, infer, evaluate, publish: each Spark task a real ``spark-submit``);
4. print a table per interval (pairs precomputed, coverage, waste, staleness, client lookup
   p50/p99), look one user up live through the client, and write the coverage plot as PNG;
5. print the knowledge-transfer table (``solaris report`` on its quick world, run in its own
   process beside steps 2-3).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from solaris_lib import sparkcds
from solaris_lib.cli import configure_logging
from solaris_lib.config import SolarisSettings, load_settings
from solaris_lib.intervals import Interval
from solaris_lib.layout import EMBEDDINGS, SPECULATED, DataLayout, join
from solaris_lib.progress import Progress, step, track
from solaris_lib.simulate.config import WorldConfig
from solaris_lib.sparkutil import read_parquet

log = logging.getLogger("solaris.demo")
DEMO_WORLD = WorldConfig(users=1200, items=1500, days=5, seed=7)
DEMO_INTERVALS = 2
# embedded defaults of the demo (a variable already set in the environment wins)
DEMO_SETTINGS = {"SOLARIS_FOUNDATION_PRESET": "small", "SOLARIS_SPECULATE_BUDGET_PER_USER": "100",
                 "SOLARIS_REDIS_KEY_PREFIX": "solaris-demo",
                 # the simulated hours are complete once written (no _SUCCESS marker to wait for)
                 "SOLARIS_LOG_QUIET_PERIOD": "0s"}
FIRST_HOUR = 10  # precompute from 10:00 on the last simulated day (a busy hour)
ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def _stderr_to(path: str) -> Iterator[None]:
    """Point file descriptor 2 at ``path`` (appending) while the block runs: processes started
    inside keep writing there; this process's stderr is restored afterwards."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def banner(text: str) -> None:
    print(f"\n=== {text} ===", flush=True)


def simulate(layout: DataLayout, world: WorldConfig) -> None:
    from solaris_lib.simulate.world import Simulator

    banner(f"1. simulate {world.users:,} users, {world.items:,} live campaigns, {world.days} days")
    result = Simulator(world).run(layout.logs, overwrite=True)
    print(f"wrote {result.rows:,} rows in {result.files} hourly partitions "
          f"({result.rows_per_s:,.0f} rows/s) to {result.out}")


def validate(layout: DataLayout) -> None:
    from solaris_lib.logs.validate import validate_dir

    reports = validate_dir(layout.logs)
    bad = [r for r in reports if r.error]
    rows = sum(r.rows_read for r in reports)
    quarantined = sum(r.rows_quarantined for r in reports)
    print(f"validated: {len(reports)} files, {rows:,} rows, {quarantined:,} quarantined, "
          f"{len(bad)} failed")
    if bad:
        raise SystemExit(f"demo: {bad[0].path}: {bad[0].error}")


def fresh_namespace(settings: SolarisSettings) -> None:
    """Empty the demo's own cache namespace (``SOLARIS_REDIS_KEY_PREFIX``, ``solaris-demo`` by
    default) before a new world: a previous demo's alias names a later interval and would
    rightly refuse to move back to this world's. Only keys under that prefix are deleted."""
    from solaris_lib.devtools.redis_server import delete_matching

    removed = delete_matching(settings.redis_url, f"{settings.redis_key_prefix}:*")
    print(f"cache namespace {settings.redis_key_prefix!r}: {removed:,} keys of an earlier demo "
          "removed" if removed else f"cache namespace {settings.redis_key_prefix!r} is empty")


def airflow_services(settings: SolarisSettings):
    from solaris_lib.devtools.airflow_services import AirflowServices

    return AirflowServices(
        home=Path(settings.data_root) / "airflow", dags_folder=ROOT / "dags",
        db_url=settings.airflow_db_url, spark_master=settings.spark_master,
        spark_slots=settings.airflow_spark_slots,
        extra_env={"SOLARIS_DATA_ROOT": settings.data_root, "SOLARIS_REDIS_URL": settings.redis_url,
                   "SOLARIS_REDIS_KEY_PREFIX": settings.redis_key_prefix,
                   **{k: v for k, v in os.environ.items()
                      if k.startswith("SOLARIS_") and k != "SOLARIS_DATA_ROOT"}},
    )


def run_dag(runner, dag_id: str, run_after: datetime) -> None:
    print(f"dag.test {dag_id} {run_after.isoformat()}", flush=True)
    seconds = runner.run(dag_id, run_after)
    print(f"  {dag_id} finished in {seconds:.0f} s", flush=True)


def train(runner, run_after: datetime) -> None:
    banner("2. training DAGs: retrieval vectors (ALS, choice model) and the foundation model")
    for dag_id in ("solaris_train_retrieval", "solaris_train_foundation"):
        with step(dag_id):
            run_dag(runner, dag_id, run_after)


def precompute(runner, intervals: list[Interval]) -> None:
    banner(f"3. precompute DAG for {len(intervals)} consecutive hourly intervals")
    for interval in track(intervals, "solaris_precompute", unit="interval"):
        run_dag(runner, "solaris_precompute", interval.end)


def interval_rows(spark, layout: DataLayout, intervals: list[Interval]) -> list[dict]:
    """One row per interval: what it precomputed and how that served the next interval."""
    from solaris_lib.evaluation.serving import read_evaluation
    from solaris_lib.storage import is_complete

    rows = []
    for interval in intervals:
        path = layout.output(EMBEDDINGS, interval)
        pairs = read_parquet(spark, path).count() if is_complete(path) else 0
        served = read_evaluation(layout, interval.following()) or {}
        rows.append({"interval": interval, "pairs": pairs, **{
            k: served.get(k) for k in ("coverage", "coverage_known", "waste",
                                       "staleness_p50_s", "rows")},
            "lookup": served.get("lookup") or {}})
    return rows


def _fmt(value, pattern: str) -> str:
    return "-" if value is None else format(value, pattern)


def print_table(rows: list[dict]) -> None:
    banner("4. per interval: precomputed at t, served during t+1")
    head = (f"{'interval (UTC)':<17} {'pairs':>7} {'rows t+1':>8} {'coverage':>8} {'known':>6} "
            f"{'waste':>6} {'stale p50':>9} {'lookup p50':>10} {'p99':>7}")
    print(head)
    print("-" * len(head))
    for row in rows:
        lookup = row["lookup"]
        print(f"{row['interval'].start:%m-%d %H:%M}-{row['interval'].end:%H:%M}   "
              f"{row['pairs']:>7,} {_fmt(row['rows'], ','):>8} {_fmt(row['coverage'], '.3f'):>8} "
              f"{_fmt(row['coverage_known'], '.3f'):>6} {_fmt(row['waste'], '.3f'):>6} "
              f"{_fmt(row['staleness_p50_s'] and row['staleness_p50_s'] / 60, '.0f'):>7} m "
              f"{_fmt(lookup.get('p50_us'), '.0f'):>7} us {_fmt(lookup.get('p99_us'), '.0f'):>4} us")
    print("(coverage of interval t = share of t+1's logged rows whose pair was precomputed at t; "
          "the last interval is scored by the next run; lookup p50/p99: the evaluate task's probe, "
          "taken while the transfer report ran on the same cores; quiet-machine figures below)")


def live_lookup(spark, settings: SolarisSettings, interval: Interval) -> None:
    from pyspark.sql import functions as F

    from solaris_lib.client import SolarisClient

    banner("5. live lookup through the client (what the online ranker calls)")
    layout = DataLayout.from_settings(settings)
    speculated = read_parquet(spark, layout.output(SPECULATED, interval))
    user = speculated.groupBy("user_id").count().orderBy(F.desc("count"), "user_id").first()
    items = [r["item_id"] for r in speculated.where(F.col("user_id") == user["user_id"])
             .orderBy(F.desc("score"), "item_id").limit(8).collect()]
    items += _unspeculated_items(spark, layout, interval, items, 2) + [10_000_000]
    with SolarisClient.from_url(settings.redis_url, key_prefix=settings.redis_key_prefix) as client:
        started = time.perf_counter()
        result = client.lookup(user["user_id"], items)
        micros = (time.perf_counter() - started) * 1e6
        print(f"client.lookup(user_id={user['user_id']}, {len(items)} items) -> version "
              f"{client.version}, model {client.model_version}, {micros:.0f} us")
        _print_rows(items, result)
        newcomer = 99_999_999  # a user no speculation run has seen
        print(f"client.lookup(user_id={newcomer}, {len(items[:3])} items): a user never speculated")
        _print_rows(items[:3], client.lookup(newcomer, items[:3]))
    print("(EXACT: the pair was precomputed; CLUSTER: the user's embedding for the item's "
          "cluster; ITEM: the item's prior, the model with an empty history; MISS: the "
          "fallback vector)")
    quiet_replay(spark, settings, interval)


def quiet_replay(spark, settings: SolarisSettings, interval: Interval,
                 requests: int = 200) -> None:
    """The evaluate task's lookup replay (the same sample of ``interval``'s requests through
    the client, against the version served now), again on the quiet machine: p50, p99 in us."""
    from solaris_lib.evaluation.serving import replay_lookups
    from solaris_lib.logs.reader import read_window_spark

    logs = read_window_spark(spark, DataLayout.from_settings(settings).logs, interval)
    replay = replay_lookups(settings, logs, requests)
    if replay.skipped:
        print(f"lookup replay skipped: {replay.skipped}")
        return
    print(f"{replay.requests:,} of the hour's requests replayed ({replay.pairs:,} pairs): "
          f"p50 {replay.p50_us:.0f} us, p99 {replay.p99_us:.0f} us, hit rate "
          f"{replay.hit_rate:.3f}")


def _print_rows(items: list[int], result) -> None:
    from solaris_lib.client import Level

    for item, level, row in zip(items, result.level, result.embeddings, strict=True):
        print(f"  item {item:>9}: {Level(int(level)).name:<7} "
              f"[{', '.join(f'{x:+.3f}' for x in row[:4])}, ...] ({row.shape[0]} dims)")


def _unspeculated_items(spark, layout: DataLayout, interval: Interval, taken: list[int],
                        n: int) -> list[int]:
    """Items of the fallback's cluster table that this user was not speculated on."""
    from solaris_lib.storage import is_complete

    path = layout.output(EMBEDDINGS, interval, "item_clusters")
    if not is_complete(path):
        return []
    rows = read_parquet(spark, path).orderBy("item_id").limit(n + len(taken)).collect()
    return [int(r["item_id"]) for r in rows if int(r["item_id"]) not in set(taken)][:n]


def coverage_plot(spark, layout: DataLayout, interval: Interval, out: str) -> str | None:
    """Coverage of the next interval's rows against the per-user budget (top-k by score)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from solaris_lib.evaluation.speculation import coverage_curve, plot_coverage_curves
    from solaris_lib.logs.reader import read_window_spark

    speculated = read_parquet(spark, layout.output(SPECULATED, interval))
    ranked = speculated.withColumn("rank", F.row_number().over(
        Window.partitionBy("user_id").orderBy(F.desc("score"), "item_id")))
    top = ranked.agg(F.max("rank")).first()[0]
    if not top:
        return None
    budgets = sorted({max(1, round(top * f)) for f in (0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1)})
    logs = read_window_spark(spark, layout.logs, interval.following())
    curve = coverage_curve(ranked, logs, None, budgets)
    return plot_coverage_curves({"SOLARIS speculation": curve}, out,
                                f"precomputed {interval.start:%Y-%m-%d %H:%M} UTC, next hour's rows")


@dataclass
class TransferReport:
    """The report's process, started by :func:`start_transfer_report`."""

    command: list[str]
    out: str
    process: subprocess.Popen
    started: float

    def wait(self) -> None:
        """Block until the report ends (before the demo measures lookups on a quiet machine);
        exit with its stderr's tail if it failed."""
        if self.process.poll() is None:
            print("waiting for the transfer report to finish ...", flush=True)
        if self.process.wait() != 0:
            tail = Path(self.out, "stderr.txt").read_text(errors="replace")[-2000:]
            raise SystemExit(f"demo: solaris report failed: {tail}")
        print(f"transfer report finished ({time.perf_counter() - self.started:.0f} s beside "
              "the DAG runs)", flush=True)

    def stop(self) -> None:
        """End the report if it still runs (the demo failed before waiting for it)."""
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)

    def print_tables(self) -> None:
        banner("6. knowledge transfer: small ranker plain / distilled / SOLARIS vs the FM online")
        print(" ".join(["solaris", *self.command[3:]]))
        printed = Path(self.out, "stdout.txt").read_text()
        print("\n".join(printed.rstrip().splitlines()[:-1]))  # the tables; the JSON is in OUT


def start_transfer_report(settings: SolarisSettings) -> TransferReport:
    """``solaris report`` on its quick world, in its own process, started now: it shares no
    data with the demo's world, so it runs beside the DAG runs (mostly one busy core each)."""
    out = join(settings.data_root, "transfer-report")
    os.makedirs(out, exist_ok=True)
    command = [sys.executable, "-m", "solaris_lib.cli", "report", "--simulate", "quick",
               "--out", out]
    with open(join(out, "stdout.txt"), "wb") as stdout, \
            open(join(out, "stderr.txt"), "wb") as stderr:
        process = subprocess.Popen(command, stdout=stdout, stderr=stderr)
    print(f"solaris report --simulate quick started beside the DAG runs (pid {process.pid}); "
          f"its log: {out}/stderr.txt", flush=True)
    return TransferReport(command, out, process, time.perf_counter())


def main() -> int:
    configure_logging(verbose=False)
    started = time.perf_counter()
    for key, value in DEMO_SETTINGS.items():
        os.environ.setdefault(key, value)
    # the demo's Spark jobs are short and small on a small machine: C1-only JVMs (a caller's
    # SPARK_SUBMIT_OPTS wins); the DAG runs' jobs and the report's session inherit it
    os.environ.setdefault("SPARK_SUBMIT_OPTS", sparkcds.SMALL_MACHINE_JVM)
    # the simulated days and the ground truth, validation, two training and the precompute
    # DAG runs, the table, the live lookup and plot, the transfer report
    with Progress("demo", total=DEMO_WORLD.days + 1 + 1 + 2 + DEMO_INTERVALS + 2 + 1):
        return _demo(started)


def _demo(started: float) -> int:
    settings = load_settings()
    layout = DataLayout.from_settings(settings)
    simulate(layout, DEMO_WORLD)
    with step("validate the logs"):
        validate(layout)
    fresh_namespace(settings)
    last_day = DEMO_WORLD.start + timedelta(days=DEMO_WORLD.days - 1)
    first = Interval(last_day + timedelta(hours=FIRST_HOUR - 1), last_day + timedelta(hours=FIRST_HOUR))
    intervals = [first.shift(timedelta(hours=i + 1)) for i in range(DEMO_INTERVALS)]
    report = start_transfer_report(settings)
    try:
        from solaris_lib.orchestration.local import DagRunner

        services = airflow_services(settings)
        services.prepare()
        with DagRunner(services) as runner:
            train(runner, first.end)
            precompute(runner, intervals)
        with step("transfer report"):
            report.wait()
    finally:
        report.stop()

    from solaris_lib.sparkutil import get_spark

    spark_log = join(settings.data_root, "spark-demo.log")
    with _stderr_to(spark_log):  # the JVM keeps it: its start-up notices stay out of the demo
        spark = get_spark("solaris-demo-report", master="local[2]")
    try:
        with step("per-interval table"):
            print_table(interval_rows(spark, layout, intervals))
        with step("live lookup and coverage plot"):
            live_lookup(spark, settings, intervals[-1])
            png = coverage_plot(spark, layout, intervals[-2],
                                join(settings.data_root, "coverage.png"))
        if png:
            print(f"\ncoverage plot: {png}")
    finally:
        spark.stop()
    report.print_tables()
    print(f"\ndemo finished in {time.perf_counter() - started:.0f} s; data under {layout.root}; "
          f"Airflow logs under {services.home}/logs; the demo's own Spark log {spark_log}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
