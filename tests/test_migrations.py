"""Migrations build the whole schema from an empty database, and it matches the models."""

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from aiperf.store import Store, database
from aiperf.store.models import Base


def test_upgrade_from_empty_creates_every_table(db_url):
    store = Store.open(db_url)
    tables = set(inspect(store.engine).get_table_names())
    assert {"systems", "runs", "datasets", "trials", "epochs", "scores", "alembic_version"} <= tables
    assert database.current_revision(store.engine) == database.head_revision()


def test_migrations_match_the_models(db_url):
    store = Store.open(db_url)
    with store.engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert diff == [], f"models and migrations differ; write a migration: {diff}"


def test_upgrade_twice_keeps_the_records(db_url):
    store = Store.open(db_url)
    system = store.upsert_system({"fingerprint": "f" * 64, "hostname": "h", "cpu_model": "c", "cpu_cores": 1,
                                  "memory_bytes": 1, "gpus": {"count": 0, "models": []}, "platform": "p",
                                  "python_version": "3", "tensorflow_version": None, "keras_version": "3",
                                  "keras_backend": "tensorflow"})
    store.create_run(system_id=system, profile="quick", config={}, seed=0, budget_s=1, workers=1)
    store.close()
    again = Store.open(db_url)
    assert len(again.list_runs()) == 1
