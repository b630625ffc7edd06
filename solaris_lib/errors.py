"""The SOLARIS exception tree.

Every error a user can act on derives from :class:`SolarisError`; the CLI maps them to exit codes.
"""

from __future__ import annotations


class SolarisError(Exception):
    """Base class of every error SOLARIS raises on purpose."""

    exit_code = 1


class ConfigError(SolarisError):
    """A configuration value is missing, unknown or out of range."""

    exit_code = 2


def validation_problems(exc) -> str:
    """One line naming each bad field of a pydantic ``ValidationError``:
    ``live_gaps: Input should be greater than or equal to 0; ...``."""
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or '?'}: {err['msg']}"
                     for err in exc.errors())


class LogContractError(SolarisError):
    """A request-log file violates the contract as a whole (unreadable, missing or mistyped column).

    Row-level problems are not errors: those rows are counted and quarantined.
    """

    exit_code = 2

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class EmptyInputError(SolarisError):
    """A stage found no input where it needs some (for example an empty log window)."""

    exit_code = 3


class OutputWriteError(SolarisError):
    """Writing an output partition failed (disk full, quota): nothing was marked complete, and
    the partition that was there before, if any, is unchanged."""

    exit_code = 7


class MissingDependencyError(SolarisError):
    """An optional heavy dependency (torch, pyspark, faiss) is not installed."""

    exit_code = 4

    def __init__(self, package: str, purpose: str) -> None:
        super().__init__(
            f"{package} is needed for {purpose} but is not installed; "
            f"install the pinned set with `make venv` or `pip install -r requirements.txt`"
        )
