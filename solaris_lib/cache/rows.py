"""The rows a publish reads, and why a row is not published (numpy, on pyarrow batches).

Two tables of an interval are published into user hashes (``docs/pipeline.md``):

* :data:`EXACT`: ``embeddings/interval=KEY`` (``user_id`` int64, ``item_id`` int64,
  ``model_version`` string, ``embedding`` binary): one value per (user, item);
* :data:`CLUSTER`: ``embeddings/cluster/interval=KEY`` (``user_id`` int64, ``cluster_id`` int32,
  ``model_version`` string, ``embedding`` binary): the hierarchical fallback's (user, item
  cluster) values.

A file without the contract's columns and types is refused as a whole
(:class:`PublishInputError`). Each row then gets the first of its problems, in the order of
:data:`PROBLEMS` (:func:`row_codes`); of the rows without one, those of the published model
version and embedding length are published (the majority of the exact rows; the cluster rows
must match them), the others are refused as ``other_model_version`` or
``wrong_embedding_length`` (:func:`interpret`). The writer finds inf/nan values
(``non_finite_embedding``). Refused exact rows are quarantined, refused cluster rows counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from solaris_lib.cache.errors import PublishInputError
from solaris_lib.layout import CLUSTER_EMBEDDINGS

_MASK64 = 0xFFFFFFFFFFFFFFFF
_SPARK_TYPES = {pa.int64(): "bigint", pa.int32(): "int", pa.string(): "string",
                pa.large_string(): "string", pa.binary(): "binary", pa.large_binary(): "binary"}


@dataclass(frozen=True)
class Table:
    """One input table: its folder under ``embeddings/`` (``""``: the partition itself), its
    id column and the contract's columns (name -> Spark SQL type name)."""

    name: str
    folder: str | None
    id_column: str
    id_type: str

    @property
    def columns(self) -> dict[str, str]:
        return {"user_id": "bigint", self.id_column: self.id_type, "model_version": "string",
                "embedding": "binary"}

    @property
    def problems(self) -> tuple[str | None, ...]:
        """Reason of each problem code (0: none), in the order :func:`row_codes` tests them."""
        ident = self.id_column.removesuffix("_id")
        return (None, "null_user_id", "negative_user_id", f"null_{ident}_id",
                f"negative_{ident}_id", "null_embedding", "wrong_embedding_length",
                "other_model_version")

    def check_schema(self, path: str, schema: pa.Schema) -> None:
        """Refuse a file without the contract's columns and types (extra columns are fine; a
        dictionary-encoded column counts as its values' type, :func:`plain` decodes it)."""
        types = {f.name: _SPARK_TYPES.get(_value_type(f.type), str(f.type)) for f in schema}
        problems = [f"{name} is {types.get(name, 'missing')}, expected {kind}"
                    for name, kind in self.columns.items() if types.get(name) != kind]
        if problems:
            raise PublishInputError(f"{path}: {'; '.join(problems)}")


def _value_type(kind: pa.DataType) -> pa.DataType:
    return kind.value_type if pa.types.is_dictionary(kind) else kind


def plain(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with its dictionary-encoded columns decoded (as pyarrow writes a categorical
    column), so every check sees the contract's plain types."""
    if not any(pa.types.is_dictionary(f.type) for f in batch.schema):
        return batch
    columns = [c.dictionary_decode() if pa.types.is_dictionary(c.type) else c
               for c in batch.columns]
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names)


EXACT = Table("exact", None, "item_id", "bigint")
CLUSTER = Table("cluster", CLUSTER_EMBEDDINGS, "cluster_id", "int")
REASON = "_reason"
NON_FINITE = "non_finite_embedding"


def row_codes(batch: pa.RecordBatch, table: Table) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, lengths)``: (n,) int8 index into ``table.problems`` of each row's first
    problem, and (n,) int64 embedding bytes (-1 when null)."""
    lengths = pc.fill_null(pc.binary_length(batch.column("embedding")), -1)
    lengths = lengths.to_numpy(zero_copy_only=False).astype(np.int64)
    checks = [_is_null(batch, "user_id"), ids(batch, "user_id") < 0,
              _is_null(batch, table.id_column), ids(batch, table.id_column) < 0, lengths < 0,
              (lengths == 0) | (lengths % 2 == 1), _is_null(batch, "model_version")]
    codes = np.zeros(batch.num_rows, np.int8)
    for code in range(len(checks), 0, -1):  # the first problem wins
        codes[checks[code - 1]] = code
    return codes, lengths


def published(batch: pa.RecordBatch, table: Table, model_version: str, dim: int) -> np.ndarray:
    """(n,) True for the rows published under ``model_version`` and ``dim``."""
    codes, lengths = row_codes(batch, table)
    same = pc.fill_null(pc.equal(batch.column("model_version"), model_version), False)
    return (codes == 0) & (lengths == 2 * dim) & same.to_numpy(zero_copy_only=False)


def ids(batch: pa.RecordBatch, name: str) -> np.ndarray:
    """(n,) int64 ids of a column, nulls as 0 (rows with a null id have a problem)."""
    return pc.fill_null(batch.column(name), 0).to_numpy(zero_copy_only=False).astype(
        np.int64, copy=False)


def _is_null(batch: pa.RecordBatch, name: str) -> np.ndarray:
    return batch.column(name).is_null().to_numpy(zero_copy_only=False)


@dataclass(frozen=True)
class Survey:
    """What a table holds: the published model version and dimension, the rows per refusal
    reason, the published rows and their content digest (32 hex), and how many published users
    are scattered (their rows are not one run of one slice)."""

    model_version: str
    dim: int
    rows: int
    valid_rows: int
    refused: dict[str, int]
    digest: str
    scattered: int = 0


def interpret(groups: list[dict], where: str, chosen: tuple[str, int] | None = None) -> Survey:
    """The :class:`Survey` of the merged groups (dicts with ``reason``, ``model_version``,
    ``bytes``, ``rows``, ``low``, ``xor``, ``scattered``; a group with a reason has no version
    or length). ``chosen``: the (model version, embedding bytes) to publish; by default the
    majority of the rows without a problem (ties: the smallest name, then the most common
    length). Nothing publishable is a :class:`PublishInputError`."""
    clean = [g for g in groups if g["reason"] is None]
    if chosen is None:
        if not clean:
            raise PublishInputError(f"{where}: none of {sum(g['rows'] for g in groups)} rows "
                                    f"is publishable ({_counts(groups)})")
        chosen = _majority(clean)
    version, size = chosen
    if size % 2:
        raise PublishInputError(f"{where}: embeddings of {size} bytes are not fp16 vectors")
    valid = [g for g in clean if (g["model_version"], g["bytes"]) == (version, size)]
    refused: dict[str, int] = {}
    for group in groups:
        if group in valid:
            continue
        name = group["reason"] or ("other_model_version" if group["model_version"] != version
                                   else "wrong_embedding_length")
        refused[name] = refused.get(name, 0) + group["rows"]
    low = sum(g["low"] for g in valid) & _MASK64
    xor = 0
    for group in valid:
        xor ^= group["xor"] & _MASK64
    return Survey(version, size // 2, sum(g["rows"] for g in groups),
                  sum(g["rows"] for g in valid), refused, f"{low:016x}{xor:016x}",
                  sum(g["scattered"] for g in valid))


def _majority(clean: list[dict]) -> tuple[str, int]:
    per_version: dict[str, int] = {}
    for group in clean:
        per_version[group["model_version"]] = (per_version.get(group["model_version"], 0)
                                               + group["rows"])
    version = min(per_version, key=lambda v: (-per_version[v], v))
    size = min((-g["rows"], g["bytes"]) for g in clean if g["model_version"] == version)[1]
    return version, size


def _counts(groups: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for group in groups:
        counts[group["reason"]] = counts.get(group["reason"], 0) + group["rows"]
    return counts
