"""The level rule: the finest level that holds a value wins; a level the version lacks holds none."""

import itertools

import numpy as np

from solaris_lib.fallback import Level, resolve_levels


def _expected(exact: bool, cluster: bool, prior: bool) -> Level:
    if exact:
        return Level.EXACT
    if cluster:
        return Level.CLUSTER
    return Level.ITEM if prior else Level.MISS


def test_every_combination_of_held_values():
    combos = list(itertools.product((False, True), repeat=3))
    exact, cluster, prior = (np.array(column) for column in zip(*combos, strict=True))
    level = resolve_levels(exact, cluster, prior)
    assert level.dtype == np.int8
    assert level.tolist() == [_expected(*combo) for combo in combos]


def test_a_level_the_version_lacks_holds_nothing():
    exact = np.array([True, False, False])
    held = np.array([True, True, False])
    assert resolve_levels(exact).tolist() == [Level.EXACT, Level.MISS, Level.MISS]
    assert resolve_levels(exact, None, held).tolist() == [Level.EXACT, Level.ITEM, Level.MISS]
    assert resolve_levels(exact, held).tolist() == [Level.EXACT, Level.CLUSTER, Level.MISS]
    assert resolve_levels(np.zeros(0, bool), None, None).shape == (0,)


def test_level_codes_are_stable():
    assert [(level.name, int(level)) for level in Level] == [
        ("MISS", 0), ("EXACT", 1), ("CLUSTER", 2), ("ITEM", 3)]
