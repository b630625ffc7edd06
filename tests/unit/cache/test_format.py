"""The byte format of docs/cache-format.md, pinned byte for byte."""

import numpy as np
import pytest

from solaris_lib.cache.errors import CacheConfigError, CacheFormatError
from solaris_lib.cache.format import (
    Codec,
    Level,
    Manifest,
    alias_key,
    check_prefix,
    cluster_field,
    data_key,
    data_key_head,
    item_field,
    manifest_key,
    misses_key,
    version_id,
)

VERSION = "20260105T100000Z-961e7c475b"


def test_key_layout_is_pinned():
    assert alias_key("solaris") == "solaris:alias"
    assert manifest_key("solaris", VERSION) == "solaris:m:20260105T100000Z-961e7c475b"
    assert data_key("solaris", VERSION, 42) == "solaris:e:20260105T100000Z-961e7c475b:{42}"
    assert data_key_head("solaris", VERSION) + "42}" == data_key("solaris", VERSION, 42)
    assert misses_key("solaris") == "solaris:misses"


def test_fields_exact_items_are_decimal_and_cluster_fields_are_reserved():
    assert item_field(7) == "7"
    assert item_field(np.int64(1234567890123)) == "1234567890123"
    assert cluster_field(5) == "c5"
    assert not cluster_field(5).isdigit()  # can never collide with an item field


def test_prefix_must_not_break_the_key_grammar():
    assert check_prefix("solaris-test_1.x") == "solaris-test_1.x"
    for bad in ("a:b", "a{b}", "a b", ""):
        with pytest.raises(CacheConfigError):
            check_prefix(bad)


def test_version_id_is_pinned_and_deterministic():
    assert version_id("20260105T100000Z", "m1", "fp16", 64, "0" * 32) == VERSION
    variants = {
        version_id("20260105T100000Z", "m2", "fp16", 64, "0" * 32),
        version_id("20260105T100000Z", "m1", "fp32", 64, "0" * 32),
        version_id("20260105T100000Z", "m1", "fp16", 32, "0" * 32),
        version_id("20260105T100000Z", "m1", "fp16", 64, "1" + "0" * 31),
        version_id("20260105T110000Z", "m1", "fp16", 64, "0" * 32),
    }
    assert VERSION not in variants and len(variants) == 5


def test_version_ids_sort_by_interval():
    early = version_id("20260105T100000Z", "zzz", "fp16", 64, "f" * 32)
    late = version_id("20260105T110000Z", "aaa", "fp16", 64, "0" * 32)
    assert early[:16] < late[:16]


def test_model_version_with_key_grammar_characters_is_refused():
    with pytest.raises(CacheFormatError):
        version_id("20260105T100000Z", "m:1", "fp16", 64, "0" * 32)


def test_fp16_values_are_little_endian_half_floats():
    # 1.0 = 0x3C00, -2.0 = 0xC000, 0.5 = 0x3800, 65504 = 0x7BFF (max half), low byte first
    value = Codec("fp16", 4).encode(np.array([[1.0, -2.0, 0.5, 65504.0]]))[0]
    assert value == b"\x00\x3c\x00\xc0\x00\x38\xff\x7b"


def test_fp32_values_are_little_endian_floats():
    value = Codec("fp32", 2).encode(np.array([[1.0, -2.0]]))[0]
    assert value == b"\x00\x00\x80\x3f\x00\x00\x00\xc0"


def test_the_writer_conversion_from_fp16_matches_encode():
    fp16 = np.array([[1.0, -2.0], [0.5, 3.0]], "<f2")
    as_bytes = fp16.view(np.uint8)
    assert Codec("fp16", 2).from_fp16(as_bytes).tobytes() == fp16.tobytes()
    wide = Codec("fp32", 2)
    assert [r.tobytes() for r in wide.from_fp16(as_bytes)] == wide.encode(fp16.astype(float))


def test_decode_places_hits_and_fallback_rows():
    codec = Codec("fp16", 2)
    one, two = b"\x00\x3c\x00\xc0", b"\x00\x38\x00\x38"  # [1, -2], [0.5, 0.5]
    embeddings, hit, corrupt = codec.decode([one, None, two], fallback=np.array([9.0, 9.0]))
    assert embeddings.dtype == np.float32 and embeddings.shape == (3, 2)
    assert embeddings.tolist() == [[1.0, -2.0], [9.0, 9.0], [0.5, 0.5]]
    assert hit.tolist() == [True, False, True] and corrupt == 0


def test_decode_counts_values_of_the_wrong_length_as_corrupt_misses():
    codec = Codec("fp16", 2)
    embeddings, hit, corrupt = codec.decode([b"\x00\x3c\x00\xc0", b"\x00", b"\x00\x3c" * 3])
    assert hit.tolist() == [True, False, False] and corrupt == 2
    assert embeddings.tolist() == [[1.0, -2.0], [0.0, 0.0], [0.0, 0.0]]


def test_decode_of_all_misses_and_of_nothing():
    embeddings, hit, _ = Codec("fp16", 3).decode([None, None])
    assert embeddings.tolist() == [[0.0] * 3] * 2 and not hit.any()
    assert Codec("fp16", 3).decode([])[0].shape == (0, 3)


def test_codec_rejects_unknown_names_and_shapes():
    with pytest.raises(CacheFormatError):
        Codec("int8", 4)
    with pytest.raises(CacheFormatError):
        Codec("fp16", 0)
    with pytest.raises(CacheFormatError):
        Codec("fp16", 4).encode(np.zeros((2, 3)))


def _manifest(**changes):
    fields = dict(version=VERSION, model_version="m1", codec="fp16", dim=64,
                  interval_start="2026-01-05T10:00:00+00:00",
                  interval_end="2026-01-05T11:00:00+00:00", pairs=10, users=2,
                  digest="ab" * 16, ttl_s=10800, state="complete")
    fields.update(changes)
    return Manifest(**fields)


def test_manifest_fields_are_pinned():
    assert _manifest().to_fields() == {
        "version": VERSION, "model_version": "m1", "codec": "fp16", "dim": "64",
        "interval_start": "2026-01-05T10:00:00+00:00",
        "interval_end": "2026-01-05T11:00:00+00:00", "pairs": "10", "users": "2",
        "digest": "ab" * 16, "ttl_s": "10800", "state": "complete", "format": "1",
    }


def test_manifest_round_trips_from_an_hgetall_reply():
    raw = {k.encode(): v.encode() for k, v in _manifest().to_fields().items()}
    parsed = Manifest.from_fields(raw)
    assert parsed == _manifest() and parsed.complete
    assert parsed.value_codec == Codec("fp16", 64)


@pytest.mark.parametrize("change, message", [
    ({"format": "2"}, "format"),
    ({"dim": "x"}, "malformed"),
    ({"codec": "int4"}, "codec"),
    ({"version": "v1"}, "version id"),
])
def test_manifest_problems_are_format_errors(change, message):
    raw = {**_manifest().to_fields(), **change}
    with pytest.raises(CacheFormatError, match=message):
        Manifest.from_fields(raw)


def test_missing_manifest_or_field_is_a_format_error():
    with pytest.raises(CacheFormatError, match="missing"):
        Manifest.from_fields({})
    raw = _manifest().to_fields()
    del raw["dim"]
    with pytest.raises(CacheFormatError, match="dim"):
        Manifest.from_fields(raw)


def test_levels_are_pinned():
    assert (Level.MISS, Level.EXACT, Level.CLUSTER) == (0, 1, 2)
