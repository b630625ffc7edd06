"""The publisher's count checks after a write: every publishable row accounted for, every
field on the server, every sampled pair read back equal (``docs/cache-format.md``, step 3).
A failed check raises :class:`VerificationError` (or :class:`PublishInputError` when nothing
is servable), a failed Spark write :class:`PublishError`; the alias is not switched."""

from __future__ import annotations

from collections.abc import Callable

from solaris_lib.cache.errors import PublishError, PublishInputError, VerificationError


def check_counts(totals: dict[str, int], valid_rows: int, version: str, what: str,
                 required: bool = True) -> None:
    """One table's write (``what``: its rows' name): written + duplicates + non-finite =
    publishable rows; the fields on the server = rows written; the sample read back without a
    difference. A table not ``required`` (the fallback level's) may end with nothing written
    (every row non-finite): the other checks still hold."""
    if not totals["pairs"] and required:
        raise PublishInputError(f"version {version}: every publishable row of the {what} had "
                                f"an inf or nan embedding; nothing to serve, the alias was not "
                                f"switched")
    if totals["pairs"] + totals["duplicates"] + totals["non_finite"] != valid_rows:
        raise VerificationError(
            f"version {version}: {totals['pairs']} {what} written + {totals['duplicates']} "
            f"duplicates + {totals['non_finite']} non-finite != {valid_rows} publishable rows; "
            f"the alias was not switched")
    if totals["fields_on_server"] != totals["pairs"]:
        raise VerificationError(
            f"version {version}: the server holds {totals['fields_on_server']} fields but "
            f"{totals['pairs']} {what} were written (evicted or lost); the alias was not "
            f"switched")
    if totals["mismatched"] or (totals["pairs"] and not totals["verified"]):
        raise VerificationError(
            f"version {version}: {totals['mismatched']} of {totals['verified']} sampled "
            f"{what} read back differ from the input; the alias was not switched")


def run_write(action: Callable[[], list], version: str, previous: str | None,
              ttl_s: int) -> list:
    """Run the write's Spark action; an executor failure becomes a PublishError naming the
    cause (the last Python error line inside the Spark error)."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    try:
        return action()
    except (PySparkException, Py4JJavaError) as exc:
        cause = _root_cause(str(exc))
        raise PublishError(f"writing version {version} failed: {cause}. The alias was "
                           f"not switched; {previous or 'no version'} is still "
                           f"served and the partial version expires in {ttl_s} s.") from exc


def _root_cause(text: str) -> str:
    """The last ``SomeError: message`` line of a Python traceback inside a Spark error."""
    lines = [line.strip() for line in text.splitlines() if "Error: " in line]
    return lines[-1][:500] if lines else text.strip().splitlines()[0][:500]
