"""The publisher's count checks after the write: every publishable row accounted for, every
field on the server, every sampled pair read back equal (``docs/cache-format.md``, step 3).
A failed check raises :class:`VerificationError` (or :class:`PublishInputError` when nothing
is servable) and the alias is not switched."""

from __future__ import annotations

from solaris_lib.cache.errors import PublishInputError, VerificationError


def check_counts(totals: dict[str, int], valid_rows: int, version: str) -> None:
    """Exact pairs: written + duplicates + non-finite = publishable rows; the fields on the
    server = pairs + cluster fields written; the sample read back without a difference."""
    if not totals["pairs"]:
        raise PublishInputError(f"version {version}: every publishable row had an inf or nan "
                                f"embedding; nothing to serve, the alias was not switched")
    if totals["pairs"] + totals["duplicates"] + totals["non_finite"] != valid_rows:
        raise VerificationError(
            f"version {version}: {totals['pairs']} pairs written + {totals['duplicates']} "
            f"duplicates + {totals['non_finite']} non-finite != {valid_rows} publishable rows; "
            f"the alias was not switched")
    if totals["fields_on_server"] != totals["pairs"] + totals["cluster_pairs"]:
        raise VerificationError(
            f"version {version}: the server holds {totals['fields_on_server']} fields but "
            f"{totals['pairs']} pairs and {totals['cluster_pairs']} cluster rows were written "
            f"(evicted or lost); the alias was not switched")
    if totals["mismatched"] or (totals["pairs"] and not totals["verified"]):
        raise VerificationError(
            f"version {version}: {totals['mismatched']} of {totals['verified']} sampled pairs "
            f"read back differ from the input; the alias was not switched")


def check_cluster_counts(totals: dict[str, int], cluster_rows: int, version: str) -> None:
    """The fallback level's rows: all accounted for, and some of them read back."""
    done = totals["cluster_pairs"] + totals["cluster_duplicates"] + totals["cluster_non_finite"]
    if done != cluster_rows:
        raise VerificationError(
            f"version {version}: {totals['cluster_pairs']} cluster rows written + "
            f"{totals['cluster_duplicates']} duplicates + {totals['cluster_non_finite']} "
            f"non-finite != {cluster_rows} servable cluster rows; the alias was not switched")
    if totals["cluster_pairs"] and not totals["cluster_verified"]:
        raise VerificationError(f"version {version}: no cluster row was read back; the alias "
                                f"was not switched")
