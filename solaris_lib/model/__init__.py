"""The foundation model (FM): a target-aware sequence model and its batch inference.

Importing this package does not import torch: :mod:`config` and :mod:`examples` are
numpy-only; :mod:`network`, :mod:`train`, :mod:`online`, :mod:`inference` and :mod:`fallback`
(the fallback levels' tables, written after the exact embeddings) import torch and pyspark
where needed themselves. The click metrics are :mod:`solaris_lib.evaluation.metrics`.
"""

from solaris_lib.model.config import PRESETS, FoundationConfig

__all__ = ["PRESETS", "FoundationConfig"]
