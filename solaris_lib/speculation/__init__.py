"""Speculation: choose, under a compute budget, the (user, item) pairs the next interval will score.

Stages (each a pure ``DataFrame -> DataFrame`` transform, written per data interval):

* :mod:`~solaris_lib.speculation.mine` - user history, pair, item and co-occurrence statistics.
* :mod:`~solaris_lib.speculation.retrieval` - ALS (implicit feedback) user and item factors.
* :mod:`~solaris_lib.speculation.candidates` - tagged candidates (repeat, faiss, cooccurrence,
  popular, miss) with their features.
* :mod:`~solaris_lib.speculation.scorer` - the learned scorer (logistic regression) and the
  heuristic fallback.
* :mod:`~solaris_lib.speculation.pipeline` - the per-interval runs the jobs and the CLI call.

Imports no pyspark, faiss or torch at package level.
"""
