"""The pieces every section of a config is built from: a strict model (an unknown key is an error)
and the checks of single values that several sections share (one line, UTF-8, an amount of memory,
a walltime), each refused with the setting's name before anything is recorded.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from aiperf.units import parse_walltime


class _Strict(BaseModel):
    """Unknown keys are errors: a typo in a profile must not be silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _one_line(value: str | None) -> str | None:
    """Settings written into job scripts as directives or paths: a line break there would start a
    shell line of its own, so one is refused wherever the value came from."""
    if value is not None and any(c in value for c in "\n\r\0"):
        raise ValueError("must be one line (it is written into job scripts)")
    return value


def _utf8(value: str | None) -> str | None:
    """A path given with a byte that is not UTF-8 (Python keeps it as a lone surrogate) cannot be
    stored, logged or sent to Prefect: it is refused here, with the config, not deep in a client."""
    if value is not None:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            shown = value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise ValueError(
                f"{shown!r} holds a byte that is not UTF-8; rename the folder or give another path"
            ) from None
    return value


def _memory(value: str | None) -> str | None:
    """A job's memory as dask-jobqueue reads it (8GB, 512MiB): read now, so a typo stops the run
    before anything is recorded rather than when the cluster starts."""
    if value is not None:
        from dask.utils import parse_bytes

        try:
            parse_bytes(value)
        except (ValueError, TypeError):
            raise ValueError(
                f"{value!r} is not an amount of memory; give one such as 8GB or 512MiB"
            ) from None
    return value


def _walltime(value: str | None) -> str | None:
    """A job's walltime as the queues take it ([D-]HH:MM[:SS], or a duration such as 2h)."""
    if value is not None:
        try:
            parse_walltime(value)
        except ValueError:
            raise ValueError(
                f"{value!r} is not a walltime; give HH:MM:SS, D-HH:MM:SS or a duration such as 2h"
            ) from None
    return value


# The longest budget a run may ask for: 30 days. A week or two is the longest walltime batch
# queues usually grant, and ImageNet's closed minimum is an hour: a month is far beyond any run that
# can finish, so a longer one is a typo (99999999h reaches past the year 9999 that dates can hold,
# and would fail after the run was recorded).
MAX_BUDGET_S = 30 * 86400.0
