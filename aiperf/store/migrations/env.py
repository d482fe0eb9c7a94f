"""Alembic environment. aiperf passes its engine in `config.attributes["engine"]`
(aiperf.store.database.upgrade); the `alembic` command line uses sqlalchemy.url from alembic.ini
or the AIPERF_DB environment variable instead."""

import os

from alembic import context
from sqlalchemy import create_engine

from aiperf.store.models import Base

config = context.config
target_metadata = Base.metadata


def _engine():
    engine = config.attributes.get("engine")
    if engine is not None:
        return engine
    url = os.environ.get("AIPERF_DB") or config.get_main_option("sqlalchemy.url") or "sqlite:///aiperf.db"
    return create_engine(url)


def run_migrations_offline() -> None:
    url = os.environ.get("AIPERF_DB") or config.get_main_option("sqlalchemy.url")
    context.configure(url=url, target_metadata=target_metadata, literal_binds=True,
                      render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    with _engine().connect() as connection:
        # Batch mode lets later migrations alter tables on SQLite too.
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
