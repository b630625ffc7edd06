"""Publish one interval's embeddings as a new cache version, then switch the alias to it.

Phases (``on_phase`` hears each name before it starts; each logs counts and rates):

0. (before any phase) the URL's Redis user may run every publisher command on the prefix,
                on every master (:func:`solaris_lib.cache.access.check_publisher_access`,
                writes nothing), else it stops here with PublishPermissionError
1. ``inspect``  one Spark job over the exact rows (:mod:`inputs`: pyarrow in the tasks): row
                problems, the published model version and dimension, the content digest, the
                scattered users and the memory estimate per slot; when the interval has the
                fallback tables, the same over the cluster rows and the item tables read on
                the driver (:mod:`fallback`) -> the deterministic version id
2. ``estimate`` bytes per master; refuse when they will not fit, or when a master's
                ``maxmemory_policy`` (INFO memory) may evict (EvictionPolicyError)
3. ``write``    manifest (state ``writing``; a manifest already ``complete`` is never
                rewritten: another publisher finished this version, whose keys are still
                written and checked: they may have expired), the fallback's chunks (read
                back), then the
                exact rows into their users' bucket hashes and the cluster rows into their
                users' cluster hashes (Spark tasks, pipelined, in file order; scattered users
                after a shuffle by user); each task then counts the fields its keys hold on
                the server and reads back a hash-chosen sample. Checked
                (:mod:`checks`): pairs written + duplicates + non-finite = publishable rows,
                fields on the server = pairs written, every sampled pair equal to its input
4. ``switch``   manifest ``complete`` with the TTL left to keys written from step 3 on (it
                never outlives a key of its version), alias -> version and the previous
                version -> failover (one atomic EVAL, never backwards)
5. ``retain``   the served and failover versions' keys stop expiring, other versions retire
                (:mod:`retain`); then, after the switch, the eviction policy and the keys
                evicted meanwhile are checked again (EvictionPolicyError: served, but at risk)
6. ``quarantine`` (when exact rows were refused) the refused rows with their reason

Nothing a reader can see changes before phase 4: the alias still names the previous version,
whose keys are never touched (the writer never shortens a retained key's TTL), so a failure at
any point leaves it served. Versions that were never switched to expire by their TTL; retired
ones ``retire_after_s`` after the switch that retired them. A rerun of the same interval over
the same embeddings gets the same version id and writes the same bytes; when that version is
already served it returns ``already_served`` (and runs phase 5 again).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from redis.crc import key_slot

from solaris_lib.cache import memory
from solaris_lib.cache.access import check_publisher_access
from solaris_lib.cache.checks import check_counts, run_write
from solaris_lib.cache.errors import (
    CacheFormatError,
    CacheProtocolError,
    CacheUnavailableError,
    EvictionPolicyError,
    InsufficientMemoryError,
    PublishError,
    PublishInputError,
)
from solaris_lib.cache.fallback import (
    FallbackTables,
    ItemTables,
    chunk_bytes,
    clustering_mismatch,
    find_tables,
    read_item_clusters,
    read_item_priors,
    write_chunks,
)
from solaris_lib.cache.format import (
    CODEC,
    FALLBACK_CLUSTER,
    STATE_COMPLETE,
    Manifest,
    check_prefix,
    user_key_head,
    version_id,
)
from solaris_lib.cache.inputs import Inputs
from solaris_lib.cache.publish_config import PublishConfig, PublishReport
from solaris_lib.cache.retain import retain
from solaris_lib.cache.rows import CLUSTER, EXACT, NON_FINITE, Survey, interpret
from solaris_lib.cache.server import EVICTING, CacheServer
from solaris_lib.cache.survey import Layout, Merged
from solaris_lib.cache.writer import STATS_NAMES, WriteTarget
from solaris_lib.config import SolarisSettings
from solaris_lib.intervals import Interval
from solaris_lib.layout import CACHE, EMBEDDINGS, ITEM_CLUSTERS, DataLayout
from solaris_lib.storage import atomic_folder, is_complete, note_replacement

log = logging.getLogger(__name__)
SCATTERED_LIMIT = 100_000  # more scattered users: every row is shuffled by user


@dataclass
class _Level:
    """The fallback level of one publish: the cluster rows' survey, the item tables, the
    level's digest."""

    merged: Merged
    found: Survey
    tables: ItemTables
    digest: str


PhaseHook = Callable[[str], None]


def publish(spark, settings: SolarisSettings, interval: Interval, config: PublishConfig,
            *, on_phase: PhaseHook | None = None) -> PublishReport:
    """Publish ``embeddings/interval=KEY/`` of ``interval``; see the module docstring."""
    run = _Run(spark, settings, interval, config, on_phase or (lambda phase: None))
    try:
        with CacheServer(settings.redis_url, check_prefix(settings.redis_key_prefix)) as server:
            run.server = server
            check_publisher_access(server)
            return run.execute()
    except (CacheUnavailableError, CacheProtocolError) as exc:
        raise PublishError(_failure_message(run, exc)) from exc


def _failure_message(run: _Run, exc: Exception) -> str:
    """What failed, and what is served now (unknown only when the switch itself failed)."""
    phase = run.current_phase or "connect"
    served = ("the alias may or may not have moved: check `solaris cache-info`"
              if run.alias_sent else "the alias was not switched: the previous version is "
              "still served")
    return f"publish of {run.interval} failed during {phase}: {exc}; {served}"


MIN_TTL_LEFT_S = 60  # a version with less of its keys' TTL left (or half) is not served...
# ...beyond the time the retain pass after the switch may take to reach its last key: it scans
# the masters one after another, about a million keys a second (retain.py); a fifth of that
RETAIN_KEYS_PER_S = 200_000


class _Run:
    """The state of one publish, phase by phase."""

    def __init__(self, spark, settings: SolarisSettings, interval: Interval,
                 config: PublishConfig, on_phase: PhaseHook) -> None:
        self.spark, self.settings, self.interval, self.config = spark, settings, interval, config
        self.on_phase = on_phase
        self.layout = DataLayout.from_settings(settings)
        self.ttl_s = config.ttl_s or int(3 * interval.length.total_seconds())
        self.partitions = config.partitions or spark.sparkContext.defaultParallelism
        self.server: CacheServer | None = None
        self.seconds: dict[str, float] = {}
        self.current_phase: str | None = None
        self.alias_sent = False
        self._written_from = time.monotonic()
        self._clock = time.perf_counter()

    def _phase(self, name: str | None) -> None:
        """Close the running phase's timer and tell the hook that ``name`` starts."""
        now = time.perf_counter()
        if self.current_phase is not None:
            self.seconds[self.current_phase] = round(now - self._clock, 3)
        self.current_phase, self._clock = name, now
        if name is not None:
            self.on_phase(name)

    def execute(self) -> PublishReport:
        self._phase("inspect")
        source = self.layout.output(EMBEDDINGS, self.interval)
        if not is_complete(source):
            raise PublishInputError(f"{source}: no complete embeddings partition for "
                                    f"{self.interval} (missing or without _SUCCESS)")
        tables = find_tables(self.layout, self.interval)
        items = self._item_table(tables) if tables.usable() else None
        read = [(EXACT, source)] + ([(CLUSTER, tables.paths[CLUSTER.folder])]
                                    if items is not None else [])
        inputs = Inputs(self.spark, read, self.partitions)
        surveyed = inputs.survey({table.name: self._layout(table) for table, _ in read})
        merged = surveyed[EXACT.name]
        found = interpret(merged.groups, source)
        self.seconds["survey_task_max"] = round(max(m.task_seconds for m in surveyed.values()),
                                                3)
        log.info("survey: %d rows, %d publishable, %d scattered users", found.rows,
                 found.valid_rows, found.scattered)
        level = (self._level(tables, items, surveyed[CLUSTER.name], found)
                 if CLUSTER.name in surveyed else None)
        report = self._publish(inputs, merged, found, level)
        if report.status == "published" and report.quarantined:
            self._phase("quarantine")
            self._quarantine(inputs, found, report)
        self._phase(None)
        return report

    def _layout(self, table) -> Layout:
        """How ``table``'s rows become hashes (a version id always has the same length)."""
        head = len(user_key_head(self.settings.redis_key_prefix,
                                 f"{self.interval.key}-{'0' * 10}"))
        return Layout(table, self.config.buckets, head, self.server.hash_limits())

    @staticmethod
    def _item_table(tables: FallbackTables) -> ItemTables | None:
        """The item -> cluster table, read on the driver before any Spark work, or None (logged)
        when the cluster table was embedded for another one (:func:`clustering_mismatch`): its
        rows are then not even surveyed."""
        items = read_item_clusters(tables.paths[ITEM_CLUSTERS])
        stale = clustering_mismatch(tables.paths[CLUSTER.folder], items)
        if stale is not None:
            log.warning("fallback level skipped: %s", stale)
            return None
        return items

    def _level(self, tables: FallbackTables, items: ItemTables, merged: Merged,
               found: Survey) -> _Level | None:
        """The fallback level (the interval has both its tables, ``items`` the item table
        read) when they hold something servable (logged otherwise)."""
        path = tables.paths[CLUSTER.folder]
        rows = interpret(merged.groups, path, chosen=(found.model_version, 2 * found.dim))
        if is_complete(tables.prior_path):
            read_item_priors(items, tables.prior_path, found.model_version, found.dim)
        items.dropped = {**rows.refused, **items.dropped}
        if not rows.valid_rows or not len(items.item_ids):
            log.warning("fallback level skipped: %d servable cluster rows, %d items with a "
                        "cluster (dropped: %s)", rows.valid_rows, len(items.item_ids),
                        items.dropped)
            return None
        log.info("fallback level: %d cluster rows, %d items in %d clusters, %d item priors "
                 "(dropped: %s)", rows.valid_rows, len(items.item_ids), items.clusters,
                 len(items.prior_ids), items.dropped)
        return _Level(merged, rows, items, items.digest(rows))

    def _publish(self, inputs: Inputs, merged: Merged, found: Survey,
                 level: _Level | None) -> PublishReport:
        buckets = self.config.buckets
        version = version_id(self.interval.key, found.model_version, found.dim, buckets,
                             found.digest, level.digest if level else "")
        report = PublishReport("published", version, None, self.server.served_version(),
                               found.model_version, found.dim, buckets, found.rows,
                               quarantined=dict(found.refused), ttl_s=self.ttl_s,
                               seconds=self.seconds)
        if level is not None:
            report.clusters = level.tables.clusters
            report.item_clusters = len(level.tables.item_ids)
            report.cluster_dropped = dict(level.tables.dropped)
        log.info("version %s: %d publishable rows of %d", version, found.valid_rows, found.rows)
        if self._nothing_to_do(report):
            self._retain(report)
            return report
        self._phase("estimate")
        evicted = self._check_memory(report, merged, found, level)
        self._phase("write")
        manifest = self._write(report, inputs, merged, found, level)
        self._phase("switch")
        self._switch(report, manifest)
        self._retain(report)
        self._check_no_eviction(report, evicted)
        return report

    def _retain(self, report: PublishReport) -> None:
        """Keep the served and failover versions (never expiring), retire the others
        (:mod:`solaris_lib.cache.retain`); run on every rerun, so it heals a publish that
        died between its switch and this pass."""
        self._phase("retain")
        done = retain(self.server, self.config.retire_after_s, self.ttl_s)
        report.failover_version = done.failover
        report.retained = done.as_dict()

    def _check_no_eviction(self, report: PublishReport, evicted_before: int) -> None:
        """After the switch: the policy is still non-evicting and nothing was evicted while
        the version was written (else the version is served but may lose pairs: fail loudly)."""
        report.eviction_policy = self.server.eviction_policy()
        report.evicted_keys = self.server.evicted_keys() - evicted_before
        evicting = {n: p for n, p in report.eviction_policy.items() if p.startswith(EVICTING)}
        if evicting or report.evicted_keys:
            raise EvictionPolicyError(
                f"version {report.version} is served, but Redis evicted {report.evicted_keys} "
                f"keys during the publish and maxmemory-policy is now "
                f"{report.eviction_policy}: served pairs may vanish. Set maxmemory-policy "
                f"noeviction (infra/redis.conf) and rerun the publish.")

    def _nothing_to_do(self, report: PublishReport) -> bool:
        previous = report.previous_version
        try:
            existing = self.server.manifest(report.version)
        except CacheFormatError as exc:  # a partial or foreign manifest: rewritten below
            log.warning("manifest of %s is unusable (%s): rewriting it", report.version, exc)
            existing = None
        if previous == report.version and existing is not None and existing.complete:
            report.status, report.served_version = "already_served", previous
            report.pairs, report.users = existing.pairs, existing.users
            log.info("version %s is already complete and served: nothing to write", previous)
            return True
        if previous and not self.config.force and previous[:16] > report.version[:16]:
            report.status, report.served_version = "superseded", previous
            log.info("served version %s is of a later interval: %s not written (force=False)",
                     previous, report.version)
            return True
        return False

    def _check_memory(self, report: PublishReport, merged: Merged, found: Survey,
                      level: _Level | None) -> int:
        """Bytes per master: the published users' hashes (from the survey) and the level's
        cluster hashes and chunks; refuse when they do not fit, or when a master's
        maxmemory-policy may evict. Returns the keys evicted so far (for the check after the
        switch)."""
        nodes = self.server.nodes()
        parts = [merged.parts[(found.model_version, 2 * found.dim)]]
        if level is not None:
            parts.append(level.merged.parts.get((found.model_version, 2 * found.dim)))
        needed: dict[str, int] = {}
        for part in filter(None, parts):
            for slot, size in zip(part.slots.tolist(), part.bytes.tolist(), strict=True):
                name = nodes.node_for_slot(slot)
                needed[name] = needed.get(name, 0) + size
            report.listpack_keys += part.listpack_keys
        if level is not None:
            for key, size in chunk_bytes(self.settings.redis_key_prefix, report.version,
                                         level.tables):
                name = nodes.node_for_slot(key_slot(key.encode()))
                needed[name] = needed.get(name, 0) + size
        report.estimate_bytes = sum(needed.values())
        limits = self.server.hash_limits()
        log.info("estimate: %d bytes (%d listpack-encoded hashes; limits %s from %s)",
                 report.estimate_bytes, report.listpack_keys,
                 (limits.max_entries, limits.max_value), limits.source)
        report.eviction_policy = self.server.eviction_policy()
        evicting = {n: p for n, p in report.eviction_policy.items() if p.startswith(EVICTING)}
        if evicting:
            raise EvictionPolicyError(
                f"Redis at {', '.join(sorted(evicting))} has maxmemory-policy "
                f"{', '.join(sorted(set(evicting.values())))}: it may evict the pairs of a "
                f"served version. Set maxmemory-policy noeviction (infra/redis.conf). Nothing "
                f"was written; {report.previous_version or 'no version'} is still served.")
        self._refuse_when_full(needed, report)
        return self.server.evicted_keys()

    def _refuse_when_full(self, needed: dict[str, int], report: PublishReport) -> None:
        info = self.server.memory()
        for name, estimate in sorted(needed.items()):
            free, limit, what = memory.free_bytes(info[name])
            required = memory.with_margin(estimate)
            if required > free:
                raise InsufficientMemoryError(
                    f"Redis at {name} needs {required:,} bytes for version "
                    f"{report.version} ({estimate:,} estimated + {memory.SAFETY_MARGIN:.0%} "
                    f"margin) but has {max(free, 0):,} free ({what} {limit:,}, used "
                    f"{info[name]['used_memory']:,}); free memory or raise maxmemory. "
                    f"Nothing was written; {report.previous_version or 'no version'} is still "
                    f"served.", required, free)

    def _target(self, version: str, dim: int, rows: int, buckets: int) -> WriteTarget:
        return WriteTarget(self.settings.redis_url, self.settings.redis_key_prefix, version,
                           dim, self.ttl_s, buckets,
                           max(1, rows // self.config.verify_sample),
                           self.config.pipeline_bytes, self.config.write_timeout_s)

    def _write(self, report: PublishReport, inputs: Inputs, merged: Merged, found: Survey,
               level: _Level | None) -> Manifest:
        """Write the manifest (state writing), the fallback's chunks and every pair; check
        the counts."""
        manifest = Manifest(report.version, report.model_version, CODEC, found.dim,
                            report.buckets, self.interval.start.isoformat(),
                            self.interval.end.isoformat(), found.valid_rows, 0, found.digest,
                            self.ttl_s)
        key = (found.model_version, 2 * found.dim)
        plans = {EXACT.name: (found, self._target(report.version, found.dim, found.valid_rows,
                                                  report.buckets), merged.scattered[key])}
        if level is not None:
            manifest = replace(manifest, fallback=FALLBACK_CLUSTER, clusters=report.clusters,
                               cluster_pairs=level.found.valid_rows,
                               item_clusters=report.item_clusters,
                               item_cluster_chunks=len(level.tables.chunks()),
                               **level.tables.prior_fields())
            plans[CLUSTER.name] = (level.found, self._target(
                report.version, found.dim, level.found.valid_rows, 0),
                level.merged.scattered.get(key, np.zeros(0, np.int64)))
        self._written_from = time.monotonic()  # every key's TTL runs from after this
        if not self.server.write_manifest(manifest):
            manifest = self.server.manifest(report.version) or manifest
            log.info("version %s is complete already (another publisher finished it): its "
                     "manifest is kept; its keys are written and checked again",
                     report.version)
        if level is not None:
            write_chunks(self.server, report.version, level.tables, self.ttl_s)
        started = time.perf_counter()
        stats = run_write(lambda: inputs.write(plans, SCATTERED_LIMIT), report.version,
                          report.previous_version, report.ttl_s)
        totals = self._totals(stats[EXACT.name])
        log.info("wrote %d pairs into %d keys of %d users (%d MB) in %.1f s",
                 totals["pairs"], totals["keys"], totals["users"],
                 totals["bytes_sent"] // 2**20, time.perf_counter() - started)
        check_counts(totals, found.valid_rows, report.version, "pairs")
        report.pairs, report.users, report.duplicates = (totals["pairs"], totals["users"],
                                                         totals["duplicates"])
        report.keys = totals["keys"]
        if totals["non_finite"]:
            report.quarantined[NON_FINITE] = totals["non_finite"]
            log.warning("%d rows with inf/nan embeddings were not published",
                        totals["non_finite"])
        if level is not None:
            manifest = self._check_level(report, manifest, stats[CLUSTER.name], level)
        return replace(manifest, users=report.users)

    def _check_level(self, report: PublishReport, manifest: Manifest, stats: list[dict],
                     level: _Level) -> Manifest:
        """The cluster rows' counts; a level whose every row was non-finite ends with
        ``cluster_pairs`` 0 in the manifest, which readers skip (the manifest's fields cannot
        be deleted by the publisher's ACL, only rewritten)."""
        clusters = self._totals(stats)
        check_counts(clusters, level.found.valid_rows, report.version, "cluster rows",
                     required=False)
        report.cluster_pairs = clusters["pairs"]
        report.cluster_duplicates = clusters["duplicates"]
        report.keys += clusters["keys"]
        if clusters["non_finite"]:
            report.cluster_dropped[NON_FINITE] = clusters["non_finite"]
        if clusters["pairs"]:
            return manifest
        log.warning("fallback level skipped: every one of %d cluster rows had an inf or nan "
                    "embedding; version %s is served without it (cluster_pairs 0)",
                    level.found.valid_rows, report.version)
        return replace(manifest, cluster_pairs=0)

    def _totals(self, stats: list[dict]) -> dict[str, int]:
        """The sums of a table's writing tasks' stats; the slowest task's seconds go into the
        report."""
        for name, column in (("write_task_max", "seconds"), ("check_task_max", "check_seconds")):
            slowest = max((s[column] for s in stats), default=0.0)
            self.seconds[name] = round(max(self.seconds.get(name, 0.0), slowest), 3)
        return {name: sum(s[name] for s in stats) for name in STATS_NAMES}

    def _switch(self, report: PublishReport, manifest: Manifest) -> None:
        final = replace(manifest, pairs=report.pairs, users=report.users,
                        cluster_pairs=report.cluster_pairs, state=STATE_COMPLETE)
        left = self.ttl_s - math.ceil(time.monotonic() - self._written_from)
        keys = sum(self.server.keys_per_master().values())
        needed = max(1, min(MIN_TTL_LEFT_S, self.ttl_s // 2)) + int(keys // RETAIN_KEYS_PER_S)
        if left < needed:
            if self.server.served_version() != report.version:
                raise PublishError(
                    f"version {report.version} was written and checked in more than its TTL "
                    f"allows ({self.ttl_s} s, {max(left, 0)} s left, {needed} s needed with the "
                    f"retain pass over {keys:,} keys): its first keys would "
                    f"expire before that pass keeps them; the alias was not switched. Rerun "
                    f"with a longer ttl_s.")
            left = self.ttl_s  # served already (another publisher's switch): retain keeps it
        self.server.complete_manifest(final, left)
        note_replacement()  # the served version may change from here on (runs.claimed)
        self.alias_sent = True
        report.served_version, report.failover_version = self.server.switch_alias(
            report.version, self.config.force)
        if report.served_version != report.version:
            report.status = "superseded"
        log.info("%s: alias -> %s (was %s; failover %s)", report.status,
                 report.served_version, report.previous_version, report.failover_version)

    def _quarantine(self, inputs: Inputs, found: Survey, report: PublishReport) -> None:
        """Write the refused rows with their reason (the writer's non-finite rows included)."""
        target = self.layout.output(CACHE, self.interval, "quarantine")
        with atomic_folder(target) as staging:
            inputs.quarantine(EXACT.name, found, staging)
        log.warning("quarantined %d of %d rows under %s: %s", sum(report.quarantined.values()),
                    found.rows, target, report.quarantined)
