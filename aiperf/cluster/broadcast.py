"""Run a function once on every worker of a Dask cluster, where workers may leave as it runs.

Before a run's timed window aiperf asks every worker something (its settings, its node, what it
runs, its peak) or has it do something (copy the dataset to its node, warm up). On a batch cluster
a worker can leave at any moment: the keeper retires an idle worker whose job nears its walltime
(and a worker answering a broadcast runs no task, so it is idle), a job is cancelled. Dask's
Client.run raises the first error of any worker, so one worker closing its connection while it
answered would fail a run that its replacement would have served.

Here a worker that left answers nothing, and an error the function raised on a worker is raised as
before. The two are told apart exactly: the function runs inside `_answer`, which hands back what
it raised as a value, so an OSError that Dask itself reports (a closed comm, a connect that timed
out) is the connection's. Any other error Dask reports (a worker that cannot unpickle the
function, say) is raised.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class _Raised:
    """What the function raised on a worker, with the worker's traceback as text."""

    error: BaseException
    where: str


def _answer(
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    dask_worker: Any = None,
) -> Any:
    """Runs on the worker: the function's value, or _Raised. Dask gives a function that names
    `dask_worker` its worker; this passes it on the same way."""
    from distributed.utils import has_arg

    if has_arg(function, "dask_worker"):
        kwargs = {**kwargs, "dask_worker": dask_worker}
    try:
        return function(*args, **kwargs)
    except Exception as error:
        return _Raised(error, traceback.format_exc())


def on_every_worker(
    client: Any,
    function: Callable[..., Any],
    *args: Any,
    workers: list[str] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """worker address -> function(*args, **kwargs) run on it, for every worker (or those named)
    that was still there to answer. The first error the function raised on a worker is raised
    here, with that worker's traceback as a note."""
    answers = client.run(_answer, function, args, kwargs, workers=workers, on_error="return")
    results: dict[str, Any] = {}
    for worker, answer in sorted(answers.items()):
        if isinstance(answer, _Raised):
            answer.error.add_note(f"on worker {worker}:\n{answer.where}")
            raise answer.error
        if isinstance(answer, OSError):  # TimeoutError is one too
            log.info(
                "worker %s left as it ran %s (%s: %s); the run goes on without it",
                worker,
                getattr(function, "__name__", function),
                type(answer).__name__,
                answer,
            )
            continue
        if isinstance(answer, BaseException):
            raise answer
        results[worker] = answer
    return results
