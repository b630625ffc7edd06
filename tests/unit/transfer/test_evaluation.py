"""The transfer report's evaluation: FM recalibration, the headline's guard, the embedding share."""

import numpy as np
import pytest

from solaris_lib.evaluation.bootstrap import row_logloss
from solaris_lib.transfer.experiment import _embedding_share, calibrate_fm, headline


class Rows:
    """The two columns calibrate_fm reads."""

    def __init__(self, logits, labels):
        self.fm_logit, self.labels = np.asarray(logits, np.float64), np.asarray(labels)

    def __len__(self):
        return len(self.labels)


def test_calibration_fixes_a_scaled_fm_and_keeps_its_ranking():
    rng = np.random.default_rng(0)
    true = rng.normal(-1.5, 1.0, 40_000)
    labels = (rng.random(len(true)) < 1 / (1 + np.exp(-true))).astype(np.float32)
    raw = 3.0 * true + 1.0  # overconfident and shifted
    train, test = Rows(raw[:20_000], labels[:20_000]), Rows(raw[20_000:], labels[20_000:])
    fixed = calibrate_fm(train, test)
    assert np.array_equal(np.argsort(fixed), np.argsort(test.fm_logit))
    assert fixed == pytest.approx(true[20_000:], abs=0.1)
    y = labels[20_000:]
    assert row_logloss(y, fixed).mean() < row_logloss(y, test.fm_logit).mean() - 0.05


def test_calibration_without_both_classes_leaves_the_logits():
    train, test = Rows([0.1, 0.2], [0, 0]), Rows([0.5, -0.5], [1, 0])
    assert np.array_equal(calibrate_fm(train, test), test.fm_logit)


def test_embedding_share_from_mean_losses():
    assert _embedding_share(np.array([0.30, 0.29, 0.26])) == pytest.approx(0.75)
    assert _embedding_share(np.array([0.30, 0.25, 0.30])) is None  # solaris no better than plain


def _evaluation(fm_low: float) -> dict:
    gain = {"value": 0.01, "low": fm_low, "high": 0.02}
    return {"intervals": {"gain_over_plain": {"fm_calibrated": gain},
                          "transfer_ratio": {"solaris": {"value": 0.45, "low": 0.3, "high": 0.6}},
                          "embedding_share": {"value": 0.8, "low": 0.6, "high": 1.0}}}


def test_the_ratio_is_given_only_when_the_fm_gain_interval_is_above_zero():
    shown = headline(_evaluation(0.002))
    assert shown["transfer_ratio_logloss"] == 0.45
    assert shown["transfer_ratio_logloss_ci"] == [0.3, 0.6] and shown["transfer_ratio_note"] is None
    hidden = headline(_evaluation(-0.001))
    assert hidden["transfer_ratio_logloss"] is None and hidden["transfer_ratio_logloss_ci"] is None
    assert "[-0.00100, +0.02000], not above zero" in hidden["transfer_ratio_note"]
    assert hidden["embedding_share"] == 0.8


@pytest.mark.parametrize("model", ["foundation", "two_tower"])
def test_the_report_trains_any_shipped_model_of_the_contract(model):
    """``solaris report --fm-model``: the FM the report serves is the named contract model."""
    pytest.importorskip("torch")
    from datetime import timedelta

    from solaris_lib.model.contract import InteractionModel
    from solaris_lib.model.examples import build_examples
    from solaris_lib.transfer.config import TransferConfig
    from solaris_lib.transfer.experiment import train_foundation
    from tests.unit.model.test_examples import T0, _random_log

    examples = build_examples(_random_log(0))
    config = TransferConfig(fm_model=model, fm_preset="test", fm_epochs=1, threads=1)
    fm = train_foundation(examples, T0 + timedelta(hours=8), config)
    assert isinstance(fm.net, InteractionModel) and fm.version.startswith("transfer-")
    assert type(fm.net).__name__ == ("TwoTowerNet" if model == "two_tower" else "FoundationNet")
