"""Checks on the embeddings table (``docs/pipeline.md``) before anything reaches Redis.

The table as a whole must have the contract's columns and types, else
:class:`PublishInputError`. Each row then gets a reason when it cannot be published (null or
negative id, no embedding, an embedding of the wrong length or with an inf/nan, another model
version); such rows are counted and quarantined, never published.

Everything runs as Spark SQL in one aggregation over the table (:func:`user_groups`, by user):
the row-level problems, then (:func:`survey`) the majority model version and dimension,
per-reason counts and the content digest of the publishable rows, which names the version.
The same pass tells whether each user's rows lie contiguous in one input partition (the
infer job writes them so): the writer then takes the rows in the order read, without a
shuffle, and only the rows of "scattered" users are shuffled by user (:func:`scattered_users`).
An inf or nan inside an embedding is found by the writer (numpy, on bytes it holds anyway):
:func:`non_finite` is the SQL form used only to quarantine those rows afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

from solaris_lib.cache.errors import PublishInputError

COLUMNS = {"user_id": "bigint", "item_id": "bigint", "model_version": "string",
           "embedding": "binary"}
REASON = "_reason"
REASONS = (
    "null_user_id", "negative_user_id", "null_item_id", "negative_item_id", "null_embedding",
    "wrong_embedding_length", "non_finite_embedding", "other_model_version",
)
# An fp16 value (little-endian) is inf or nan when its high byte has every exponent bit set:
# 0x7C-0x7F or 0xFC-0xFF. On hex(embedding), each value is 4 hex digits, the high byte last.
NON_FINITE_FP16_HEX = "^(?:[0-9A-F]{4})*[0-9A-F]{2}[7F][C-F]"
_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF


@dataclass(frozen=True)
class Survey:
    """What the partition holds, from one pass: the served model version and dimension, the
    rows per quarantine reason, the publishable rows and their content digest (32 hex)."""

    model_version: str
    dim: int
    rows: int
    valid_rows: int
    quarantined: dict[str, int]
    digest: str
    scattered: int = 0  # publishable users whose rows are not contiguous in one partition


def check_columns(frame, where: str) -> None:
    """Refuse a frame without the contract's columns and types (extra columns are ignored)."""
    check_types(dict(frame.dtypes), where)


def check_types(types: dict[str, str], where: str) -> None:
    """Refuse columns ``{name: Spark SQL type name}`` that lack the contract's."""
    problems = [f"{name} is {types.get(name, 'missing')}, expected {kind}"
                for name, kind in COLUMNS.items() if types.get(name) != kind]
    if problems:
        raise PublishInputError(f"{where}: {'; '.join(problems)}")


def row_problem():
    """Column: the first problem of a row that needs no knowledge of the served version."""
    from pyspark.sql import functions as F

    size = F.length("embedding")
    return (F.when(F.col("user_id").isNull(), "null_user_id")
            .when(F.col("user_id") < 0, "negative_user_id")
            .when(F.col("item_id").isNull(), "null_item_id")
            .when(F.col("item_id") < 0, "negative_item_id")
            .when(F.col("embedding").isNull(), "null_embedding")
            .when((size == 0) | (size % 2 == 1), "wrong_embedding_length")
            .when(F.col("model_version").isNull(), "other_model_version"))


def non_finite():
    """Column: True when an fp16 embedding holds an inf or a nan (a slow regex over its hex:
    the writer checks values with numpy, and this runs only to quarantine rows it refused)."""
    from pyspark.sql import functions as F

    return F.hex("embedding").rlike(NON_FINITE_FP16_HEX)


def reason(model_version: str, dim: int):
    """Column: why a row is not published under ``model_version`` and ``dim`` (null: it is)."""
    from pyspark.sql import functions as F

    return F.coalesce(
        row_problem(),
        F.when(F.col("model_version") != model_version, "other_model_version")
        .when(F.length("embedding") != 2 * dim, "wrong_embedding_length"),
    )


def user_groups(frame, field_sizes):
    """The one pass over the table: per (user, row problem, model version, embedding length),
    the rows, the content digest parts, the summed item-id sizes (``field_sizes()``: the
    ``lp`` and ``ht`` columns of ``frames.field_sizes``) and the first and last row position
    (``monotonically_increasing_id``: the input partition in the high bits, the row within it
    in the low ones). At most a few rows per user; :func:`frames.tally` sums them in the
    same job."""
    from pyspark.sql import functions as F

    row_hash = F.xxhash64("user_id", "item_id", "embedding")
    return (frame.select("user_id", row_problem().alias(REASON), "model_version",
                         F.length("embedding").alias("bytes"), row_hash.alias("h"),
                         F.monotonically_increasing_id().alias("at"), *field_sizes)
            .groupBy("user_id", REASON, "model_version", "bytes")
            .agg(F.count("*").alias("rows"),
                 F.sum(F.col("h").bitwiseAND(F.lit(_MASK32))).alias("low"),
                 F.bit_xor("h").alias("xor"), F.sum("lp").alias("lp"), F.sum("ht").alias("ht"),
                 F.min("at").alias("first"), F.max("at").alias("last")))


def _scattered():
    """Column of :func:`user_groups`: True when the group's rows are not one contiguous run of
    one input partition (a run of ``rows`` rows spans exactly ``rows`` positions)."""
    from pyspark.sql import functions as F

    return F.col("last") - F.col("first") + 1 != F.col("rows")


def _published(found: Survey):
    from pyspark.sql import functions as F

    return (F.col(REASON).isNull() & (F.col("model_version") == found.model_version)
            & (F.col("bytes") == 2 * found.dim))


def scattered_users(groups, found: Survey, limit: int) -> list[int] | None:
    """Publishable users whose rows are not contiguous in one input partition (sorted), or
    None when there are more than ``limit`` of them (then every row is shuffled)."""
    if not found.scattered:
        return []
    if found.scattered > limit:
        return None
    rows = groups.where(_published(found) & _scattered()).select("user_id").collect()
    return sorted(row["user_id"] for row in rows)


def publishable_users(groups, found: Survey):
    """Rows of :func:`user_groups` that are published: (user_id, pairs, lp, ht)."""
    from pyspark.sql import functions as F

    return groups.where(_published(found)).select("user_id", F.col("rows").alias("pairs"),
                                                    "lp", "ht")


def survey(groups, where: str) -> Survey:
    """Totals of :func:`user_groups`; the majority model version (ties: smallest name) and its
    most common embedding length define what is published. (The publisher gets the same from
    :func:`frames.tally`, which also estimates memory in that job, and :func:`fold`.)"""
    from solaris_lib.cache.frames import tally

    return interpret(fold(tally(groups)), where)


def fold(tallied: list[dict]) -> list[dict]:
    """Rows of :func:`frames.tally` summed over slots: one dict per (problem, model version,
    embedding length) with ``rows``, ``low``, ``xor`` and ``scattered``."""
    totals: dict[tuple, dict] = {}
    for row in tallied:
        key = (row[REASON], row["model_version"], row["bytes"])
        total = totals.setdefault(key, {REASON: key[0], "model_version": key[1],
                                        "bytes": key[2], "rows": 0, "low": 0, "xor": 0,
                                        "scattered": 0})
        for name in ("rows", "low", "scattered"):
            total[name] += row[name]
        total["xor"] ^= row["xor"]
    return list(totals.values())


def published_slots(tallied: list[dict], found: Survey) -> list[dict]:
    """Rows of :func:`frames.tally` of the published group, as the memory check reads them:
    (slot, users, pairs, listpack_users, bytes)."""
    return [{"slot": row["slot"], "users": row["users"], "pairs": row["rows"],
             "listpack_users": row["listpack_users"], "bytes": row["estimate"]}
            for row in tallied if row[REASON] is None
            and row["model_version"] == found.model_version and row["bytes"] == 2 * found.dim]


def interpret(groups: list, where: str) -> Survey:
    """The :class:`Survey` of aggregated groups (dicts with ``_reason``, ``model_version``,
    ``bytes``, ``rows``, ``low``, ``xor`` and optionally ``scattered``)."""
    clean = [g for g in groups if g[REASON] is None]
    if not clean:
        rows = sum(g["rows"] for g in groups)
        raise PublishInputError(f"{where}: none of {rows} rows is publishable "
                                f"({_counts(groups)})")
    version, size = _majority(clean)
    if size % 2:
        raise PublishInputError(f"{where}: embeddings of {size} bytes are not fp16 vectors")
    valid = [g for g in clean if g["model_version"] == version and g["bytes"] == size]
    quarantined: dict[str, int] = {}
    for group in groups:
        if group in valid:
            continue
        name = group[REASON] or ("other_model_version" if group["model_version"] != version
                                 else "wrong_embedding_length")
        quarantined[name] = quarantined.get(name, 0) + group["rows"]
    low = sum(g["low"] for g in valid) & _MASK64
    xor = 0
    for group in valid:
        xor ^= group["xor"] & _MASK64
    return Survey(version, size // 2, sum(g["rows"] for g in groups),
                  sum(g["rows"] for g in valid), quarantined, f"{low:016x}{xor:016x}",
                  sum(g.get("scattered", 0) for g in valid))


def _majority(clean: list) -> tuple[str, int]:
    per_version: dict[str, int] = {}
    for group in clean:
        per_version[group["model_version"]] = per_version.get(group["model_version"], 0) + \
            group["rows"]
    version = min(per_version, key=lambda v: (-per_version[v], v))
    size = min((-g["rows"], g["bytes"]) for g in clean if g["model_version"] == version)[1]
    return version, size


def _counts(groups: list) -> dict[str, int]:
    counts: dict[str, int] = {}
    for group in groups:
        counts[group[REASON]] = counts.get(group[REASON], 0) + group["rows"]
    return counts
