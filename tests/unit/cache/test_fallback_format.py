"""Exact bytes of the hierarchical fallback level (docs/cache-format.md): the item -> cluster
chunks, the cluster hash the writer sends, the manifest fields, the client's levels."""

import hiredis
import numpy as np
import pytest

from solaris_lib.cache import pairs
from solaris_lib.cache.errors import CacheFormatError
from solaris_lib.cache.format import (
    Codec,
    Manifest,
    item_clusters_key,
    item_priors_key,
    pack_item_clusters,
    pack_item_priors,
    unpack_item_clusters,
    unpack_item_priors,
    version_id,
)
from solaris_lib.client._clusters import ItemPriors, fallback_levels
from solaris_lib.fallback import ItemClusters, Level

VERSION = "20260105T100000Z-f7cd540c01"


def test_item_cluster_key_is_pinned():
    assert item_clusters_key("solaris", VERSION, 0) == f"solaris:h:{VERSION}:items:0"
    assert item_clusters_key("p", VERSION, 12) == f"p:h:{VERSION}:items:12"


def test_item_cluster_chunk_bytes_are_pinned():
    (chunk,) = pack_item_clusters(np.array([3, 10, 2**40]), np.array([1, 0, 7]))
    assert chunk.hex() == (
        "0300000000000000" "0a00000000000000" "0000000000010000"  # int64 LE item ids
        "01000000" "00000000" "07000000"                           # int32 LE cluster ids
    )
    assert len(chunk) == 36


def test_item_cluster_table_is_chunked_in_order():
    items, clusters = np.array([1, 2, 5, 9, 11]), np.array([4, 4, 0, 1, 2])
    chunks = pack_item_clusters(items, clusters, chunk_items=2)
    assert [len(c) for c in chunks] == [24, 24, 12]
    assert chunks[2] == (11).to_bytes(8, "little") + (2).to_bytes(4, "little")
    ids, cids = unpack_item_clusters(chunks, 5)
    assert ids.tolist() == items.tolist() and cids.tolist() == clusters.tolist()
    assert ids.dtype == np.int64 and cids.dtype == np.int32
    assert pack_item_clusters(np.zeros(0, np.int64), np.zeros(0, np.int32)) == [b""]


@pytest.mark.parametrize("chunks, count, message", [
    ([None], 0, "missing"),
    ([b"\x00" * 13], 1, "malformed"),
    ([pack_item_clusters(np.array([1, 2]), np.array([0, 0]))[0]], 3, "manifest says 3"),
    ([pack_item_clusters(np.array([5]), np.array([0]))[0],
      pack_item_clusters(np.array([4]), np.array([0]))[0]], 2, "not sorted"),
])
def test_malformed_item_cluster_tables_are_format_errors(chunks, count, message):
    with pytest.raises(CacheFormatError, match=message):
        unpack_item_clusters(chunks, count)


def test_packing_refuses_unsorted_or_negative_ids():
    with pytest.raises(CacheFormatError):
        pack_item_clusters(np.array([2, 1]), np.array([0, 0]))
    with pytest.raises(CacheFormatError):
        pack_item_clusters(np.array([1, 2]), np.array([0, -1]))


def test_cluster_rows_are_decimal_fields_of_the_users_cluster_hash():
    values = np.array([[1, 2], [3, 4], [5, 6]], dtype=np.uint8)
    key = f"p:e:{VERSION}:{{3}}:c".encode()
    (pieces,) = pairs.hset_pieces([key], np.array([0]), np.array([0, 7, 12]), values)
    assert b"".join(pieces) == hiredis.pack_command(
        ("HSET", key, "0", b"\x01\x02", "7", b"\x03\x04", "12", b"\x05\x06"))


def _manifest(**changes):
    fields = dict(version=VERSION, model_version="m1", codec="fp16", dim=64, buckets=4,
                  interval_start="2026-01-05T10:00:00+00:00",
                  interval_end="2026-01-05T11:00:00+00:00", pairs=10, users=2,
                  digest="ab" * 16, ttl_s=10800, state="complete")
    fields.update(changes)
    return Manifest(**fields)


def test_manifest_fallback_fields_are_pinned():
    manifest = _manifest(fallback="cluster", clusters=3, cluster_pairs=6, item_clusters=40,
                         item_cluster_chunks=1)
    fields = manifest.to_fields()
    assert {k: fields[k] for k in ("fallback", "clusters", "cluster_pairs", "item_clusters",
                                   "item_cluster_chunks", "format")} == {
        "fallback": "cluster", "clusters": "3", "cluster_pairs": "6", "item_clusters": "40",
        "item_cluster_chunks": "1", "format": "2"}
    parsed = Manifest.from_fields({k.encode(): v.encode() for k, v in fields.items()})
    assert parsed == manifest and parsed.has_clusters


def test_a_manifest_without_the_level_has_no_fallback_fields():
    fields = _manifest().to_fields()
    assert "fallback" not in fields and "clusters" not in fields
    parsed = Manifest.from_fields(fields)
    assert not parsed.has_clusters and parsed.item_cluster_chunks == 0
    with pytest.raises(CacheFormatError, match="fallback"):
        Manifest.from_fields({**fields, "fallback": "users"})


def test_version_id_hashes_the_fallback_only_when_there_is_one():
    plain = version_id("20260105T100000Z", "m1", 64, 4, "ab" * 16)
    assert version_id("20260105T100000Z", "m1", 64, 4, "ab" * 16, "") == plain
    assert version_id("20260105T100000Z", "m1", 64, 4, "ab" * 16, "cd" * 20) != plain


def test_item_clusters_lookup():
    table = ItemClusters(np.array([2, 5, 9], np.int64), np.array([1, 0, 1], np.int32))
    assert table.of(np.array([9, 1, 5, 10, 2])).tolist() == [1, -1, 0, -1, 1]
    clusters, distinct = table.fields(np.array([9, 1, 2, 5]))
    assert clusters.tolist() == [1, -1, 1, 0] and distinct.tolist() == [0, 1]
    empty = ItemClusters(np.zeros(0, np.int64), np.zeros(0, np.int32))
    assert empty.of(np.array([1])).tolist() == [-1]


def test_merge_fills_exact_misses_from_their_cluster():
    codec = Codec("fp16", 2)
    exact = [b"\x00\x3c\x00\x3c", None, None, None, None]  # [1, 1], then four misses
    embeddings, hit, _ = codec.decode(exact, np.array([9.0, 9.0], np.float32))
    clusters = np.array([0, 0, 1, -1, 2])
    distinct = np.array([0, 1, 2])
    values = [b"\x00\x40\x00\x40", None, b"\x00"]  # c0 = [2, 2]; c1 absent; c2 malformed
    level, rows, item_rows, corrupt = fallback_levels(codec, embeddings, hit, np.arange(5),
                                                      (clusters, distinct, values))
    assert level.tolist() == [Level.EXACT, Level.CLUSTER, Level.MISS, Level.MISS, Level.MISS]
    assert embeddings.tolist() == [[1, 1], [2, 2], [9, 9], [9, 9], [9, 9]]
    assert (rows, item_rows, corrupt) == (1, 0, 1)
    assert hit.tolist() == [True, False, False, False, False]


# -- the ITEM level: item priors ----------------------------------------------------------------


def test_item_prior_key_is_pinned():
    assert item_priors_key("solaris", VERSION, 0) == f"solaris:h:{VERSION}:prior:0"
    assert item_priors_key("p", VERSION, 3) == f"p:h:{VERSION}:prior:3"


def test_item_prior_chunk_bytes_are_pinned():
    # dim 2 fp16: item 3 -> [1.0, -2.0], item 2^40 -> [0.5, 65504.0]
    values = np.frombuffer(bytes.fromhex("003c00c0" "0038ff7b"), np.uint8).reshape(2, 4)
    (chunk,) = pack_item_priors(np.array([3, 2**40]), values)
    assert chunk.hex() == (
        "0300000000000000" "0000000000010000"  # int64 LE item ids
        "003c00c0" "0038ff7b"                  # the values, in the same order
    )
    ids, back = unpack_item_priors([chunk], 2, 4)
    assert ids.tolist() == [3, 2**40] and back.tobytes() == values.tobytes()


def test_item_prior_table_is_chunked_in_order():
    values = np.arange(10, dtype=np.uint8).reshape(5, 2)
    chunks = pack_item_priors(np.array([1, 2, 5, 9, 11]), values, chunk_items=2)
    assert [len(c) for c in chunks] == [20, 20, 10]
    assert chunks[2] == (11).to_bytes(8, "little") + bytes([8, 9])
    ids, back = unpack_item_priors(chunks, 5, 2)
    assert ids.tolist() == [1, 2, 5, 9, 11] and back.tolist() == values.tolist()
    assert pack_item_priors(np.zeros(0, np.int64), np.zeros((0, 2), np.uint8)) == [b""]


@pytest.mark.parametrize("chunks, count, message", [
    ([None], 0, "missing"),
    ([b"\x00" * 11], 1, "malformed"),
    ([pack_item_priors(np.array([1]), np.zeros((1, 2), np.uint8))[0]], 2, "manifest says 2"),
    ([pack_item_priors(np.array([5]), np.zeros((1, 2), np.uint8))[0],
      pack_item_priors(np.array([4]), np.zeros((1, 2), np.uint8))[0]], 2, "not sorted"),
])
def test_malformed_item_prior_tables_are_format_errors(chunks, count, message):
    with pytest.raises(CacheFormatError, match=message):
        unpack_item_priors(chunks, count, 2)


def test_packing_priors_refuses_unsorted_ids_or_mismatched_values():
    with pytest.raises(CacheFormatError):
        pack_item_priors(np.array([2, 1]), np.zeros((2, 2), np.uint8))
    with pytest.raises(CacheFormatError):
        pack_item_priors(np.array([1, 2]), np.zeros((3, 2), np.uint8))


def test_manifest_prior_fields_are_pinned_and_absent_without_the_level():
    manifest = _manifest(fallback="cluster", clusters=3, cluster_pairs=6, item_clusters=40,
                         item_cluster_chunks=1, item_priors=40, item_prior_chunks=1)
    fields = manifest.to_fields()
    assert (fields["item_priors"], fields["item_prior_chunks"]) == ("40", "1")
    parsed = Manifest.from_fields({k.encode(): v.encode() for k, v in fields.items()})
    assert parsed == manifest and parsed.has_priors
    without = _manifest(fallback="cluster", clusters=3, cluster_pairs=6, item_clusters=40,
                        item_cluster_chunks=1).to_fields()
    assert "item_priors" not in without and "item_prior_chunks" not in without
    assert not Manifest.from_fields(without).has_priors


def test_level_codes_are_pinned():
    assert (Level.MISS, Level.EXACT, Level.CLUSTER, Level.ITEM) == (0, 1, 2, 3)


def test_priors_fill_only_rows_still_missing():
    codec = Codec("fp16", 2)
    priors = ItemPriors(np.array([5, 9], np.int64), np.array([[1, 1], [2, 2]], np.float32))
    items = np.array([9, 5, 7, 5])  # 9 and 5 have priors, 7 has none
    exact = [b"\x00\x47\x00\x47", None, None, None]  # [7, 7], then three misses
    embeddings, hit, _ = codec.decode(exact, np.zeros(2, np.float32))
    clusters, distinct = np.array([0, 0, -1, 1]), np.array([0, 1])
    values = [b"\x00\x48\x00\x48", None]  # c0 = [8, 8]; c1 absent
    level, cluster_rows, item_rows, corrupt = fallback_levels(
        codec, embeddings, hit, items, (clusters, distinct, values), priors)
    assert level.tolist() == [Level.EXACT, Level.CLUSTER, Level.MISS, Level.ITEM]
    assert embeddings.tolist() == [[7, 7], [8, 8], [0, 0], [1, 1]]
    assert (cluster_rows, item_rows, corrupt) == (1, 1, 0)
    empty = ItemPriors(np.zeros(0, np.int64), np.zeros((0, 2), np.float32))
    level, _, item_rows, _ = fallback_levels(codec, np.zeros((4, 2), np.float32),
                                             np.zeros(4, bool), items, priors=empty)
    assert level.tolist() == [Level.MISS] * 4 and item_rows == 0
