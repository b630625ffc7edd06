"""The foundation model (FM): a target-aware sequence model and its batch inference.

Importing this package does not import torch: :mod:`config`, :mod:`metrics` and
:mod:`examples` are numpy-only; :mod:`network`, :mod:`train`, :mod:`online` and
:mod:`inference` import torch (and pyspark where needed) themselves.
"""

from solaris_lib.model.config import PRESETS, FoundationConfig

__all__ = ["PRESETS", "FoundationConfig"]
