"""Why a row is not published (rows.py), against rules written out by hand."""

import numpy as np
import pyarrow as pa
import pytest

from solaris_lib.cache.errors import PublishInputError
from solaris_lib.cache.rows import CLUSTER, EXACT, interpret, plain, published, row_codes


def _batch(users, items, versions, embeddings, id_column="item_id", id_type=None):
    return pa.RecordBatch.from_arrays(
        [pa.array(users, pa.int64()), pa.array(items, id_type or pa.int64()), pa.array(versions, pa.string()),
         pa.array(embeddings, pa.binary())],
        names=["user_id", id_column, "model_version", "embedding"])


def test_each_row_gets_its_first_problem_in_the_contracts_order():
    ok = b"\x00\x3c" * 2
    batch = _batch([1, None, -1, 1, 1, 1, 1, 1, None],
                   [1, 1, 1, None, -5, 1, 1, 1, -5],
                   ["m", "m", "m", "m", "m", "m", "m", None, None],
                   [ok, ok, ok, ok, ok, None, b"\x00" * 3, ok, None])
    codes, lengths = row_codes(batch, EXACT)
    names = [EXACT.problems[c] for c in codes]
    assert names == [None, "null_user_id", "negative_user_id", "null_item_id",
                     "negative_item_id", "null_embedding", "wrong_embedding_length",
                     "other_model_version", "null_user_id"]
    assert lengths.tolist() == [4, 4, 4, 4, 4, -1, 3, 4, -1]


def test_cluster_rows_name_their_id_column():
    batch = _batch([1, 1], [None, -2], ["m", "m"], [b"\x00\x3c"] * 2, "cluster_id", pa.int32())
    codes, _ = row_codes(batch, CLUSTER)
    assert [CLUSTER.problems[c] for c in codes] == ["null_cluster_id", "negative_cluster_id"]


def test_published_rows_have_the_chosen_version_and_length():
    batch = _batch([1, 1, 1, 1], [1, 2, 3, 4], ["m1", "m2", "m1", None],
                   [b"\x00" * 4, b"\x00" * 4, b"\x00" * 6, b"\x00" * 4])
    assert published(batch, EXACT, "m1", 2).tolist() == [True, False, False, False]


def _group(reason, version, size, rows, low=0, xor=0, scattered=0):
    return {"reason": reason, "model_version": version, "bytes": size, "rows": rows,
            "low": low, "xor": xor, "scattered": scattered}


def test_interpret_picks_the_majority_and_digests_only_its_rows():
    groups = [_group(None, "m1", 8, 10, low=5, xor=0b0110, scattered=2),
              _group(None, "m1", 8, 2, low=7, xor=0b0011),
              _group(None, "m1", 6, 3, low=100, xor=1),
              _group(None, "m2", 8, 9, low=100, xor=1),
              _group("null_user_id", None, None, 4)]
    found = interpret(groups, "here")
    assert (found.model_version, found.dim, found.rows, found.valid_rows) == ("m1", 4, 28, 12)
    assert found.refused == {"wrong_embedding_length": 3, "other_model_version": 9,
                             "null_user_id": 4}
    assert found.digest == f"{12:016x}{0b0101:016x}" and found.scattered == 2


def test_interpret_breaks_ties_by_model_version_name_and_takes_a_chosen_group():
    groups = [_group(None, "b", 4, 5), _group(None, "a", 4, 5)]
    assert interpret(groups, "here").model_version == "a"
    chosen = interpret(groups, "here", chosen=("b", 4))
    assert chosen.valid_rows == 5 and chosen.refused == {"other_model_version": 5}
    assert interpret([], "here", chosen=("b", 4)).valid_rows == 0


def test_nothing_publishable_or_odd_lengths_are_input_errors():
    with pytest.raises(PublishInputError, match="none of 4 rows"):
        interpret([_group("null_user_id", None, None, 4)], "here")
    with pytest.raises(PublishInputError, match="not fp16"):
        interpret([_group(None, "m", 5, 4)], "here")


def test_the_contract_types_and_dictionary_columns():
    good = pa.schema([("user_id", pa.int64()), ("item_id", pa.int64()),
                      ("model_version", pa.dictionary(pa.int32(), pa.string())),
                      ("embedding", pa.binary()), ("extra", pa.float32())])
    EXACT.check_schema("f", good)
    bad = pa.schema([("user_id", pa.string()), ("item_id", pa.int32())])
    with pytest.raises(PublishInputError, match="user_id is string, expected bigint; item_id "
                                                "is int, expected bigint; model_version is "
                                                "missing"):
        EXACT.check_schema("f", bad)
    batch = pa.RecordBatch.from_arrays([pa.array(["a", "b", "a"]).dictionary_encode()],
                                       names=["model_version"])
    assert plain(batch).column(0).to_pylist() == ["a", "b", "a"]
    assert plain(batch).schema.field(0).type == pa.string()
    assert np.array_equal(plain(batch).column(0), pa.array(["a", "b", "a"]))
