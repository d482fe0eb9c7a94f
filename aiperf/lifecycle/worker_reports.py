"""Which worker reports the search loop accepts: the rules every report is checked against as it
arrives, before anything of it is recorded. A live event only from the worker the trial runs on
(the Dask scheduler stamps each event with its sender, `sent_from`), epochs in order and never
twice, samples in whole batches and within the dataset. A report that breaks a rule raises
RefusedReport; the loop (aiperf.lifecycle.orchestrator) then fails its trial with the reason. What
is expensive to check here (the operations per sample a worker counted) is checked by the
verification every run ends with (aiperf.results.verify)."""

from __future__ import annotations

from aiperf.lifecycle.admission import Running
from aiperf.train.messages import EpochReport, TrialBuilt

# Where a report came from: a Dask worker's address, the trial's own result (trusted: it is the
# return value of the task that ran the trial), or an event that no scheduler stamped.
FROM_RESULT = "result"
UNSTAMPED = "unstamped"


class RefusedReport(Exception):
    """A worker's report that breaks a rule: the trial fails with this reason."""


def admissible(
    running: Running,
    message: TrialBuilt | EpochReport,
    sender: str,
    dataset_samples: tuple[int, int] | None,
) -> bool:
    """True to apply the report, False to skip it for now; RefusedReport when it breaks a rule.
    `dataset_samples`: (train, val), the most one epoch can use (None: not checked)."""
    if sender == UNSTAMPED:
        raise RefusedReport("the event was not sent by a worker")
    if sender != FROM_RESULT:
        if running.sender is None:
            running.sender = sender  # the trial's first live event names its worker
        elif sender != running.sender:
            raise RefusedReport(f"it came from {sender}, but the trial runs on {running.sender}")
    if isinstance(message, TrialBuilt):
        return True
    expected = len(running.epochs_seen)
    if message.epoch in running.epochs_seen:
        return False  # a repeat: the live event and the result both carry every epoch
    if message.epoch != expected:
        if sender != FROM_RESULT:
            return False  # an earlier live event was lost: the trial's result brings them in order
        raise RefusedReport(f"epoch {message.epoch} arrived after epoch {expected - 1}")
    if message.samples_trained % running.batch_size:
        raise RefusedReport(
            f"epoch {message.epoch} trained {message.samples_trained} samples, not whole "
            f"batches of {running.batch_size}"
        )
    if dataset_samples is not None:
        train, val = dataset_samples
        if message.samples_trained > train or message.samples_evaluated > val:
            raise RefusedReport(
                f"epoch {message.epoch} reports {message.samples_trained} trained and "
                f"{message.samples_evaluated} evaluated samples; the dataset has {train} and {val}"
            )
    return True
