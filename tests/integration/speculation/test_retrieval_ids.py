"""ALS id indexing: int64 ids numbered densely in id order across partitions."""

import pytest

from solaris_lib.speculation.retrieval import _index_ids

pytestmark = pytest.mark.integration


def test_ids_are_numbered_densely_in_id_order_across_partitions(spark):
    users = [7, 2**40, 3, 99, 5]
    items = [2**35 + k for k in range(0, 600, 3)]
    rows = [(u, i, 1.0) for u in users for i in items]
    ratings = spark.createDataFrame(rows, "user_id long, item_id long, rating float").repartition(7)
    user_index, item_index = _index_ids(ratings)
    assert ([(r.user_id, r.u) for r in user_index.orderBy("u").collect()]
            == [(u, n) for n, u in enumerate(sorted(users))])
    assert ([(r.item_id, r.i) for r in item_index.orderBy("i").collect()]
            == [(i, n) for n, i in enumerate(sorted(items))])
    assert dict(item_index.dtypes)["i"] == "int"
    user_index.unpersist()
    item_index.unpersist()
