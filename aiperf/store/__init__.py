"""Records: SQLAlchemy models, migrations, and the Store that reads and writes them.

Knows nothing of Prefect or Keras, so any tool can read a run's records with it. Everything
outside this package reads the frozen records of aiperf.store.records, never the ORM models.
"""

from aiperf.store.batch import WriteBatch
from aiperf.store.fact_records import EpochReport, RunStart, TrialBuilt, TrialEnd, TrialStart
from aiperf.store.ownership import RunClaim
from aiperf.store.reads import RunReads, RunWork
from aiperf.store.records import (
    CheckRecord,
    DatasetRecord,
    EpochRecord,
    RecordNotFound,
    RunRecord,
    RunScoreRow,
    RunTakenOver,
    SystemRecord,
    TrialRecord,
    TrialSummaryRow,
    WindowRecord,
    window_gaps,
    window_seconds,
)
from aiperf.store.repository import Store
from aiperf.store.results_models import ResultRecord
from aiperf.store.run_writes import RunWrites

__all__ = [
    "CheckRecord",
    "DatasetRecord",
    "EpochRecord",
    "EpochReport",
    "RecordNotFound",
    "ResultRecord",
    "RunClaim",
    "RunReads",
    "RunRecord",
    "RunScoreRow",
    "RunStart",
    "RunTakenOver",
    "RunWork",
    "RunWrites",
    "Store",
    "SystemRecord",
    "WriteBatch",
    "TrialBuilt",
    "TrialEnd",
    "TrialRecord",
    "TrialStart",
    "TrialSummaryRow",
    "WindowRecord",
    "window_gaps",
    "window_seconds",
]
