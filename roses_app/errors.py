"""One exception root for the project.

Each subclass also inherits the builtin a caller would naturally catch, so code that
knows nothing of ROSES (``except ValueError``) still works.  Messages say what to do.
"""

from __future__ import annotations

from dataclasses import dataclass


class RosesError(Exception):
    """Root of every error ROSES raises on purpose."""


@dataclass(frozen=True)
class ConfigProblem:
    """One mistake in feeds.yaml, located at file:line."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


class ConfigError(RosesError, ValueError):
    """feeds.yaml has mistakes; all of them are in ``problems``."""

    def __init__(self, problems: list[ConfigProblem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class ExpressionError(RosesError, ValueError):
    """An XPath/XQuery expression does not compile (syntax or static error)."""


class EvaluationError(RosesError, RuntimeError):
    """An expression failed at run time on one item."""


class ItemTimeout(EvaluationError, TimeoutError):
    """An expression ran past ``settings.limits.item_seconds`` on one item."""


class RequestTimeUp(ItemTimeout):
    """The time given to a whole request (a preview, a pull query) ran out before this
    item: not a fault of the item's own."""


class StepStruck(ItemTimeout):
    """Not evaluated: its step already ran past the limit on several items of the
    batch, so the batch's other items are dropped at once."""


class ItemMemoryError(EvaluationError, MemoryError):
    """An expression needed more memory than ``settings.limits.worker_memory`` on one item."""


class FetchError(RosesError, OSError):
    """A source could not be fetched (network, HTTP status, size, timeout)."""


class FeedParseError(RosesError, ValueError):
    """A fetched document is not a feed we can read."""


class SpoolError(RosesError, OSError):
    """The spool could not be written or read."""


class StoreError(RosesError, OSError):
    """The output store could not be written or read."""


class JavaNotFoundError(RosesError, FileNotFoundError):
    """No Java runtime that Spark can use was found."""


class QueryError(RosesError, RuntimeError):
    """A stream's Spark query failed."""


class DataDirInUseError(RosesError, OSError):
    """Another ROSES process holds the data folder (its lock file)."""
