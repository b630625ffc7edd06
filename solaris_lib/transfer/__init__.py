"""Knowledge transfer: how much of the foundation model's quality reaches the small online ranker.

* :mod:`~solaris_lib.transfer.ratio` - the transfer ratio of DESIGN.md (pure arithmetic).
* :mod:`~solaris_lib.transfer.config` - the experiment's typed knobs.
* :mod:`~solaris_lib.transfer.cache` - what serving would have had: per interval, the pairs the
  speculation run of the previous interval chose and their FM embeddings as of the interval start.
* :mod:`~solaris_lib.transfer.fallback` - the hierarchical fallback: item clusters from the ALS
  item factors and one embedding per (user, item cluster).
* :mod:`~solaris_lib.transfer.features` - the ranker's inputs per logged row (no leak).
* :mod:`~solaris_lib.transfer.ranker` - the small ranker and its variants (plain, distilled,
  solaris, solaris_fallback).
* :mod:`~solaris_lib.transfer.report` - ``solaris report``: the experiment end to end.

Imports no torch, pyspark or faiss at package level.
"""
