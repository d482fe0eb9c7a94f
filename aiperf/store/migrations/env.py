"""Alembic environment, shipped inside the aiperf package.

aiperf passes its engine in `config.attributes["engine"]` (aiperf.store.database.upgrade and
downgrade); the `alembic` command line opens sqlalchemy.url from alembic.ini, else $AIPERF_DB_URL,
else aiperf's default database (aiperf.urls.database_url, as every command). Either way every
online run is one transaction from database.migration_transaction, which on SQLite keeps foreign
keys off while batch mode rebuilds tables and checks them before the commit.
"""

from alembic import context
from sqlalchemy import Engine

from aiperf.store import database
from aiperf.store.models import Base
from aiperf.urls import database_url

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    return database_url(config.get_main_option("sqlalchemy.url"))


def run_migrations_offline() -> None:
    context.configure(
        url=_url(), target_metadata=target_metadata, literal_binds=True, render_as_batch=True
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    given: Engine | None = config.attributes.get("engine")
    owned = given is None
    engine = database.open_engine(_url()) if given is None else given
    try:
        with database.migration_transaction(engine) as connection:
            # Batch mode lets later migrations alter tables on SQLite too.
            context.configure(
                connection=connection, target_metadata=target_metadata, render_as_batch=True
            )
            with context.begin_transaction():
                context.run_migrations()
    finally:
        if owned:
            engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
