"""Serving metrics of one precompute cycle: how well the version published from interval t
served the requests of interval t+1 (docs/design.md, "Metrics").

The run for interval ``t+1`` scores the embeddings partition of ``t`` (what ``publish`` loaded
into the cache at the end of run ``t``) against the request logs of ``t+1``:

- ``coverage``: share of logged (request, user, item) rows whose pair was precomputed
  (request-weighted), overall, for known users (a user-history row existed at ``t``) and for
  new users; ``coverage_unique``: the same over distinct pairs.
- ``waste``: share of precomputed pairs that no request of ``t+1`` asked for.
- ``staleness``: age of an embedding when it was served, in seconds: the request time minus
  the end of interval ``t`` (the as-of time of the history it was computed from); p50 and p99
  over the rows that hit.
- ``lookup``: a replay of sampled requests of ``t+1`` through :class:`SolarisClient` against
  the version the cache serves now (p50/p99 in microseconds, client hit rate), or the reason it
  could not run (no version served, Redis unreachable). This part is a live measurement; the
  rest is a pure function of the partitions, so reruns give the same figures.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from solaris_lib.config import SolarisSettings
from solaris_lib.evaluation.speculation import ratio
from solaris_lib.intervals import Interval
from solaris_lib.layout import EMBEDDINGS, EVALUATION, MINED, DataLayout, join
from solaris_lib.sparkutil import read_parquet
from solaris_lib.storage import is_complete

log = logging.getLogger(__name__)
USER_HISTORY = "user_history"
METRICS_FILE = "metrics.json"


@dataclass
class LookupReplay:
    """Client latency over replayed requests (microseconds) or why it was not measured."""

    requests: int = 0
    pairs: int = 0
    p50_us: float | None = None
    p99_us: float | None = None
    hit_rate: float | None = None
    served_version: str | None = None
    skipped: str | None = None


@dataclass
class ServingEvaluation:
    """The metrics of one interval; ``None`` where nothing was published before it."""

    interval: str
    published_interval: str
    published: bool
    rows: int = 0
    pairs_precomputed: int = 0
    coverage: float | None = None
    coverage_unique: float | None = None
    coverage_known: float | None = None
    coverage_new: float | None = None
    rows_known: int = 0
    waste: float | None = None
    staleness_p50_s: float | None = None
    staleness_p99_s: float | None = None
    lookup: LookupReplay = field(default_factory=LookupReplay)

    def as_dict(self) -> dict:
        return asdict(self)


def evaluate_serving(spark, settings: SolarisSettings, interval: Interval,
                     *, replay_requests: int = 200) -> ServingEvaluation:
    """Score the previous interval's precomputed pairs against ``interval``'s logs."""
    from solaris_lib.logs.reader import read_window_spark

    layout = DataLayout.from_settings(settings)
    previous = interval.previous()
    result = ServingEvaluation(interval=interval.key, published_interval=previous.key,
                               published=False)
    logs = read_window_spark(spark, layout.logs, interval).select("request_id", "ts", "user_id",
                                                                   "item_id")
    source = layout.output(EMBEDDINGS, previous)
    if not is_complete(source):
        result.rows = logs.count()
        log.info("no complete embeddings partition for %s: nothing was served before %s",
                 previous.key, interval.key)
        return result
    result.published = True
    pairs = read_parquet(spark, source).select("user_id", "item_id").distinct()
    _score_rows(spark, result, logs, pairs, _known_users(spark, layout, previous), previous)
    result.lookup = replay_lookups(settings, logs, replay_requests)
    return result


def _known_users(spark, layout: DataLayout, previous: Interval):
    """Users with a mined history at the previous interval (seen before), or None."""
    path = layout.output(MINED, previous, USER_HISTORY)
    if not is_complete(path):
        log.warning("no user history at %s: known/new users are not told apart", path)
        return None
    return read_parquet(spark, path).select("user_id").distinct()


def _score_rows(spark, result: ServingEvaluation, logs, pairs, known, previous: Interval) -> None:
    """Coverage and waste by the one definition (``evaluation.speculation.coverage_metrics``);
    staleness from the request times of the rows that hit."""
    from pyspark.sql import functions as F

    from solaris_lib.evaluation.speculation import coverage_metrics

    figures = coverage_metrics(pairs, logs, known)
    result.rows, result.pairs_precomputed = figures["future_rows"], figures["pairs_precomputed"]
    result.coverage, result.coverage_unique = figures["coverage_all"], figures["unique_coverage_all"]
    result.waste = figures["waste"]
    if known is not None:
        result.rows_known = figures["future_rows_known"]
        result.coverage_known, result.coverage_new = figures["coverage"], figures["coverage_new"]
    age = F.col("ts").cast("double") - F.lit(previous.end.timestamp())
    hits = logs.join(pairs, ["user_id", "item_id"], "left_semi")
    quantiles = hits.agg(F.percentile_approx(age, [0.5, 0.99], 10_000).alias("q")).first()["q"]
    if quantiles:
        result.staleness_p50_s, result.staleness_p99_s = (float(x) for x in quantiles)


def sample_requests(logs, limit: int) -> list[tuple[int, list[int]]]:
    """Up to ``limit`` requests of the window as (user_id, item_ids), chosen by a hash of the
    request id (deterministic for a given window)."""
    from pyspark.sql import functions as F

    grouped = (logs.groupBy("request_id")
               .agg(F.first("user_id").alias("user_id"),
                    F.sort_array(F.collect_set("item_id")).alias("item_ids"))
               .orderBy(F.xxhash64("request_id"), "request_id")
               .limit(limit))
    return [(int(r["user_id"]), [int(i) for i in r["item_ids"]]) for r in grouped.collect()]


def replay_lookups(settings: SolarisSettings, logs, limit: int) -> LookupReplay:
    """Replay sampled requests through the client against the served version."""
    from solaris_lib.client import SolarisClient

    replay = LookupReplay()
    if limit <= 0:
        replay.skipped = "replay disabled"
        return replay
    requests = sample_requests(logs, limit)
    with SolarisClient.from_url(settings.redis_url, key_prefix=settings.redis_key_prefix,
                                timeout_ms=50.0, miss_sample_rate=0.0) as client:
        replay.served_version = client.version
        if replay.served_version is None:
            replay.skipped = "no version is served"  # or Redis did not answer (client counts it)
            return replay
        _time_lookups(client, requests, replay)
    return replay


def _time_lookups(client, requests: list[tuple[int, list[int]]], replay: LookupReplay) -> None:
    for user, items in requests[:20]:  # warm-up: connections, slot map
        client.lookup(user, items)
    micros, hits = [], 0
    for user, items in requests:
        started = time.perf_counter()
        found = client.lookup(user, items)
        micros.append((time.perf_counter() - started) * 1e6)
        hits += found.hits
    replay.requests = len(requests)
    replay.pairs = sum(len(items) for _, items in requests)
    if micros:
        replay.p50_us, replay.p99_us = (float(x) for x in np.percentile(micros, [50, 99]))
        replay.hit_rate = ratio(hits, replay.pairs)
    log.info("replayed %d requests (%d pairs) against %s: p50 %.0f us, p99 %.0f us, hit rate %s",
             replay.requests, replay.pairs, replay.served_version, replay.p50_us or 0,
             replay.p99_us or 0, replay.hit_rate)


def write_evaluation(layout: DataLayout, result: ServingEvaluation, interval: Interval) -> str:
    """Replace ``evaluation/interval=KEY/`` atomically with ``metrics.json``; returns its path."""
    import json

    from solaris_lib.storage import atomic_folder, write_text

    final = layout.output(EVALUATION, interval)
    with atomic_folder(final) as staging:
        write_text(join(staging, METRICS_FILE),
                   json.dumps(result.as_dict(), indent=2, sort_keys=True))
    return join(final, METRICS_FILE)


def read_evaluation(layout: DataLayout, interval: Interval) -> dict | None:
    """The metrics written for ``interval``, or None when that run has not evaluated."""
    import json

    from solaris_lib.storage import read_text

    folder = layout.output(EVALUATION, interval)
    if not is_complete(folder):
        return None
    return json.loads(read_text(join(folder, METRICS_FILE)))
