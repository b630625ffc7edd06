"""The hierarchical fallback levels: what a lookup serves when the exact pair was not precomputed.

Between the model and the cache in the layer order: the infer job writes the levels' tables,
the cache publisher stores them, the client serves them and the transfer report measures them.

* :mod:`~solaris_lib.fallback.levels` - :class:`Level` (EXACT > CLUSTER > ITEM > MISS) and
  :func:`resolve_levels`, the one rule that picks a row's level (the client's and the report's).
* :mod:`~solaris_lib.fallback.clusters` - :class:`ItemClusters` (item -> cluster) built by
  k-means over the ALS item factors plus popularity buckets.
* The interval's cluster, item -> cluster and item-prior tables are written by the infer stage
  (:mod:`solaris_lib.model.fallback`, Spark), outside this package: the lookup client imports
  this package, and nothing here reaches Spark, the model or speculation.

Imports no torch, pyspark or faiss at package level.
"""

from solaris_lib.fallback.clusters import ItemClusters
from solaris_lib.fallback.levels import NO_CLUSTER, Level, resolve_levels

__all__ = ["NO_CLUSTER", "ItemClusters", "Level", "resolve_levels"]
