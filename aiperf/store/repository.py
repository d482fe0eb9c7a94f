"""The Store: aiperf's records, read and written through one object on one engine.

Each method is one short transaction, and the orchestrator commits what one turn of its loop
learnt (epochs, ends, new trials) as one WriteBatch: if a run dies, everything it reported up to
its last turn is already committed, and nothing a failed command did touches earlier runs. Reads
hand out frozen records (aiperf.store.records), never ORM objects. Who may write a run, and what
a write does when it may not, is the Store's contract (see `Store`).

Store serves two roles, each a class of its own with its written contract: what a run writes,
through its recorder (aiperf.store.run_writes.RunWrites), and what every reader reads: `show`,
`history`, `compare`, `verify`, the report, a resume (aiperf.store.reads.RunReads). The results
list's records are a third (aiperf.store.results_models). Both classes share the core
(aiperf.store.base: engine, sessions, retry). A turn's writes are a WriteBatch
(aiperf.store.batch); rows become records in aiperf.store.conversion.

    with Store.open(url) as store:           # create the database if needed, apply migrations
        claim = store.create_run(...)        # the right to write the new run
        store.start_search(claim, ...)
    with Store.open_existing(url) as store:  # read-only commands: never create, never migrate
        run = store.get_run(run_id)          # RecordNotFound when there is no such run
"""

from __future__ import annotations

from aiperf.store.reads import RunReads
from aiperf.store.run_writes import RunWrites


class Store(RunReads, RunWrites):
    """aiperf's records: a run's writes (RunWrites) and every read (RunReads), on one engine.

    Who may write a run: only the holder of its claim (aiperf.store.ownership.RunClaim), which
    `create_run` and `take_over` return. Every write that touches a run takes the claim (a
    WriteBatch's too: `write(batch, claim)`) and, in the same transaction and before anything
    else, checks that the run's row still carries the claim's token, locking the row until the
    commit. Writes that touch no run (`upsert_system`, `record_dataset(None, ...)` for `aiperf
    stage`) take none. Reads take no claim and see committed data only.

    A run taken over: after `aiperf recover` or `aiperf run --resume` took a run (compare-and-set
    on its token, on the database's clock, once its heartbeat is older than the timeout), every
    write with the old claim raises RunTakenOver and writes nothing: the check and the write are
    one transaction, and the take-over waits for a write in progress to commit.

    Retries: every transaction is retried through transient database faults (aiperf.store.retry)
    for up to `retry_s`. That is safe because every write is idempotent: updates set values,
    inserts look first for the row an earlier attempt may have committed before its
    acknowledgement was lost (`_insert_once`), and the ownership check is repeated by each attempt.

    Threads: a Store may be shared by threads (the run's main thread and its heartbeat): each
    method opens its own session from the engine's pool. A claim is a frozen value, safe to pass
    to any thread or task that writes for the run."""
