"""Records: SQLAlchemy models, migrations, and the Store that reads and writes them.

Knows nothing of Prefect or Keras, so any tool can read a run's records with it.
"""

from aiperf.store.repository import RunWork, Store

__all__ = ["RunWork", "Store"]
