"""Which fallback tables a publish finds (checked once), and the warning when only one is there.

(The level itself is read with Spark: ``tests/integration/cache/test_fallback.py``.)
"""

import logging

from solaris_lib.cache.fallback import find_tables, read_fallback
from solaris_lib.intervals import Interval
from solaris_lib.layout import DataLayout

INTERVAL = Interval.parse("2026-01-05T10:00:00Z", "2026-01-05T11:00:00Z")


def _complete(root, table: str) -> str:
    """Mark ``embeddings/<table>/interval=20260105T100000Z`` complete; its folder."""
    folder = root / "embeddings" / table / "interval=20260105T100000Z"
    folder.mkdir(parents=True)
    (folder / "_SUCCESS").write_text("")
    return str(folder)


def test_no_tables_no_level_and_no_warning(tmp_path, caplog):
    tables = find_tables(DataLayout(str(tmp_path), str(tmp_path / "models")), INTERVAL)
    assert not tables.present and not any(tables.complete.values())
    with caplog.at_level(logging.WARNING):
        assert read_fallback(None, tables, "m1", 4) is None  # no Spark needed
    assert not caplog.records


def test_one_table_only_is_skipped_with_a_warning_naming_the_missing_one(tmp_path, caplog):
    cluster = _complete(tmp_path, "cluster")
    tables = find_tables(DataLayout(str(tmp_path), str(tmp_path / "models")), INTERVAL)
    assert tables.complete == {"cluster": True, "item_clusters": False}
    assert not tables.present
    with caplog.at_level(logging.WARNING):
        assert read_fallback(None, tables, "m1", 4) is None
    missing = str(tmp_path / "embeddings" / "item_clusters" / "interval=20260105T100000Z")
    assert f"{missing} is missing or incomplete" in caplog.text
    assert f"{cluster} is complete" in caplog.text


def test_both_tables_complete_are_present(tmp_path):
    _complete(tmp_path, "cluster")
    _complete(tmp_path, "item_clusters")
    tables = find_tables(DataLayout(str(tmp_path), str(tmp_path / "models")), INTERVAL)
    assert tables.present
    assert tables.prior_path == str(tmp_path / "embeddings" / "item_prior"
                                    / "interval=20260105T100000Z")
