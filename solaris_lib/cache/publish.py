"""Publish one interval's embeddings as a new cache version, then switch the alias to it.

Phases (``on_phase`` hears each name before it starts; each logs counts and rates):

0. (before any phase) the URL's Redis user may run every publisher command on the prefix,
                on every master (:func:`solaris_lib.cache.access.check_publisher_access`,
                writes nothing), else it stops here with PublishPermissionError
1. ``inspect``  columns; one Spark job over the table for the model version, the dimension,
                the rows per quarantine reason, the content digest, the users whose rows are
                not one run of one slice or input partition, and the memory estimate per slot
                (from per-user pair counts); the hierarchical fallback level when the
                interval has its tables (:mod:`solaris_lib.cache.fallback`) -> the
                deterministic version id. Read directly with pyarrow in the Spark tasks
                (``PublishConfig.direct_read``, the default) or through Spark SQL (without it,
                and always with the fallback level): :mod:`solaris_lib.cache.inputs`
2. ``validate`` write the refused rows (with their reason) to ``cache/quarantine/interval=KEY/``
3. ``estimate`` bytes per master (with the fallback level: counted again with its fields);
                refuse when they will not fit
4. ``write``    manifest (state ``writing``), the fallback's item -> cluster chunks (read
                back), then every slice (direct read) or Spark partition, pipelined, in the
                input's order (only the rows of users that are not one run of one slice or
                partition are shuffled by user, or every row with the fallback level); each
                task then counts the fields its users hold on the server and reads back a
                hash-chosen sample of its pairs. Checked (:mod:`solaris_lib.cache.checks`):
                pairs written + duplicates + non-finite = publishable rows, fields on the
                server = pairs written, every sampled pair equal to its input bytes and
                values; the same for the fallback level's ``c<cluster>`` fields, counted apart
5. ``switch``   manifest ``complete``, alias -> version (one atomic EVAL, never backwards)
6. ``quarantine`` (when rows were refused) the refused rows with their reason

Nothing a reader can see changes before phase 6: the alias still names the previous version,
whose keys are never touched, so a failure at any point leaves it served. Old versions expire
by TTL. A rerun of the same interval over the same embeddings gets the same version id and
writes the same bytes; when that version is already served it returns ``already_served``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from solaris_lib.cache import frames, memory
from solaris_lib.cache.access import check_publisher_access
from solaris_lib.cache.checks import check_cluster_counts, check_counts, run_write
from solaris_lib.cache.errors import (
    CacheProtocolError,
    CacheUnavailableError,
    InsufficientMemoryError,
    PublishError,
    PublishInputError,
)
from solaris_lib.cache.fallback import (
    FallbackLevel,
    FallbackTables,
    chunk_bytes,
    find_tables,
    read_fallback,
    with_cluster_fields,
    write_item_clusters,
)
from solaris_lib.cache.format import (
    FALLBACK_CLUSTER,
    STATE_COMPLETE,
    Codec,
    Manifest,
    check_prefix,
    data_key_head,
    version_id,
)
from solaris_lib.cache.inputs import DirectInput, SparkInput
from solaris_lib.cache.nodes import hash_tag
from solaris_lib.cache.server import CacheServer
from solaris_lib.cache.validate import REASON, Survey, non_finite, reason
from solaris_lib.cache.writer import STATS_SCHEMA, WriteTarget
from solaris_lib.config import SolarisSettings
from solaris_lib.intervals import Interval
from solaris_lib.layout import CACHE, EMBEDDINGS, DataLayout
from solaris_lib.storage import atomic_folder, is_complete

log = logging.getLogger(__name__)
SCATTERED_LIMIT = 100_000  # more users not contiguous in one input partition: shuffle all rows


class PublishConfig(BaseModel):
    """Knobs of one publish; unknown keys are rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttl_s: int | None = Field(None, gt=0, description="Seconds the version's keys live after "
                              "they are written; default three interval lengths.")
    codec: Literal["fp16", "fp32"] = Field("fp16", description="Value codec in Redis (the input "
                                           "is fp16; fp32 doubles memory for no precision gain).")
    partitions: int | None = Field(None, ge=1, description="Spark partitions of the write "
                                   "(parallel writers); default the session's parallelism.")
    verify_sample: int = Field(64, ge=1, description="Pairs read back and compared with the "
                               "input after the write.")
    pipeline_bytes: int = Field(1 << 20, ge=1024, description="Bytes per pipelined send.")
    write_timeout_s: float = Field(60.0, gt=0, description="Deadline of one pipelined send.")
    force: bool = Field(False, description="Switch the alias even when it names a later "
                        "interval (backfills normally leave it).")
    direct_read: bool = Field(True, description="Read the parquet files with pyarrow in the "
                              "Spark tasks (solaris_lib.cache.inputs); False: Spark SQL reads "
                              "them (the JVM path, always used with the fallback level).")


@dataclass
class PublishReport:
    """What a publish did (the job prints it as JSON)."""

    status: str  # published | already_served | superseded
    version: str
    served_version: str | None
    previous_version: str | None
    model_version: str
    codec: str
    dim: int
    rows_read: int
    pairs: int = 0
    users: int = 0
    duplicates: int = 0
    quarantined: dict[str, int] = field(default_factory=dict)
    estimate_bytes: int = 0
    listpack_users: int = 0
    ttl_s: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    # the hierarchical fallback level (all zero / empty when the interval has none)
    cluster_pairs: int = 0
    clusters: int = 0
    item_clusters: int = 0
    cluster_duplicates: int = 0
    cluster_dropped: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


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


class _Run:
    """The state of one publish, phase by phase."""

    def __init__(self, spark, settings: SolarisSettings, interval: Interval,
                 config: PublishConfig, on_phase: PhaseHook) -> None:
        self.spark, self.settings, self.interval, self.config = spark, settings, interval, config
        self.on_phase = on_phase
        self.layout = DataLayout.from_settings(settings)
        self.ttl_s = config.ttl_s or int(3 * interval.length.total_seconds())
        self.server: CacheServer | None = None
        self.seconds: dict[str, float] = {}
        self.slots: list[dict] = []  # memory estimate per cluster slot, from the survey
        self.input: DirectInput | SparkInput | None = None
        self.found: Survey | None = None
        self.current_phase: str | None = None
        self.alias_sent = False
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
        tables = find_tables(self.layout, self.interval)
        self.input = self._input(self.layout.output(EMBEDDINGS, self.interval), tables)
        found = self.found = self._survey()
        fallback = read_fallback(self.spark, tables, found.model_version, found.dim)
        # the fallback's rows join their users' exact rows: with it, every row is shuffled
        scattered = (self.input.scattered(found, SCATTERED_LIMIT) if fallback is None
                     else None)
        report = self._publish_valid(found, fallback, scattered)
        if report.status != "published" or not report.quarantined:
            self._phase(None)
            return report
        self._phase("quarantine")
        self._quarantine(self.input.frame, found, report)
        self._phase(None)
        return report

    def _input(self, source: str, tables: FallbackTables) -> DirectInput | SparkInput:
        """The read path (:mod:`solaris_lib.cache.inputs`): direct unless turned off, the
        interval has the fallback level's tables, or a file's column types are not the plain
        ones the direct path reads (Spark SQL then reads and checks them)."""
        if not is_complete(source):
            raise PublishInputError(f"{source}: no complete embeddings partition for "
                                    f"{self.interval} (missing or without _SUCCESS)")
        if self.config.direct_read and not tables.present:
            try:
                return DirectInput(self.spark, source, self._partitions())
            except PublishInputError as exc:  # e.g. a dictionary-encoded string column
                log.info("the direct read path cannot take %s (%s): Spark SQL reads it",
                         source, exc)
        return SparkInput(self.spark, source)

    def _partitions(self) -> int:
        return self.config.partitions or self.spark.sparkContext.defaultParallelism

    def _survey(self) -> Survey:
        """Totals and the memory estimate per slot (``self.slots``) of the published group
        (a version id always has the same length, so the key length is known)."""
        key_head = len(data_key_head(self.settings.redis_key_prefix,
                                     f"{self.interval.key}-{'0' * 10}"))
        value_factor = Codec(self.config.codec, 1).value_bytes // 2
        found, self.slots = self.input.survey(value_factor, key_head, self.server.hash_limits())
        if self.input.survey_task_seconds is not None:
            self.seconds["survey_task_max"] = round(self.input.survey_task_seconds, 3)
        log.info("survey (%s read): %d rows, %d publishable, %d scattered users",
                 self.input.name, found.rows, found.valid_rows, found.scattered)
        return found

    def _quarantine(self, frame, found: Survey, report: PublishReport) -> None:
        """Write the refused rows with their reason (the writer's non-finite rows included)."""
        from pyspark.sql import functions as F

        target = self.layout.output(CACHE, self.interval, "quarantine")
        why = reason(found.model_version, found.dim)
        if report.quarantined.get("non_finite_embedding"):
            why = F.coalesce(why, F.when(non_finite(), "non_finite_embedding"))
        bad = frame.withColumn(REASON, why)
        with atomic_folder(target) as staging:
            bad.where(bad[REASON].isNotNull()).write.mode("overwrite").parquet(staging)
        log.warning("quarantined %d of %d rows under %s: %s", sum(report.quarantined.values()),
                    found.rows, target, report.quarantined)

    def _publish_valid(self, found: Survey, fallback: FallbackLevel | None,
                       scattered: list[int] | None) -> PublishReport:
        codec = Codec(self.config.codec, found.dim)
        version = version_id(self.interval.key, found.model_version, codec.name, codec.dim,
                             found.digest, fallback.digest if fallback else "")
        report = PublishReport("published", version, None, self.server.served_version(),
                               found.model_version, codec.name, codec.dim, found.rows,
                               quarantined=found.quarantined, ttl_s=self.ttl_s,
                               seconds=self.seconds)
        if fallback is not None:
            report.clusters, report.item_clusters = fallback.clusters, len(fallback.item_ids)
            report.cluster_dropped = fallback.dropped
        log.info("version %s: %d publishable rows of %d", version, found.valid_rows, found.rows)
        if self._nothing_to_do(report):
            return report
        self._phase("estimate")
        self._check_memory(codec, report, fallback)
        self._phase("write")
        manifest = self._write(codec, report, found, fallback, scattered)
        self._phase("switch")
        return self._switch(report, manifest)

    def _nothing_to_do(self, report: PublishReport) -> bool:
        previous = report.previous_version
        existing = self.server.manifest(report.version)
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

    def _check_memory(self, codec: Codec, report: PublishReport,
                      fallback: FallbackLevel | None) -> None:
        limits = self.server.hash_limits()
        slots = self.slots
        if fallback is not None:  # the c<cluster> fields change the users' encodings
            users = with_cluster_fields(self.input.users(self.found),
                                         fallback.users)
            key_head = len(data_key_head(self.settings.redis_key_prefix, report.version))
            slots = frames.bytes_per_slot(users, codec.value_bytes, key_head, limits)
        needed: dict[tuple[str, int], int] = {}
        for row in slots:
            address = self.server.router.pool_for_slot(row["slot"]).address
            needed[address] = needed.get(address, 0) + row["bytes"]
        if fallback is not None:
            for key, size in chunk_bytes(self.settings.redis_key_prefix, report.version,
                                         fallback):
                address = self.server.router.pool_for_tag(hash_tag(key)).address
                needed[address] = needed.get(address, 0) + size
        report.users = sum(r["users"] for r in slots)
        report.listpack_users = sum(r["listpack_users"] for r in slots)
        report.estimate_bytes = sum(needed.values())
        log.info("estimate: %d bytes for %d users (%d listpack-encoded; limits %s from %s)",
                 report.estimate_bytes, report.users, report.listpack_users,
                 (limits.max_entries, limits.max_value), limits.source)
        policy = self.server.eviction_policy()
        if policy not in ("noeviction", "unknown"):
            log.warning("maxmemory-policy is %s: Redis may evict cached pairs under pressure",
                        policy)
        self._refuse_when_full(needed, report)

    def _refuse_when_full(self, needed: dict[tuple[str, int], int], report: PublishReport) -> None:
        info = self.server.memory()
        for address, estimate in sorted(needed.items()):
            free, limit, what = memory.free_bytes(info[address])
            required = memory.with_margin(estimate)
            if required > free:
                raise InsufficientMemoryError(
                    f"Redis at {address[0]}:{address[1]} needs {required:,} bytes for version "
                    f"{report.version} ({estimate:,} estimated + {memory.SAFETY_MARGIN:.0%} "
                    f"margin) but has {max(free, 0):,} free ({what} {limit:,}, used "
                    f"{info[address]['used_memory']:,}); free memory or raise maxmemory. "
                    f"Nothing was written; {report.previous_version or 'no version'} is still "
                    f"served.", required, free)

    def _write(self, codec: Codec, report: PublishReport, found: Survey,
               fallback: FallbackLevel | None, scattered: list[int] | None) -> Manifest:
        """Write the manifest (state writing), the fallback's item table and every pair
        (``scattered``: see :func:`frames.write`); check the counts."""
        valid_rows = found.valid_rows
        cluster_rows = fallback.valid_rows if fallback else 0
        manifest = Manifest(report.version, report.model_version, codec.name, codec.dim,
                            self.interval.start.isoformat(), self.interval.end.isoformat(),
                            valid_rows, report.users, found.digest, self.ttl_s)
        if fallback is not None:
            manifest = replace(manifest, fallback=FALLBACK_CLUSTER, clusters=report.clusters,
                               cluster_pairs=cluster_rows, item_clusters=report.item_clusters,
                               item_cluster_chunks=len(fallback.chunks()),
                               **fallback.prior_fields())
        self.server.write_manifest(manifest)
        if fallback is not None:
            write_item_clusters(self.server, report.version, fallback, self.ttl_s)
        target = WriteTarget(self.settings.redis_url, self.settings.redis_key_prefix,
                             report.version, codec.name, codec.dim, self.ttl_s,
                             max(1, valid_rows // self.config.verify_sample),
                             self.config.pipeline_bytes, self.config.write_timeout_s,
                             max(1, cluster_rows // self.config.verify_sample))
        started = time.perf_counter()
        log.info("write: %s", "every row shuffled by user" if scattered is None else
                 f"input order kept, {len(scattered)} scattered users shuffled")
        extra = fallback.rows if fallback is not None else None
        stats = run_write(lambda: self.input.write(found, target, self._partitions(),
                                                   scattered, extra),
                          report.version, report.previous_version, report.ttl_s)
        totals = {name: sum(s[name] for s in stats) for name in STATS_SCHEMA.names}
        elapsed = time.perf_counter() - started
        log.info("wrote %d pairs of %d users (%d MB) in %.1f s: %.0f pairs/s", totals["pairs"],
                 totals["users"], totals["bytes_sent"] // 2**20, elapsed,
                 totals["pairs"] / max(elapsed, 1e-9))
        # the slowest task's time in the writer, and in its count and read-back
        for name, column in (("write_task_max", "seconds"), ("check_task_max", "check_seconds")):
            self.seconds[name] = round(max((s[column] for s in stats), default=0.0), 3)
        check_counts(totals, valid_rows, report.version)
        check_cluster_counts(totals, cluster_rows, report.version)
        report.pairs, report.users, report.duplicates = (totals["pairs"], totals["users"],
                                                         totals["duplicates"])
        report.cluster_pairs = totals["cluster_pairs"]
        report.cluster_duplicates = totals["cluster_duplicates"]
        if totals["cluster_non_finite"]:
            report.cluster_dropped["non_finite_embedding"] = totals["cluster_non_finite"]
        if totals["non_finite"]:
            report.quarantined["non_finite_embedding"] = totals["non_finite"]
            log.warning("%d rows with inf/nan embeddings were not published",
                        totals["non_finite"])
        return manifest

    def _switch(self, report: PublishReport, manifest: Manifest) -> PublishReport:
        final = replace(manifest, pairs=report.pairs, users=report.users,
                        cluster_pairs=report.cluster_pairs, state=STATE_COMPLETE)
        self.server.write_manifest(final)
        self.alias_sent = True
        report.served_version = self.server.switch_alias(report.version, self.config.force)
        if report.served_version != report.version:
            report.status = "superseded"
        log.info("%s: alias -> %s (was %s)", report.status, report.served_version,
                 report.previous_version)
        return report
