"""Knowledge transfer: how much of the foundation model's quality reaches the small online ranker.

* :mod:`~solaris_lib.transfer.ratio` - the transfer ratio (pure arithmetic).
* :mod:`~solaris_lib.transfer.config` - the experiment's typed knobs.
* :mod:`~solaris_lib.transfer.replay` - what serving would have had: per interval, the tables
  the previous interval's precompute run wrote (the pipeline's own stages, replayed), read at
  the levels the client's rule (:func:`solaris_lib.fallback.resolve_levels`) picks.
* :mod:`~solaris_lib.transfer.features` - the ranker's inputs per logged row (no leak).
* :mod:`~solaris_lib.transfer.ranker` - the small ranker and its variants (plain, distilled,
  solaris, solaris_fallback).
* :mod:`~solaris_lib.transfer.experiment` - the experiment end to end; ``output`` writes its
  files and ``commands`` is ``solaris report``.

Imports no torch, pyspark or faiss at package level.
"""
