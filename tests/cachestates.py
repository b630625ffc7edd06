"""Hostile cache states for the client's property tests (hypothesis strategies), and the check
of the client's contract in one state.

A state is a list of Redis commands (``HSET``/``SET``) that writes, under the prefix ``p``, an
alias and a failover version that may or may not be version ids, manifests that may be valid,
mutated, random bytes or strings, fallback-table chunks of any length and chunk count, and user
hashes whose values may be valid fp16 (inf and nan included), of the wrong length or of the
wrong key type. :func:`check_contract` then builds a client, looks up, refreshes and looks up
again, and says what broke the contract: an exception, a call over its budget, a non-finite
value answered as a hit (or as a cluster or item level).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

from solaris_lib.cache.errors import CacheError
from solaris_lib.cache.format import (
    ITEM_CLUSTER_CHUNK,
    ITEM_PRIOR_CHUNK,
    alias_key,
    chunk_count,
    failover_key,
    pack_item_clusters,
    pack_item_priors,
)
from solaris_lib.fallback import Level
from tests.cachespec import bucket

P = "p"
VERSIONS = ("20260105T100000Z-aaaaaaaaaa", "20260105T110000Z-bbbbbbbbbb")
USER, ITEMS = 7, (1, 2, 3, 4, 5, 6)
FP16_SPECIALS = (0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFFFF, 0x3C00, 0x0000, 0x8000, 0x7BFF)

rarely = st.integers(0, 9).map(lambda n: n == 4)  # about one draw in ten (hypothesis favours
# the ends of a range, so the rare case is a middle value)
junk = st.one_of(st.binary(max_size=24), st.text(max_size=12).map(str.encode),
                 st.integers(-10**20, 10**20).map(lambda n: str(n).encode()))
version_ids = st.one_of(st.sampled_from(VERSIONS), st.sampled_from(VERSIONS), junk,
                        st.sampled_from(VERSIONS).map(lambda v: (v + "\n").encode()))


@st.composite
def fp16_values(draw, dim: int) -> bytes:
    """A value of ``dim`` fp16 numbers, some of them inf or nan, or junk of any length."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=2 * dim + 3))
    halves = draw(st.lists(st.one_of(st.sampled_from(FP16_SPECIALS), st.integers(0, 0xFFFF)),
                           min_size=dim, max_size=dim))
    return np.asarray(halves, "<u2").tobytes()


@st.composite
def manifests(draw, version: str) -> tuple[dict[str, object], dict]:
    """A manifest hash (fields -> bytes) and the facts it claims (dim, buckets, levels)."""
    dim = draw(st.sampled_from([1, 2, 4]))
    buckets = draw(st.sampled_from([1, 2, 4]))
    fields: dict[str, object] = {
        "format": "2", "version": version, "model_version": "m1", "codec": "fp16",
        "dim": str(dim), "buckets": str(buckets), "interval_start": "x", "interval_end": "y",
        "pairs": "1", "users": "1", "digest": "0" * 32, "ttl_s": "60", "state": "complete"}
    clusters = draw(st.integers(0, 4))
    priors = draw(st.integers(0, 4))
    if draw(st.booleans()):
        big = st.one_of(st.integers(-5, 10), st.integers(0, 10**12), st.just(10**9))
        clusters = draw(st.one_of(st.just(clusters), big))
        priors = draw(st.one_of(st.just(priors), big))
        fields.update(fallback=draw(st.sampled_from(["cluster"] * 5 + ["other"])),
                      clusters="2", cluster_pairs="1", item_clusters=str(clusters),
                      item_cluster_chunks=str(draw(st.one_of(
                          st.just(chunk_count(max(clusters, 0), ITEM_CLUSTER_CHUNK)),
                          st.integers(-1, 10**9)))),
                      item_priors=str(priors), item_prior_chunks=str(draw(st.one_of(
                          st.just(chunk_count(max(priors, 0), ITEM_PRIOR_CHUNK)),
                          st.integers(-1, 10**9)))))
    mutated = draw(rarely)  # most states keep a valid manifest
    for name in draw(st.lists(st.sampled_from(sorted(fields)), max_size=3 * mutated,
                              unique=True)):
        if draw(st.booleans()):
            del fields[name]
        else:
            fields[name] = draw(junk)
    for _ in range(draw(st.integers(0, 2)) * mutated):
        fields[draw(junk).decode("latin-1")] = draw(junk)
    facts = {"dim": dim, "buckets": buckets, "clusters": clusters, "priors": priors}
    return fields, facts


@st.composite
def tables(draw, version: str, facts: dict) -> list[tuple]:
    """SETs of the version's chunk keys: well formed (possibly with inf/nan priors), or junk."""
    commands = []
    n, dim = facts["clusters"], facts["dim"]
    if 0 <= n <= 4 and draw(st.booleans()):
        ids = np.asarray(sorted(draw(st.lists(st.integers(0, 8), min_size=n, max_size=n,
                                              unique=True))), np.int64)
        (chunk,) = pack_item_clusters(ids, np.asarray([0, 1, 0, 1][:n]))
        commands.append(("SET", f"{P}:h:{version}:items:0", chunk))
    n = facts["priors"]
    if 1 <= n <= 4 and draw(st.booleans()):
        ids = np.arange(1, n + 1, dtype=np.int64)
        values = np.frombuffer(b"".join(draw(fp16_values(dim)).ljust(2 * dim, b"\0")[:2 * dim]
                                        for _ in range(n)), np.uint8).reshape(n, 2 * dim)
        (chunk,) = pack_item_priors(ids, values)
        commands.append(("SET", f"{P}:h:{version}:prior:0", chunk))
    for kind in draw(st.lists(st.sampled_from(["items", "prior"]), max_size=2)):
        commands.append(("SET", f"{P}:h:{version}:{kind}:{draw(st.integers(0, 2))}",
                         draw(st.binary(max_size=64))))
    return commands


@st.composite
def user_keys(draw, version: str, facts: dict) -> list[tuple]:
    """The user's bucket hashes and cluster hash: values of any kind, or a key of the wrong
    type."""
    commands = []
    for item in draw(st.lists(st.sampled_from(ITEMS), max_size=len(ITEMS), unique=True)):
        key = f"{P}:e:{version}:{{{USER}}}:{bucket(item, facts['buckets'])}"
        if draw(rarely):
            commands.append(("SET", key, b"not a hash"))
        else:
            commands.append(("HSET", key, str(item), draw(fp16_values(facts["dim"]))))
    for cluster in draw(st.lists(st.sampled_from([0, 1]), max_size=2, unique=True)):
        commands.append(("HSET", f"{P}:e:{version}:{{{USER}}}:c", str(cluster),
                         draw(fp16_values(facts["dim"]))))
    return commands


@st.composite
def cache_states(draw) -> list[tuple]:
    """Every command of one hostile state under the prefix ``p``."""
    commands: list[tuple] = []
    for version in VERSIONS:
        shape = draw(st.sampled_from(["manifest", "manifest", "manifest", "junk", "string",
                                      "none"]))
        if shape == "manifest":
            fields, facts = draw(manifests(version))
            if fields:
                commands.append(("HSET", f"{P}:m:{version}",
                                 *[part for kv in fields.items() for part in kv]))
            commands += draw(tables(version, facts)) + draw(user_keys(version, facts))
        elif shape == "junk":
            pairs = draw(st.lists(st.tuples(junk, junk), min_size=1, max_size=4))
            commands.append(("HSET", f"{P}:m:{version}", *[p for kv in pairs for p in kv]))
        elif shape == "string":
            commands.append(("SET", f"{P}:m:{version}", draw(junk)))
    for key in (alias_key(P), failover_key(P)):
        kind = draw(st.integers(0, 9))  # mostly a version; the ends: none, junk
        value = (None if kind == 0 else draw(version_ids) if kind in (1, 9)
                 else draw(st.sampled_from(VERSIONS)))
        if value is not None:
            commands.append(("SET", key, value))
    if draw(rarely):
        commands.append(("HSET", f"{P}:alias", "a", "b"))
    return commands


@dataclass
class Tally:
    """What the states did to the client."""

    states: int = 0
    raised: list[str] = field(default_factory=list)
    over_budget: int = 0
    non_finite_hits: int = 0
    served: int = 0
    rows_hit: int = 0

    def zeros(self) -> bool:
        return not self.raised and not self.over_budget and not self.non_finite_hits


def check_contract(build: Callable[..., object], tally: Tally, *, budget_s: float) -> None:
    """Build a client with ``build(**options)``, look up, refresh, look up; record in
    ``tally``. ``budget_s``: the most any one call may take (a bound on blocking, far above
    the few milliseconds these calls take on a local server)."""
    tally.states += 1
    client = None
    try:
        client = _timed(tally, budget_s, build)
        _lookups(client, tally, budget_s)
        try:
            _timed(tally, budget_s, client.refresh)  # the one method that may raise CacheError
        except CacheError:
            pass
        _lookups(client, tally, budget_s)
        tally.served += client.version is not None
    except Exception as exc:  # noqa: BLE001 - what the property counts
        tally.raised.append(f"{type(exc).__name__}: {exc}"[:300])
    finally:
        if client is not None:
            client.close()


def _timed(tally: Tally, budget_s: float, call: Callable[[], object]) -> object:
    started = time.monotonic()
    result = call()
    tally.over_budget += time.monotonic() - started > budget_s
    return result


def _lookups(client, tally: Tally, budget_s: float) -> None:
    for user, items in ((USER, [*ITEMS, 99]), (USER, []), (8, [1])):
        result = _timed(tally, budget_s, lambda u=user, i=items: client.lookup(u, i))
        answered = result.level != Level.MISS
        assert result.embeddings.shape[0] == len(items) == len(result.hit) == len(result.level)
        assert not (result.hit & (result.level != Level.EXACT)).any()
        tally.non_finite_hits += int(np.count_nonzero(
            answered & ~np.isfinite(result.embeddings).all(axis=1)))
        tally.rows_hit += int(np.count_nonzero(result.hit))
