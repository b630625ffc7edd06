"""The fallback levels' batch inference (:mod:`solaris_lib.model.fallback`): its pure parts;
the Spark run is tested through the infer job and the precompute DAG."""

import numpy as np

from solaris_lib.model.fallback import PRIOR_ITEMS_PER_ROW, prior_users


def test_prior_users_are_negative_and_hold_a_row_of_items_each():
    users = prior_users(np.arange(2 * PRIOR_ITEMS_PER_ROW + 3))
    assert (users < 0).all() and (np.diff(users) >= 0).all()
    _, counts = np.unique(users, return_counts=True)
    assert counts.tolist() == [PRIOR_ITEMS_PER_ROW, PRIOR_ITEMS_PER_ROW, 3]
    assert len(prior_users(np.zeros(0, np.int64))) == 0
