"""The Redis embedding cache: its byte format, the connection layer and the publisher.

``format`` is the spec in code (``docs/cache-format.md``), shared by the writer and the reader;
``endpoint``, ``resp`` and ``nodes`` are the connection layer the lookup client also uses;
``publish`` (Spark, imported lazily) loads an interval's embeddings as a new version and
switches the alias. The online reader is :mod:`solaris_lib.client`.
"""
