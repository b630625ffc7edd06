"""The embedding cache's byte format (``docs/cache-format.md``): one module, writer and reader.

Keys, all under the deployment's key prefix ``P``::

    P:alias                         string  the served version id
    P:failover:{P:alias}            string  the version served before it (kept as failover)
    P:m:<version>                   hash    the version's manifest (see :class:`Manifest`)
    P:e:<version>:{<user_id>}:<b>   hash    the user's exact items of bucket b (0 .. buckets - 1,
                                            :func:`bucket_of`): field = decimal item id
    P:e:<version>:{<user_id>}:c     hash    the user's (user, item cluster) embeddings of the
                                            hierarchical fallback: field = decimal cluster id
    P:misses                        stream  sampled lookup misses (docs/pipeline.md)
    P:h:<version>:items:<k>         string  chunk k of the version's item -> cluster table
                                            (hierarchical fallback; see :func:`pack_item_clusters`)
    P:h:<version>:prior:<k>         string  chunk k of the version's item-prior table (the ITEM
                                            level; see :func:`pack_item_priors`)
    P:probe:...                     reserved: named (never created) by the publisher's ACL check

The ``{<user_id>}`` hash tag puts every key of one user on one Redis Cluster slot, so one
pipeline of HMGETs reads any number of the user's items in one round trip. A user's items are
spread over ``buckets`` small hashes so that each stays a short listpack (Redis scans a listpack
for every field an HMGET asks).

A value is ``dim`` little-endian IEEE half floats (``dim * 2`` bytes), no header: the version's
manifest names the codec and the dimension.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields

import numpy as np

from solaris_lib.cache.errors import CacheConfigError, CacheFormatError

FORMAT_VERSION = 2
CODEC = "fp16"  # the one value codec: the embeddings table's bytes, unchanged
MAX_BUCKETS = 64
CLUSTER_KEY = "c"  # the last part of a user's cluster-level key
STATE_WRITING = "writing"
STATE_COMPLETE = "complete"
FALLBACK_CLUSTER = "cluster"
ITEM_CLUSTER_CHUNK = 1 << 18  # items per P:h:<version>:items:<k> string (3 MiB)
ITEM_CLUSTER_RECORD = 12  # bytes per item: int64 id + int32 cluster
ITEM_PRIOR_CHUNK = 1 << 14  # items per P:h:<version>:prior:<k> string (2.2 MiB at dim 64 fp16)
# The TTL of every key of a served or failover version (ten years: in effect never). A publish
# sets it after its switch (solaris_lib/cache/retain.py) and shortens it again when the
# version retires; the writer's "EXPIRE ttl NX" + "EXPIRE ttl GT" never lower it.
RETAINED_TTL_S = 10 * 365 * 86400

_PREFIX = re.compile(r"^[A-Za-z0-9_.-]+$")
_VERSION = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{10}$")
_MODEL_VERSION = re.compile(r"^[A-Za-z0-9_.+=-]{1,128}$")


def check_prefix(prefix: str) -> str:
    """Refuse prefixes that could collide with the key grammar (``:``, ``{``, spaces)."""
    if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
        raise CacheConfigError(f"key prefix {prefix!r} must match {_PREFIX.pattern}")
    return prefix


def alias_key(prefix: str) -> str:
    """The string key naming the served version."""
    return f"{prefix}:alias"


def failover_key(prefix: str) -> str:
    """The string key naming the failover version: the one served before the alias's, kept
    (never expiring) until a later version is verified and switched to. Its hash tag is the
    alias's name, so both live on one Redis Cluster slot and move in one atomic script."""
    return f"{prefix}:failover:{{{alias_key(prefix)}}}"


_VERSION_IN_KEY = re.compile(r"^[^:]+:[meh]:(\d{8}T\d{6}Z-[0-9a-f]{10})(?::|$)")


def version_in_key(key: str) -> str | None:
    """The version whose key ``key`` is (its manifest, a user's hash, a chunk), else None."""
    match = _VERSION_IN_KEY.match(key)
    return match.group(1) if match else None


def manifest_key(prefix: str, version: str) -> str:
    """The hash describing one version (codec, dimension, counts, state)."""
    return f"{prefix}:m:{version}"


def user_key_head(prefix: str, version: str) -> str:
    """Everything of a user's keys before the user id: ``P:e:<version>:{``."""
    return f"{prefix}:e:{version}:{{"


def bucket_key(prefix: str, version: str, user_id: int, bucket: int) -> str:
    """The hash holding one user's exact embeddings of one bucket of one version."""
    return f"{user_key_head(prefix, version)}{int(user_id)}}}:{int(bucket)}"


def cluster_key(prefix: str, version: str, user_id: int) -> str:
    """The hash holding one user's (user, item cluster) embeddings of one version."""
    return f"{user_key_head(prefix, version)}{int(user_id)}}}:{CLUSTER_KEY}"


def check_buckets(buckets: int) -> int:
    """A version's bucket count: a power of two in 1 .. :data:`MAX_BUCKETS`."""
    if not 1 <= buckets <= MAX_BUCKETS or buckets & (buckets - 1):
        raise CacheFormatError(f"buckets must be a power of two in 1..{MAX_BUCKETS}, got "
                               f"{buckets}")
    return buckets


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / golden ratio: Fibonacci hashing


def bucket_of(item_ids: np.ndarray, buckets: int) -> np.ndarray:
    """(n,) int64 bucket of each item id (n,): the top ``log2(buckets)`` bits of
    ``item_id * 0x9E3779B97F4A7C15 mod 2^64`` (0 when ``buckets`` is 1), so ids of any
    structure (sequential, multiples of a stride) spread evenly."""
    ids = np.asarray(item_ids, dtype=np.int64).view(np.uint64)
    if check_buckets(buckets) == 1:
        return np.zeros(ids.shape, np.int64)
    shift = np.uint64(65 - buckets.bit_length())
    return ((ids * _GOLDEN) >> shift).astype(np.int64)  # arrays wrap silently mod 2^64


MISS_MAX_ITEMS = 1000  # items one P:misses entry holds at most (the client cuts, readers refuse)


def misses_key(prefix: str) -> str:
    """The capped stream of sampled lookup misses (read by the next speculation run)."""
    return f"{prefix}:misses"


def item_clusters_key(prefix: str, version: str, chunk: int) -> str:
    """String key holding chunk ``chunk`` (0, 1, ...) of the version's item -> cluster table."""
    return f"{prefix}:h:{version}:items:{int(chunk)}"


def pack_item_clusters(item_ids: np.ndarray, cluster_ids: np.ndarray,
                       chunk_items: int = ITEM_CLUSTER_CHUNK) -> list[bytes]:
    """The chunk values of an item -> cluster table.

    ``item_ids`` (n,) strictly increasing non-negative int64, ``cluster_ids`` (n,) non-negative
    int32. Chunk ``k`` holds rows ``k * chunk_items ..`` as ``m`` little-endian int64 item ids
    followed by ``m`` little-endian int32 cluster ids (``12 * m`` bytes). An empty table is one
    empty chunk.
    """
    clusters = np.asarray(cluster_ids, dtype="<i4")
    if np.shape(item_ids) != clusters.shape or clusters.ndim != 1:
        raise CacheFormatError(f"item and cluster ids differ in shape: {np.shape(item_ids)}, "
                               f"{clusters.shape}")
    if len(clusters) and clusters.min() < 0:
        raise CacheFormatError("item ids must be strictly increasing and ids non-negative")
    return _pack_id_table(item_ids, clusters.view(np.uint8).reshape(-1, 4), chunk_items)


def unpack_item_clusters(chunks: Sequence[bytes | None], items: int
                         ) -> tuple[np.ndarray, np.ndarray]:
    """``(item_ids (n,) int64, cluster_ids (n,) int32)`` from the chunk values, in order;
    a missing chunk, a wrong length, unsorted ids or a count other than ``items`` raise
    :class:`CacheFormatError`."""
    item_ids, data = _unpack_id_table(chunks, items, ITEM_CLUSTER_RECORD - 8, "item-cluster")
    cluster_ids = data.view("<i4").reshape(-1).astype(np.int32)
    if len(cluster_ids) and cluster_ids.min() < 0:
        raise CacheFormatError("item-cluster table is not sorted by item id or has negatives")
    return item_ids, cluster_ids


def item_priors_key(prefix: str, version: str, chunk: int) -> str:
    """String key holding chunk ``chunk`` (0, 1, ...) of the version's item-prior table."""
    return f"{prefix}:h:{version}:prior:{int(chunk)}"


def pack_item_priors(item_ids: np.ndarray, values: np.ndarray,
                     chunk_items: int = ITEM_PRIOR_CHUNK) -> list[bytes]:
    """The chunk values of an item-prior table (the ITEM level).

    ``item_ids`` (n,) strictly increasing non-negative int64; ``values`` (n, value_bytes) uint8:
    each item's value in the version's codec (the bytes a user-hash field would hold). Chunk
    ``k`` holds rows ``k * chunk_items ..`` as ``m`` little-endian int64 item ids followed by the
    ``m`` values in the same order (``m * (8 + value_bytes)`` bytes). An empty table is one
    empty chunk.
    """
    return _pack_id_table(item_ids, values, chunk_items)


def unpack_item_priors(chunks: Sequence[bytes | None], items: int, value_bytes: int
                       ) -> tuple[np.ndarray, np.ndarray]:
    """``(item_ids (n,) int64, values (n, value_bytes) uint8)`` from the chunk values, in order;
    a missing chunk, a wrong length, unsorted ids or a count other than ``items`` raise
    :class:`CacheFormatError`."""
    return _unpack_id_table(chunks, items, value_bytes, "item-prior")


def _pack_id_table(item_ids: np.ndarray, values: np.ndarray, chunk_items: int) -> list[bytes]:
    """Chunks of an item-keyed table: per chunk, ``m`` little-endian int64 ids, then the ``m``
    rows of ``values`` (n, record) uint8 in the same order; an empty table is one empty chunk."""
    items = np.asarray(item_ids, dtype="<i8")
    data = np.ascontiguousarray(values, dtype=np.uint8)
    if items.ndim != 1 or data.ndim != 2 or len(data) != len(items):
        raise CacheFormatError(f"item ids {items.shape} and values {data.shape} do not match")
    if len(items) and (items[0] < 0 or (np.diff(items) <= 0).any()):
        raise CacheFormatError("item ids must be strictly increasing and non-negative")
    starts = range(0, max(len(items), 1), chunk_items)
    return [items[s : s + chunk_items].tobytes() + data[s : s + chunk_items].tobytes()
            for s in starts]


def _unpack_id_table(chunks: Sequence[bytes | None], items: int, value_bytes: int, what: str
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`_pack_id_table`: ``(item_ids (n,) int64, values (n, value_bytes)
    uint8)``; ``what`` names the table in the :class:`CacheFormatError` messages."""
    record = 8 + value_bytes
    ids, values = [], []
    for index, chunk in enumerate(chunks):
        if chunk is None or len(chunk) % record:
            raise CacheFormatError(f"{what} chunk {index} is missing or malformed")
        m = len(chunk) // record
        ids.append(np.frombuffer(chunk, dtype="<i8", count=m).astype(np.int64))
        values.append(np.frombuffer(chunk, dtype=np.uint8, offset=8 * m).reshape(m, value_bytes))
    item_ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
    data = np.concatenate(values) if values else np.zeros((0, value_bytes), np.uint8)
    if len(item_ids) != items:
        raise CacheFormatError(f"{what} table holds {len(item_ids)} items, the manifest "
                               f"says {items}")
    if len(item_ids) and ((np.diff(item_ids) <= 0).any() or item_ids[0] < 0):
        raise CacheFormatError(f"{what} table is not sorted by item id or has negatives")
    return item_ids, data


def version_id(interval_key: str, model_version: str, dim: int, buckets: int, digest: str,
               fallback_digest: str = "") -> str:
    """Deterministic version id: ``<interval key>-<10 hex>``.

    The hex part hashes the format, the model version, the codec, the dimension, the bucket
    count and the content digest, so a rerun of an interval over the same embeddings names
    the same version (and rewrites the same bytes), while different content or layout never
    shares a namespace with served data. Sorting version ids sorts them by interval.
    ``fallback_digest`` (the content of the hierarchical fallback level, when published) is
    hashed too.
    """
    check_model_version(model_version)
    parts = [str(FORMAT_VERSION), model_version, CODEC, str(dim), str(check_buckets(buckets)),
             digest] + ([fallback_digest] if fallback_digest else [])
    material = "\0".join(parts).encode()
    return f"{interval_key}-{hashlib.blake2b(material, digest_size=5).hexdigest()}"


def check_version(version: str) -> str:
    if not isinstance(version, str) or not _VERSION.fullmatch(version):
        raise CacheFormatError(f"not a cache version id: {version!r} (expected {_VERSION.pattern})")
    return version


def check_model_version(model_version: str) -> str:
    if not _MODEL_VERSION.match(model_version):
        raise CacheFormatError(
            f"model version {model_version!r} must match {_MODEL_VERSION.pattern}"
        )
    return model_version


@dataclass(frozen=True)
class Codec:
    """The value codec of one version: ``dim`` little-endian half floats (``fp16``)."""

    name: str
    dim: int

    def __post_init__(self) -> None:
        if self.name != CODEC:
            raise CacheFormatError(f"unknown codec {self.name!r}; this format has {CODEC!r}")
        if not 0 < self.dim <= 65536:
            raise CacheFormatError(f"embedding dimension must be in 1..65536, got {self.dim}")

    @property
    def value_bytes(self) -> int:
        """Bytes of one stored value."""
        return 2 * self.dim

    def encode(self, embeddings: np.ndarray) -> list[bytes]:
        """One value per row of ``embeddings`` (n, dim), cast to fp16."""
        matrix = np.ascontiguousarray(np.asarray(embeddings).astype("<f2", copy=False))
        if matrix.ndim != 2 or matrix.shape[1] != self.dim:
            raise CacheFormatError(
                f"expected embeddings of shape (n, {self.dim}), got {matrix.shape}")
        size = self.value_bytes
        flat = matrix.tobytes()
        return [flat[i : i + size] for i in range(0, len(flat), size)]

    def decode(
        self, values: Sequence[bytes | None], fallback: np.ndarray | None = None,
        order: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """Decode HMGET replies into ``(embeddings (n, dim) float32, hit (n,) bool, corrupt)``.

        A None reply is a miss; a value of the wrong length or holding an inf or a nan is
        corrupt, counted and treated as a miss. Missed rows hold ``fallback`` (a (dim,) vector)
        or zeros. ``order`` (n,) ints: reply ``i`` is the value of row ``order[i]`` (the rows
        come back in that order, gathered as fp16 codes before they are widened); None: row i.
        """
        values = list(values)
        n, size = len(values), self.value_bytes
        zero = bytes(size)
        missing = None in values
        padded = [zero if v is None else v for v in values] if missing else values
        hit = (np.fromiter(map(bool, values), dtype=bool, count=n) if missing
               else np.ones(n, dtype=bool))
        corrupt = 0
        joined = b"".join(padded)
        if n and set(map(len, padded)) != {size}:  # every value's length, not only their sum
            hit = np.array([v is not None and len(v) == size for v in values], dtype=bool)
            corrupt = n - values.count(None) - int(hit.sum())
            joined = b"".join([v if ok else zero for v, ok in zip(values, hit, strict=True)])
        codes = np.frombuffer(joined, dtype="<u2").reshape(n, self.dim)
        if order is not None:
            rows = np.empty(n, np.intp)
            rows[order] = np.arange(n)
            codes, hit = codes[rows], hit[rows]
        out = np.take(_FP16_TO_FP32, codes)
        if not np.isfinite(out).all():  # an inf or a nan is never a value: corrupt, a miss
            finite = np.isfinite(out).all(axis=1)
            corrupt += int(np.count_nonzero(hit & ~finite))
            hit &= finite
            out[~finite] = 0.0
        if fallback is not None and not hit.all():
            out[~hit] = fallback
        return out, hit, corrupt


_FP16_TO_FP32 = np.arange(65536, dtype=np.uint16).view("<f2").astype(np.float32)  # 2x a cast


@dataclass(frozen=True)
class Manifest:
    """What ``P:m:<version>`` holds: enough for a reader to decode and for an operator to audit."""

    version: str
    model_version: str
    codec: str
    dim: int
    buckets: int
    interval_start: str
    interval_end: str
    pairs: int
    users: int
    digest: str
    ttl_s: int
    state: str = STATE_WRITING
    format: int = FORMAT_VERSION
    # The hierarchical fallback level: written (and read) only when ``fallback`` is "cluster".
    fallback: str = ""
    clusters: int = 0
    cluster_pairs: int = 0
    item_clusters: int = 0
    item_cluster_chunks: int = 0
    # The ITEM level (item priors): written (and read) only when ``item_priors`` > 0.
    item_priors: int = 0
    item_prior_chunks: int = 0

    @property
    def has_clusters(self) -> bool:
        """True when the version has users' cluster keys and ``P:h:`` an item -> cluster table
        (a level whose every value was non-finite ends with ``cluster_pairs`` 0: not served)."""
        return self.fallback == FALLBACK_CLUSTER and self.cluster_pairs > 0

    @property
    def has_priors(self) -> bool:
        """True when ``P:h:<version>:prior:<k>`` holds an item-prior table (the ITEM level)."""
        return self.item_priors > 0

    @property
    def value_codec(self) -> Codec:
        return Codec(self.codec, self.dim)

    @property
    def complete(self) -> bool:
        return self.state == STATE_COMPLETE

    def to_fields(self) -> dict[str, str]:
        """The hash fields, all as strings (the exact bytes are pinned by tests); the fallback
        fields only for a version with a fallback level, the prior fields only with priors."""
        out = {name: str(value) for name, value in asdict(self).items()}
        if self.fallback != FALLBACK_CLUSTER:
            for name in _FALLBACK_FIELDS:
                del out[name]
        if not self.has_priors:
            for name in _PRIOR_FIELDS:
                del out[name]
        return out

    @classmethod
    def from_fields(cls, raw: Mapping[bytes | str, bytes | str]) -> Manifest:
        """Parse an HGETALL reply; unknown formats and missing fields are a CacheFormatError."""
        if not isinstance(raw, Mapping):
            raise CacheFormatError(f"manifest is not a hash (got {type(raw).__name__})")
        try:
            text = {_text(k): _text(v) for k, v in raw.items()}
        except (UnicodeDecodeError, AttributeError) as exc:
            raise CacheFormatError(f"manifest holds a field that is not UTF-8 text: {exc}"
                                   ) from exc
        if not text:
            raise CacheFormatError("manifest is missing (expired or never written)")
        if text.get("format") != str(FORMAT_VERSION):
            raise CacheFormatError(
                f"manifest format {text.get('format')!r} is not {FORMAT_VERSION}: "
                "upgrade the reader"
            )
        try:
            values = {f.name: _typed(f.type, text[f.name]) for f in fields(cls)
                      if f.name not in _OPTIONAL_FIELDS or f.name in text}
        except KeyError as exc:
            raise CacheFormatError(f"manifest lacks field {exc.args[0]!r}") from exc
        except ValueError as exc:
            raise CacheFormatError(f"manifest has a malformed number: {exc}") from exc
        manifest = cls(**values)
        check_version(manifest.version)
        manifest.value_codec  # noqa: B018 - validates codec and dimension
        check_buckets(manifest.buckets)
        if manifest.fallback not in ("", FALLBACK_CLUSTER):
            raise CacheFormatError(f"manifest names an unknown fallback {manifest.fallback!r}")
        negative = [f.name for f in fields(cls) if f.type in (int, "int")
                    and getattr(manifest, f.name) < 0]
        if negative:
            raise CacheFormatError(f"manifest has negative counts: {', '.join(negative)}")
        return manifest


_FALLBACK_FIELDS = ("fallback", "clusters", "cluster_pairs", "item_clusters",
                    "item_cluster_chunks")
_PRIOR_FIELDS = ("item_priors", "item_prior_chunks")
_OPTIONAL_FIELDS = _FALLBACK_FIELDS + _PRIOR_FIELDS


def _text(value: bytes | str) -> str:
    if isinstance(value, str):
        return value
    return value.decode()  # bytes; anything else raises AttributeError


def chunk_count(items: int, chunk_items: int) -> int:
    """Chunks of a table of ``items`` rows cut every ``chunk_items`` (an empty table is one
    empty chunk): what a manifest's ``*_chunks`` field must say."""
    return max(1, -(-items // chunk_items))


def chunk_rows(items: int, chunk_items: int, chunk: int) -> int:
    """Rows of chunk ``chunk`` of a table of ``items`` rows cut every ``chunk_items``."""
    return max(0, min(chunk_items, items - chunk * chunk_items))


def _typed(annotation: object, text: str) -> object:
    return int(text) if annotation in (int, "int") else text
