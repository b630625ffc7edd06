"""The byte format of docs/cache-format.md (format 2), pinned byte for byte."""

import hashlib

import numpy as np
import pytest

from solaris_lib.cache.errors import CacheConfigError, CacheFormatError
from solaris_lib.cache.format import (
    Codec,
    Manifest,
    alias_key,
    bucket_key,
    bucket_of,
    check_buckets,
    check_prefix,
    cluster_key,
    manifest_key,
    misses_key,
    user_key_head,
    version_id,
)
from solaris_lib.fallback import Level

VERSION = "20260105T100000Z-f7cd540c01"


def test_key_layout_is_pinned():
    assert alias_key("solaris") == "solaris:alias"
    assert manifest_key("solaris", VERSION) == f"solaris:m:{VERSION}"
    assert bucket_key("solaris", VERSION, 42, 3) == f"solaris:e:{VERSION}:{{42}}:3"
    assert cluster_key("solaris", VERSION, 42) == f"solaris:e:{VERSION}:{{42}}:c"
    assert user_key_head("solaris", VERSION) + "42}:0" == bucket_key("solaris", VERSION, 42, 0)
    assert misses_key("solaris") == "solaris:misses"


def test_a_users_keys_share_its_hash_tag():
    from redis.crc import key_slot

    slots = {key_slot(k.encode()) for k in [bucket_key("p", VERSION, 42, b) for b in range(8)]
             + [cluster_key("p", VERSION, 42)]}
    assert slots == {key_slot(b"42")}


def test_bucket_of_is_fibonacci_hashing_pinned():
    ids = [0, 1, 2, 3, 7, 42, 10**8, 2**62, 2**63 - 1]
    for buckets in (2, 4, 8, 64):
        shift = 64 - buckets.bit_length() + 1
        want = [(i * 0x9E3779B97F4A7C15) % 2**64 >> shift for i in ids]
        assert bucket_of(np.array(ids), buckets).tolist() == want
    assert bucket_of(np.array([0, 1, 2]), 4).tolist() == [0, 2, 0]
    assert bucket_of(np.array(ids), 1).tolist() == [0] * len(ids)


def test_buckets_spread_ids_of_any_structure_evenly():
    for ids in (np.arange(40_000), np.arange(0, 40_000 * 64, 64), np.arange(40_000) << 20):
        counts = np.bincount(bucket_of(ids, 8), minlength=8)
        assert counts.min() > 0.9 * counts.mean(), counts


@pytest.mark.parametrize("bad", [0, 3, 6, 128, -2])
def test_bucket_counts_are_powers_of_two_up_to_64(bad):
    assert check_buckets(64) == 64 and check_buckets(1) == 1
    with pytest.raises(CacheFormatError, match="power of two"):
        check_buckets(bad)


def test_prefix_must_not_break_the_key_grammar():
    assert check_prefix("solaris-test_1.x") == "solaris-test_1.x"
    for bad in ("a:b", "a{b}", "a b", ""):
        with pytest.raises(CacheConfigError):
            check_prefix(bad)


def test_version_id_is_pinned_and_deterministic():
    material = "\0".join(["2", "m1", "fp16", "64", "4", "0" * 32]).encode()
    assert VERSION == "20260105T100000Z-" + hashlib.blake2b(material, digest_size=5).hexdigest()
    assert version_id("20260105T100000Z", "m1", 64, 4, "0" * 32) == VERSION
    variants = {
        version_id("20260105T100000Z", "m2", 64, 4, "0" * 32),
        version_id("20260105T100000Z", "m1", 32, 4, "0" * 32),
        version_id("20260105T100000Z", "m1", 64, 8, "0" * 32),
        version_id("20260105T100000Z", "m1", 64, 4, "1" + "0" * 31),
        version_id("20260105T110000Z", "m1", 64, 4, "0" * 32),
        version_id("20260105T100000Z", "m1", 64, 4, "0" * 32, "ff" * 16),
    }
    assert VERSION not in variants and len(variants) == 6


def test_version_ids_sort_by_interval():
    early = version_id("20260105T100000Z", "zzz", 64, 4, "f" * 32)
    late = version_id("20260105T110000Z", "aaa", 64, 4, "0" * 32)
    assert early[:16] < late[:16]


def test_model_version_with_key_grammar_characters_is_refused():
    with pytest.raises(CacheFormatError):
        version_id("20260105T100000Z", "m:1", 64, 4, "0" * 32)


def test_fp16_values_are_little_endian_half_floats():
    # 1.0 = 0x3C00, -2.0 = 0xC000, 0.5 = 0x3800, 65504 = 0x7BFF (max half), low byte first
    value = Codec("fp16", 4).encode(np.array([[1.0, -2.0, 0.5, 65504.0]]))[0]
    assert value == b"\x00\x3c\x00\xc0\x00\x38\xff\x7b"
    assert Codec("fp16", 4).value_bytes == 8


def test_decode_places_hits_and_fallback_rows():
    codec = Codec("fp16", 2)
    one, two = b"\x00\x3c\x00\xc0", b"\x00\x38\x00\x38"  # [1, -2], [0.5, 0.5]
    embeddings, hit, corrupt = codec.decode([one, None, two], fallback=np.array([9.0, 9.0]))
    assert embeddings.dtype == np.float32 and embeddings.shape == (3, 2)
    assert embeddings.tolist() == [[1.0, -2.0], [9.0, 9.0], [0.5, 0.5]]
    assert hit.tolist() == [True, False, True] and corrupt == 0


def test_decode_puts_each_reply_in_the_row_that_order_names():
    # replies in bucket order: reply i is row order[i]; a miss, a short value and an inf among them
    codec = Codec("fp16", 2)
    one, two, inf = b"\x00\x3c\x00\xc0", b"\x00\x38\x00\x38", b"\x00\x7c\x00\x3c"
    replies = [two, None, one, b"\x00", inf]
    order = np.array([3, 0, 4, 1, 2])
    embeddings, hit, corrupt = codec.decode(replies, np.array([9.0, 9.0]), order)
    assert embeddings.tolist() == [[9.0, 9.0], [9.0, 9.0], [9.0, 9.0], [0.5, 0.5], [1.0, -2.0]]
    assert hit.tolist() == [False, False, False, True, True] and corrupt == 2
    plain, plain_hit, _ = codec.decode(replies)  # without order: the replies' own order
    assert np.array_equal(embeddings[order], np.where(plain_hit[:, None], plain, 9.0))


def test_decode_counts_values_of_the_wrong_length_as_corrupt_misses():
    codec = Codec("fp16", 2)
    embeddings, hit, corrupt = codec.decode([b"\x00\x3c\x00\xc0", b"\x00", b"\x00\x3c" * 3])
    assert hit.tolist() == [True, False, False] and corrupt == 2
    assert embeddings.tolist() == [[1.0, -2.0], [0.0, 0.0], [0.0, 0.0]]


def test_decode_finds_wrong_lengths_whose_total_is_right():
    one, bad_long, bad_short = b"\x00\x3c\x00\xc0", b"\x00\x3c" * 3, b"\x00\x38"
    embeddings, hit, corrupt = Codec("fp16", 2).decode([bad_long, one, bad_short])  # 6+4+2 = 3x4
    assert hit.tolist() == [False, True, False] and corrupt == 2
    assert embeddings.tolist() == [[0.0, 0.0], [1.0, -2.0], [0.0, 0.0]]


def test_decode_of_all_misses_and_of_nothing():
    embeddings, hit, _ = Codec("fp16", 3).decode([None, None])
    assert embeddings.tolist() == [[0.0] * 3] * 2 and not hit.any()
    assert Codec("fp16", 3).decode([])[0].shape == (0, 3)


def test_decode_equals_numpys_cast_on_every_half():
    halves = np.arange(65536, dtype=np.uint16)
    finite = halves[(halves & 0x7C00) != 0x7C00]
    values = [row.tobytes() for row in finite.reshape(-1, 2)]
    decoded, hit, _ = Codec("fp16", 2).decode(values)
    assert hit.all()
    assert np.array_equal(decoded.ravel(), finite.view("<f2").astype(np.float32))


def test_codec_rejects_unknown_names_and_shapes():
    for name in ("fp32", "int8"):
        with pytest.raises(CacheFormatError, match="codec"):
            Codec(name, 4)
    with pytest.raises(CacheFormatError):
        Codec("fp16", 0)
    with pytest.raises(CacheFormatError):
        Codec("fp16", 4).encode(np.zeros((2, 3)))


def _manifest(**changes):
    fields = dict(version=VERSION, model_version="m1", codec="fp16", dim=64, buckets=4,
                  interval_start="2026-01-05T10:00:00+00:00",
                  interval_end="2026-01-05T11:00:00+00:00", pairs=10, users=2,
                  digest="ab" * 16, ttl_s=10800, state="complete")
    fields.update(changes)
    return Manifest(**fields)


def test_manifest_fields_are_pinned():
    assert _manifest().to_fields() == {
        "version": VERSION, "model_version": "m1", "codec": "fp16", "dim": "64",
        "buckets": "4", "interval_start": "2026-01-05T10:00:00+00:00",
        "interval_end": "2026-01-05T11:00:00+00:00", "pairs": "10", "users": "2",
        "digest": "ab" * 16, "ttl_s": "10800", "state": "complete", "format": "2",
    }


def test_manifest_round_trips_from_an_hgetall_reply():
    raw = {k.encode(): v.encode() for k, v in _manifest().to_fields().items()}
    parsed = Manifest.from_fields(raw)
    assert parsed == _manifest() and parsed.complete
    assert parsed.value_codec == Codec("fp16", 64)


@pytest.mark.parametrize("change, message", [
    ({"format": "1"}, "format"),
    ({"dim": "x"}, "malformed"),
    ({"codec": "int4"}, "codec"),
    ({"version": "v1"}, "version id"),
    ({"buckets": "3"}, "power of two"),
])
def test_manifest_problems_are_format_errors(change, message):
    raw = {**_manifest().to_fields(), **change}
    with pytest.raises(CacheFormatError, match=message):
        Manifest.from_fields(raw)


def test_missing_manifest_or_field_is_a_format_error():
    with pytest.raises(CacheFormatError, match="missing"):
        Manifest.from_fields({})
    for name in ("dim", "buckets"):
        raw = _manifest().to_fields()
        del raw[name]
        with pytest.raises(CacheFormatError, match=name):
            Manifest.from_fields(raw)


def test_levels_are_pinned():
    assert (Level.MISS, Level.EXACT, Level.CLUSTER, Level.ITEM) == (0, 1, 2, 3)
