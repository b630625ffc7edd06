"""SOLARIS: speculative precompute of foundation-model embeddings for recommendation serving.

The lookup client (`solaris_lib.client`) imports with the base install alone (numpy, redis,
hiredis); the batch side needs the `batch` extra (pyarrow, pydantic, pyspark, torch, faiss), each
imported inside the stages that use it.
"""

__version__ = "0.1.0"
