"""SOLARIS: speculative precompute of foundation-model embeddings for recommendation serving.

The package imports with its light dependencies only (numpy, pyarrow, pydantic, redis).
torch, faiss and pyspark are imported inside the stages that use them.
"""

__version__ = "0.1.0"
