"""Migrations build the whole schema from an empty database, it matches the models, and going
down and up again (through aiperf or the `alembic` command line) keeps every record, on SQLite too
where batch mode rebuilds tables."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, Engine, MetaData, inspect

from aiperf.errors import UserError
from aiperf.store import Store, database

ALEMBIC_INI = Path(__file__).resolve().parents[1] / "alembic.ini"
COUNTED = ("systems", "runs", "trials", "epochs")
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def schema_drift(engine: Engine) -> list:
    """What differs between the models and the schema the migrations built (Alembic's autogenerate
    diff); empty when a migration exists for every model change."""
    from alembic.autogenerate import compare_metadata

    from aiperf.store.models import Base

    with engine.connect() as connection:
        return compare_metadata(MigrationContext.configure(connection), Base.metadata)


def test_upgrade_from_empty_creates_every_table(db_url):
    store = Store.open(db_url)
    tables = set(inspect(store.engine).get_table_names())
    assert {
        "systems",
        "runs",
        "datasets",
        "trials",
        "epochs",
        "scores",
        "alembic_version",
    } <= tables
    assert database.current_revision(store.engine) == database.head_revision()


def test_migrations_match_the_models(db_url):
    with Store.open(db_url) as store:
        diff = schema_drift(store.engine)
    assert diff == [], f"models and migrations differ; write a migration: {diff}"


def test_upgrade_twice_keeps_the_records(db_url):
    engine = database.open_engine(db_url)
    database.upgrade(engine)
    _record_a_run(engine)
    engine.dispose()
    again = database.open_engine(db_url)
    database.upgrade(again)
    assert _counts(again) == {"systems": 1, "runs": 1, "trials": 2, "epochs": 6}
    again.dispose()


# --- records written with SQL, so these tests do not depend on the Store's methods ---------------


def _insert(connection: Connection, table: str, **values) -> int:
    """One row into the table as the current revision has it (reflected, not the models)."""
    reflected = sa.Table(table, MetaData(), autoload_with=connection)
    return connection.execute(sa.insert(reflected).values(**values)).inserted_primary_key[0]


def _record_a_run(engine: Engine) -> int:
    """A system, a run, its dataset, two trials of three epochs each and a score: every table of
    revision 0001, with the foreign keys a table rebuild could lose."""
    with engine.begin() as c:
        system = _insert(
            c,
            "systems",
            fingerprint="f" * 64,
            hostname="h",
            cpu_model="c",
            cpu_cores=2,
            memory_bytes=1 << 30,
            gpus={"count": 0, "models": []},
            platform="linux",
            python_version="3.11",
            tensorflow_version=None,
            keras_version="3",
            keras_backend="tensorflow",
            first_seen_at=T0,
        )
        run = _insert(
            c,
            "runs",
            system_id=system,
            profile="quick",
            config={},
            seed=0,
            budget_s=60.0,
            workers=2,
            status="completed",
            created_at=T0,
        )
        _insert(
            c,
            "datasets",
            run_id=run,
            name="synthetic",
            kind="synthetic",
            sha256="0" * 64,
            train_samples=384,
            val_samples=128,
            classes=10,
            manifest={"name": "synthetic"},
        )
        parent = None
        for number in range(2):
            parent = _insert(
                c,
                "trials",
                run_id=run,
                trial_key=f"t{number:02d}",
                number=number,
                parent_trial_id=parent,
                architecture={},
                hyperparameters={},
                status="completed",
                started_at=T0,
                ended_at=T0 + timedelta(seconds=30),
            )
            for epoch in range(3):
                _insert(
                    c,
                    "epochs",
                    trial_id=parent,
                    epoch=epoch,
                    started_at=T0 + timedelta(seconds=epoch),
                    ended_at=T0 + timedelta(seconds=epoch + 1),
                    samples_trained=384,
                    samples_evaluated=128,
                    complete=True,
                )
        _insert(
            c,
            "scores",
            run_id=run,
            elapsed_s=60.0,
            total_ops=1e12,
            ops=1e10,
            tensor_ops=1e10,
            best_val_accuracy=0.5,
            val_samples=128,
            regulated_score=1e10,
            trials_completed=2,
            samples_trained=2304,
            samples_evaluated=768,
            valid=True,
            reasons=[],
            computed_at=T0,
        )
    return run


def _counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as c:
        return {
            table: c.execute(sa.select(sa.func.count()).select_from(sa.table(table))).scalar_one()
            for table in COUNTED
        }


def _foreign_keys_enforced(engine: Engine) -> bool:
    with engine.connect() as c:
        return bool(c.exec_driver_sql("PRAGMA foreign_keys").scalar_one())


# --- down and up again -------------------------------------------------------------------------


def _through_aiperf(engine: Engine, _url: str):
    return lambda revision: database.downgrade(engine, revision), lambda: database.upgrade(engine)


def _through_alembic_command_line(_engine: Engine, url: str):
    """What `alembic -c alembic.ini downgrade/upgrade` runs: env.py opens the URL itself."""
    config = AlembicConfig(str(ALEMBIC_INI))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return lambda revision: command.downgrade(config, revision), lambda: command.upgrade(
        config, "head"
    )


@pytest.mark.parametrize("through", [_through_aiperf, _through_alembic_command_line])
def test_down_to_the_first_revision_and_up_keeps_the_records(db_url, through):
    engine = database.open_engine(db_url)
    try:
        database.upgrade(engine)
        run = _record_a_run(engine)
        with engine.begin() as c:
            _insert(
                c,
                "search_states",
                run_id=run,
                oracle="morphism",
                state={"trials": 2},
                updated_at=T0,
            )
        before = _counts(engine)
        assert before == {"systems": 1, "runs": 1, "trials": 2, "epochs": 6}
        down, up = through(engine, db_url)
        down("0001")
        assert database.current_revision(engine) == "0001"
        assert _counts(engine) == before
        up()
        assert database.current_revision(engine) == database.head_revision()
        assert _counts(engine) == before
        if engine.dialect.name == "sqlite":
            assert _foreign_keys_enforced(engine), "foreign keys are back on after migrating"
    finally:
        engine.dispose()


# --- SQLite: table rebuilds keep children, a broken foreign key rolls back -----------------------


def _rebuild_runs(connection: Connection) -> None:
    """What a future migration adding a column to runs does on SQLite: create, copy, DROP, rename.
    (At revision 0001: from 0002 on, views over runs make SQLite refuse the rename.)"""
    operations = Operations(MigrationContext.configure(connection))
    with operations.batch_alter_table("runs", recreate="always") as batch:
        batch.add_column(
            sa.Column(f"note_{len(inspect(connection).get_columns('runs'))}", sa.Text())
        )


def _at_first_revision_with_a_run(url: str) -> Engine:
    engine = database.open_engine(url)
    command.upgrade(database._alembic_config(engine), "0001")
    _record_a_run(engine)
    return engine


def test_sqlite_rebuild_of_runs_keeps_trials_and_epochs(sqlite_url):
    engine = _at_first_revision_with_a_run(sqlite_url)
    try:
        before = _counts(engine)
        with database.migration_transaction(engine) as connection:
            _rebuild_runs(connection)
        assert _counts(engine) == before
        assert _foreign_keys_enforced(engine)
        # Without the fix: the same rebuild with foreign keys on (as on every aiperf connection)
        # drops runs, and ON DELETE CASCADE takes every trial and epoch with it.
        with engine.begin() as connection:
            assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar_one() == 1
            _rebuild_runs(connection)
        assert _counts(engine) == {**before, "trials": 0, "epochs": 0}
    finally:
        engine.dispose()


def test_sqlite_broken_foreign_keys_roll_the_migration_back(sqlite_url):
    engine = _at_first_revision_with_a_run(sqlite_url)
    try:
        before = _counts(engine)
        with pytest.raises(
            UserError, match=r"rolled back.*\(first: \w+ row \d+ -> runs\)"
        ) as caught:
            with database.migration_transaction(engine) as connection:
                connection.exec_driver_sql("DELETE FROM runs")  # no cascade with foreign keys off
        assert "\n" not in str(caught.value)
        assert _counts(engine) == before
        assert _foreign_keys_enforced(engine)
    finally:
        engine.dispose()


def test_a_failed_migration_changes_nothing(db_url):
    """One transaction for the whole run, DDL included (SQLite's driver would autocommit DDL)."""
    engine = database.open_engine(db_url)
    try:
        with pytest.raises(RuntimeError, match="migration failed"):
            with database.migration_transaction(engine) as connection:
                connection.exec_driver_sql("CREATE TABLE scratch (id INTEGER)")
                connection.exec_driver_sql("INSERT INTO scratch VALUES (1)")
                raise RuntimeError("migration failed")
        assert "scratch" not in inspect(engine).get_table_names()
    finally:
        engine.dispose()
