"""The training recipe's parts: early stopping, the schedule, the validation slice, the
recency baseline's features and fit."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from solaris_lib.model.config import FoundationConfig  # noqa: E402
from solaris_lib.model.examples import EventLists, Examples, decayed_counts  # noqa: E402
from solaris_lib.model.recency import fit_logistic  # noqa: E402
from solaris_lib.model.train import (  # noqa: E402
    EarlyStopping,
    _epoch,
    _optimizer,
    _schedule,
    network_of,
)

HOUR_US = 3_600_000_000


def test_early_stopping_keeps_the_best_epoch_of_a_planted_curve():
    module = torch.nn.Linear(1, 1)
    stopping = EarlyStopping(patience=2)
    curve = [0.50, 0.40, 0.45, 0.38, 0.39, 0.41, 0.30]  # best 0.38 at epoch 4, then 2 worse
    stopped_at = None
    for epoch, loss in enumerate(curve, start=1):
        with torch.no_grad():
            module.weight.fill_(float(epoch))  # the weights say which epoch made them
        if stopping.step(epoch, loss, module):
            stopped_at = epoch
            break
    assert stopped_at == 6 and stopping.best_epoch == 4 and stopping.best == 0.38
    stopping.restore(module)
    assert module.weight.item() == 4.0


def test_without_validation_the_last_epoch_is_kept():
    module = torch.nn.Linear(1, 1)
    stopping = EarlyStopping(patience=1)
    for epoch in (1, 2, 3):
        with torch.no_grad():
            module.weight.fill_(float(epoch))
        assert not stopping.step(epoch, None, module)
    stopping.restore(module)
    assert stopping.best_epoch == 3 and module.weight.item() == 3.0


def test_schedule_warms_up_then_decays_to_five_percent():
    cfg = FoundationConfig.preset("test", warmup_share=0.1)
    factor = _schedule(cfg, 100)
    assert [round(factor(s), 6) for s in range(10)] == [round((s + 1) / 10, 6) for s in range(10)]
    assert factor(10) == pytest.approx(1.0)
    assert factor(55) == pytest.approx(0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert factor(100) == pytest.approx(0.05)
    values = [factor(s) for s in range(10, 101)]
    assert all(a >= b for a, b in zip(values, values[1:], strict=False))


@pytest.mark.parametrize("time_ordered", [True, False])
def test_an_epoch_reads_requests_oldest_first(monkeypatch, time_ordered):
    """Time-ordered training ends on the newest requests (as a streaming trainer does)."""
    rng = np.random.default_rng(3)
    n = 40
    ts = rng.permutation(n).astype(np.int64) * HOUR_US
    examples = Examples(EventLists.empty(), np.arange(n), ts, np.zeros(n, np.int64),
                        np.zeros(n, np.int64), np.arange(n + 1), np.arange(n),
                        (np.arange(n) % 3 == 0).astype(np.float32), np.arange(n))
    seen = []
    batch = Examples.batch
    monkeypatch.setattr(Examples, "batch",
                        lambda self, rows, *a: seen.extend(rows.tolist()) or batch(self, rows, *a))
    cfg = FoundationConfig.preset("test", batch_requests=8, time_ordered=time_ordered)
    net = network_of(cfg)
    opt = _optimizer(net, cfg)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _schedule(cfg, 5))
    _epoch(net, opt, sched, cfg, examples, rng, 0, 1, "cpu")
    assert sorted(seen) == list(range(n))
    assert (np.diff(ts[seen]) > 0).all() == time_ordered


def _events(rows) -> EventLists:
    """rows: (user, item, hour, click code)."""
    users, items, hours, clicks = (np.array(c) for c in zip(*rows, strict=True))
    return EventLists.from_events(users, items, hours * HOUR_US, clicks)


def test_decayed_counts_equal_the_formula():
    events = _events([(1, 10, 0, 1), (1, 11, 2, 0), (1, 12, 5, 1), (2, 13, 1, 1)])
    users = np.array([1, 1, 2, 3, 1])
    ts = np.array([1, 6, 2, 9, 5]) * HOUR_US  # the last query: same time as an event (excluded)
    half = 2 * 3600.0
    got = decayed_counts(events, users, ts, half, clicks_only=True)
    expected = [2 ** (-1 / 2), 2 ** (-6 / 2) + 2 ** (-1 / 2), 2 ** (-1 / 2), 0.0, 2 ** (-5 / 2)]
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    every = decayed_counts(events, users, ts, half, clicks_only=False)
    np.testing.assert_allclose(every[1], 2 ** -3 + 2 ** -2 + 2 ** (-1 / 2), rtol=1e-12)


def test_logistic_fit_recovers_known_coefficients():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((20000, 2))
    z = -1.0 + 1.5 * x[:, 0] - 0.5 * x[:, 1]
    y = (rng.random(20000) < 1 / (1 + np.exp(-z))).astype(float)
    model = fit_logistic(x, y, ridge=0.0)
    probe = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    np.testing.assert_allclose(model.logits(probe), [-1.0, 0.5, -1.5], atol=0.08)
