"""A database password stays secret: aiperf connects with it, but it is never stored in runs.config or
any other record, never passed as a Prefect flow-run parameter, never logged or printed.

The slow test runs `aiperf run --db URL` against the test PostgreSQL server, which authenticates with
a password (scram-sha-256; infra/postgres/ctl.sh), then looks for that password everywhere the run
left text: every row of every table and view, the flow run's parameters and logs on the Prefect API,
and everything written to the terminal and the log handlers.
"""

from __future__ import annotations

import json
import logging
import os
import uuid

import pytest
import typer
from conftest import TINY
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url
from typer.testing import CliRunner

from aiperf.cli.main import app
from aiperf.config import BenchmarkConfig, load_config
from aiperf.errors import UserError
from aiperf.lifecycle.parameters import check_parameters
from aiperf.urls import safe_url, split_password, withhold_password

UNREACHABLE = "postgresql+psycopg://u:secret@127.0.0.1:1/x"


def _cli(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "220", **(env or {})})


# --- the password, taken out of URLs ------------------------------------------------------------


def test_split_password_gives_the_url_without_it():
    assert split_password("postgresql+psycopg://u:s%40cr%2Fet@h:5432/db?sslmode=require") == (
        "postgresql+psycopg://u@h:5432/db?sslmode=require",
        "s@cr/et",
    )
    assert split_password("postgresql+psycopg://u@h/db") == ("postgresql+psycopg://u@h/db", None)
    assert split_password("sqlite:///aiperf.db") == ("sqlite:///aiperf.db", None)


def test_safe_url_hides_the_password_even_of_a_url_that_does_not_parse():
    assert safe_url("postgresql+psycopg://u:secret@h/db") == "postgresql+psycopg://u:***@h/db"
    assert "secret" not in safe_url("postgresql+psycopg://u:secret@h:notaport/db")


def test_a_config_never_holds_the_password_and_this_process_still_connects_with_it():
    url = f"postgresql+psycopg://u:pw-{uuid.uuid4().hex}@h/db"
    config = load_config("quick", workers=1, db=url)
    assert config.db == "postgresql+psycopg://u@h/db"
    assert "pw-" not in config.model_dump_json()
    assert BenchmarkConfig.model_validate(config.model_dump()).db == config.db

    from aiperf.store import database

    assert database._parse_url(config.db).password == split_password(url)[1]


def test_aiperf_db_url_wins_over_the_profile_and_loses_to_db_and_overrides(monkeypatch, tmp_path):
    profile = tmp_path / "mine.yaml"
    profile.write_text("db: sqlite:///from-profile.db\n")
    assert load_config(str(profile), workers=1).db == "sqlite:///from-profile.db"
    monkeypatch.setenv("AIPERF_DB_URL", "postgresql+psycopg://u:pw@h/from-env")
    assert load_config(str(profile), workers=1).db == "postgresql+psycopg://u@h/from-env"
    assert (
        load_config(str(profile), workers=1, overrides={"db": "sqlite:///set.db"}).db
        == "sqlite:///set.db"
    )
    assert load_config(str(profile), workers=1, db="sqlite:///flag.db").db == "sqlite:///flag.db"


# --- printing -----------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["runs"], ["show", "1"], ["history"], ["db", "upgrade"]])
def test_commands_never_print_the_password(command, capfd):
    for given in (["--db", UNREACHABLE], []):
        result = _cli(*command, *given, env={"AIPERF_DB_URL": UNREACHABLE})
        printed = result.output + "".join(capfd.readouterr())
        assert result.exit_code == 2, printed
        assert "u:***@127.0.0.1:1/x" in printed
        assert "secret" not in printed


def test_a_malformed_url_is_reported_without_its_password(capfd):
    result = _cli("runs", "--db", "postgresql+psycopg://u:secret@h:notaport/x")
    printed = result.output + "".join(capfd.readouterr())
    assert result.exit_code == 2 and "malformed" in printed and "secret" not in printed


def test_help_names_aiperf_db_url_but_never_shows_its_value():
    result = _cli("runs", "--help", env={"AIPERF_DB_URL": UNREACHABLE})
    assert "AIPERF_DB_URL" in result.output and "secret" not in result.output


def test_tracebacks_never_show_local_variables():
    apps = [app] + [group.typer_instance for group in app.registered_groups]
    assert all(
        isinstance(a, typer.Typer) and a.pretty_exceptions_show_locals is False for a in apps
    )


# --- flow-run parameters ------------------------------------------------------------------------


def test_a_password_in_a_flow_parameter_is_refused_naming_the_fix():
    for args in ({"db": UNREACHABLE}, {"overrides": {"db": UNREACHABLE}}):
        with pytest.raises(UserError, match="AIPERF_DB_URL, PGPASSWORD or ~/.pgpass") as refused:
            check_parameters(**args)
        assert "secret" not in str(refused.value)
    check_parameters(db="postgresql+psycopg://u@127.0.0.1:1/x")


@pytest.mark.slow
def test_the_flow_refuses_a_password_parameter_before_recording_anything(prefect_api, tmp_path):
    from aiperf_flows.benchmark import benchmark

    with pytest.raises(UserError, match="holds a database password"):
        benchmark(
            workers=1,
            db="postgresql+psycopg://u:not-the-server-password@127.0.0.1:1/x",
            out=str(tmp_path / "out"),
        )
    with pytest.raises(UserError, match="holds a database password"):
        benchmark(
            workers=1,
            overrides={"db": "postgresql+psycopg://u:not-the-server-password@127.0.0.1:1/x"},
        )
    assert not (tmp_path / "out").exists()


# --- a whole run on PostgreSQL with a password ------------------------------------------------


def _rows_as_text(url: str) -> list[str]:
    """Every row of every table and view, each as PostgreSQL's text of the whole row."""
    engine = create_engine(url)
    try:
        names = inspect(engine).get_table_names() + inspect(engine).get_view_names()
        with engine.connect() as sql:
            return [
                row[0]
                for name in names
                for row in sql.execute(text(f'SELECT CAST(t AS text) FROM "{name}" t'))
            ]
    finally:
        engine.dispose()


def _flow_run_texts(flow_run_id: str) -> tuple[str, list[str], list[str]]:
    """The run's flow-run parameters (JSON), every flow run's parameters, and the run's logs on the API."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()  # logs go to the API in batches: send what is queued first
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(uuid.UUID(flow_run_id))
        every = [json.dumps(r.parameters, default=str) for r in client.read_flow_runs()]
        logs = client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id]))
        )
    return json.dumps(run.parameters, default=str), every, [log.message for log in logs]


@pytest.mark.slow
def test_a_run_on_postgresql_keeps_its_password_out_of_records_parameters_and_logs(
    prefect_api, postgres_db, tmp_path, caplog, capfd
):
    password = make_url(postgres_db).password
    bare = split_password(postgres_db)[0]
    assert password and len(password) >= 16 and password not in bare
    caplog.set_level(logging.DEBUG)
    settings = [f"--set={key}={json.dumps(value)}" for key, value in TINY.items()]
    result = _cli(
        "run",
        "--db",
        postgres_db,
        "--budget",
        "15s",
        "--workers",
        "1",
        "--seed",
        "1",
        "--out",
        str(tmp_path / "out"),
        *settings,
    )
    printed = result.output + "".join(capfd.readouterr())
    assert result.exit_code == 0, printed
    assert "regulated score" in printed

    rows = _rows_as_text(postgres_db)
    config, flow_run_id = _run_config_and_flow_run(postgres_db)
    assert config["db"] == bare
    assert rows and not [row for row in rows if password in row]

    parameters, every_flow_run, logs = _flow_run_texts(flow_run_id)
    assert bare in parameters  # the config the CLI passed: its URL without the password
    assert password not in parameters
    assert not [p for p in every_flow_run if password in p]
    assert any("recorded in" in message for message in logs), logs
    assert not [message for message in logs if password in message]
    assert password not in printed and password not in caplog.text


def _run_config_and_flow_run(url: str) -> tuple[dict, str]:
    engine = create_engine(url)
    try:
        with engine.connect() as sql:
            config, flow_run_id = sql.execute(text("SELECT config, flow_run_id FROM runs")).one()
    finally:
        engine.dispose()
    return (json.loads(config) if isinstance(config, str) else config), flow_run_id


def test_withheld_passwords_stay_in_this_process(monkeypatch):
    """Nothing is put in the environment, so workers and batch jobs never inherit a password."""
    monkeypatch.delenv("PGPASSWORD", raising=False)
    withhold_password("postgresql+psycopg://u:kept-here@h/db")
    assert "kept-here" not in json.dumps(dict(os.environ))
