"""The report's Markdown and PNG from a constructed report (None ratios render as n/a)."""

import json

from solaris_lib.transfer.output import markdown, write_outputs

VARIANTS = ("plain", "distilled", "solaris", "solaris_fallback", "fm_online")
CI = {"value": 0.012, "low": 0.004, "high": 0.02}


def _report():
    return {
        "periods": {"fm": ["a", "b"], "ranker": ["b", "c"], "test": ["c", "d"]},
        "train_rows": 10, "test_rows": 5, "test_ctr": 0.2, "fm_version": "v",
        "logloss": dict(zip(VARIANTS, (0.30, 0.29, 0.26, 0.25, 0.20), strict=True)),
        "auc": dict(zip(VARIANTS, (0.60, 0.62, 0.66, 0.67, 0.70), strict=True)),
        "transfer_ratios": {"distilled": {"logloss": 0.1, "auc": 0.2},
                            "solaris": {"logloss": 0.4, "auc": None},
                            "solaris_fallback": {"logloss": 0.5, "auc": 0.7}},
        "solaris_beats_distilled": True, "reference": "fm_online",
        "solaris_over_distilled": {"value": 0.003, "low": 0.001, "high": 0.005},
        "variants": {"solaris": {"gain_over_plain": CI,
                                 "transfer_ratio": {"value": 0.4, "low": 0.25, "high": 0.55}}},
        "transfer_ratio_logloss": 0.4, "transfer_ratio_logloss_ci": [0.25, 0.55],
        "embedding_share": 0.7, "embedding_share_ci": [0.5, 0.9],
        "coverage_by_level": {"exact": 0.8, "cluster": 0.15, "item": 0.03, "miss": 0.02},
        "miss_by_cause": {"user_only": 0.04, "item_only": 0.01, "user_and_item": 0.0},
        "coverage": 0.8, "coverage_with_fallback": 0.98,
        "staleness_p50_min": 170.0, "staleness_p99_min": 355.0,
        "exact_hit_auc": dict(zip(VARIANTS, (0.6, 0.6, 0.7, 0.7, 0.7), strict=True)),
        "exact_hit_auc_delta": {"delta": -0.001, "low": -0.004, "high": 0.002, "rows": 3},
        "intervals": [{"interval": "K", "test": True, "pairs": 3, "users": 1, "scorer": "learned",
                       "rows": 5, "exact": 2, "cluster": 1, "item": 1, "miss": 1}],
    }


def test_markdown_tables():
    md = markdown(_report())
    assert ("| solaris | 0.26000 | 0.6600 | +0.01200 [+0.00400, +0.02000] "
            "| 0.400 [0.250, 0.550] |") in md
    assert "| plain | 0.30000 | 0.6000 | n/a | 0 (reference) |" in md
    assert "| fm_online | 0.20000 | 0.7000 | n/a | 1 (reference) |" in md
    assert "0.400, 95 % interval [0.250, 0.550]" in md and "share of that gain" in md
    assert "+0.00300 [+0.00100, +0.00500]" in md
    assert "| item | 0.0300 |" in md and "| coverage with fallback | 0.9800 |" in md
    assert "user only unknown 0.0400, item only unknown 0.0100" in md
    assert "| K | test | 3 | 1 | learned | 5 | 2 | 1 | 1 | 1 |" in md
    assert "(solaris_fallback - solaris): -0.0010, 95 % paired bootstrap interval [-0.0040, " \
        "+0.0020] over 3 rows." in md


def test_write_outputs(tmp_path):
    paths = write_outputs(_report(), str(tmp_path / "out"))
    assert json.loads(open(paths["json"]).read())["coverage"] == 0.8
    with open(paths["png"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_no_ratio_is_printed_without_an_fm_gain():
    report = _report()
    report.update(transfer_ratio_logloss=None, transfer_ratio_logloss_ci=None,
                  transfer_ratio_note="no ratio: the FM's log-loss gain over plain is -0.00100")
    md = markdown(report)
    assert "Transfer ratio (log-loss): no ratio: the FM's log-loss gain" in md
