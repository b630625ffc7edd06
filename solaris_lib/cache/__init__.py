"""The Redis embedding cache: its byte format, the Redis connections and the publisher.

``format`` is the spec in code (``docs/cache-format.md``), shared by the writer and the reader;
``endpoint`` parses the one Redis URL and ``connection`` makes its redis-py clients (the lookup
client uses them too); ``publish`` loads an interval's embeddings as a new version and
switches the alias, reading its input with pyarrow in Spark tasks (``inputs``, ``survey``,
``writer``). The online reader is :mod:`solaris_lib.client`.
"""
