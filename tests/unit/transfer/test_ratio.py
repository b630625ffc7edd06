"""Transfer-ratio arithmetic on constructed cases (expected values computed by hand)."""

import math

import pytest

from solaris_lib.transfer.ratio import transfer_ratio, transfer_ratios


def test_logloss_ratio_is_the_share_of_the_fm_gain():
    # plain 0.30, FM 0.20: gain 0.10; the variant at 0.26 keeps 0.04 of it
    assert transfer_ratio(0.30, 0.26, 0.20) == pytest.approx(0.4)
    assert transfer_ratio(0.30, 0.20, 0.20) == pytest.approx(1.0)
    assert transfer_ratio(0.30, 0.30, 0.20) == pytest.approx(0.0)


def test_worse_than_plain_is_negative_and_better_than_fm_above_one():
    assert transfer_ratio(0.30, 0.31, 0.20) == pytest.approx(-0.1)
    assert transfer_ratio(0.30, 0.18, 0.20) == pytest.approx(1.2)


def test_auc_ratio_uses_higher_is_better():
    # plain 0.60, FM 0.70: the variant at 0.66 keeps 60 % of the gain
    assert transfer_ratio(0.60, 0.66, 0.70, higher_is_better=True) == pytest.approx(0.6)
    assert transfer_ratio(0.60, 0.58, 0.70, higher_is_better=True) == pytest.approx(-0.2)


@pytest.mark.parametrize("plain,fm", [(0.30, 0.30), (0.30, 0.31), (0.30, 0.30 - 1e-15)])
def test_undefined_when_the_fm_is_no_better_than_plain(plain, fm):
    assert transfer_ratio(plain, 0.25, fm) is None


def test_undefined_auc_when_the_fm_is_no_better():
    assert transfer_ratio(0.70, 0.72, 0.70, higher_is_better=True) is None
    assert transfer_ratio(0.70, 0.72, 0.65, higher_is_better=True) is None


@pytest.mark.parametrize("bad", [math.nan, math.inf, None])
def test_nan_inputs_give_none(bad):
    assert transfer_ratio(bad, 0.25, 0.20) is None
    assert transfer_ratio(0.30, bad, 0.20) is None
    assert transfer_ratio(0.30, 0.25, bad) is None


def test_ratios_of_a_metrics_table():
    table = {"plain": {"logloss": 0.30, "auc": 0.60}, "solaris": {"logloss": 0.25, "auc": 0.64},
             "fm_online": {"logloss": 0.20, "auc": 0.70}}
    out = transfer_ratios(table, "solaris")
    assert out["logloss"] == pytest.approx(0.5)
    assert out["auc"] == pytest.approx(0.4)
