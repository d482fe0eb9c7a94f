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
from pathlib import Path

import pytest
import typer
from conftest import TINY_SIMULATED
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url
from typer.testing import CliRunner

from aiperf.cli.exit_codes import EXIT_INVALID
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
    # Simulated trials: the password's paths (config, flow parameters, records, logs, the workers'
    # environment) are the same whatever trains.
    settings = [f"--set={key}={json.dumps(value)}" for key, value in TINY_SIMULATED.items()]
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
    assert result.exit_code == EXIT_INVALID, printed  # 15 s: under the profile's minimum
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


# --- secrets in the query, and in URLs that do not parse ------------------------------------------

SECRET = "s3cret-q"
# libpq takes a secret from each of these query parameters; the last two URLs do not parse.
QUERY_SECRETS = [
    f"postgresql+psycopg://u@127.0.0.1:1/x?password={SECRET}",
    f"postgresql+psycopg://u@127.0.0.1:1/x?sslmode=prefer&sslpassword={SECRET}",
    f"postgresql+psycopg://u@127.0.0.1:1/x?passfile=/home/u/{SECRET}",
    f"postgresql+psycopg://u:pw@127.0.0.1:1/x?pass%77ord={SECRET}",  # the key's name encoded
]
MALFORMED_SECRETS = [
    f"postgresql+psycopg://u:{SECRET}@127.0.0.1:notaport/x",
    f"postgresql+psycopg://u@127.0.0.1:notaport/x?password={SECRET}",
]


@pytest.mark.parametrize("url", QUERY_SECRETS)
def test_query_string_secrets_are_withheld_shown_masked_and_still_used_here(url):
    from aiperf.store import database

    bare, taken = split_password(url)
    assert taken is not None and SECRET not in bare and bare.startswith("postgresql+psycopg://u@")
    assert SECRET not in safe_url(url) and "***" in safe_url(url)
    config = load_config("quick", workers=1, db=url)
    assert config.db == bare and SECRET not in config.model_dump_json()
    connects_with = database._parse_url(config.db)  # this process's own connections
    assert SECRET in connects_with.render_as_string(hide_password=False)
    with pytest.raises(UserError, match="holds a database password") as refused:
        check_parameters(db=url)  # a flow-run parameter, which Prefect stores
    assert SECRET not in str(refused.value)


@pytest.mark.parametrize("url", MALFORMED_SECRETS)
def test_a_url_that_does_not_parse_and_holds_a_password_is_refused_wherever_it_is_given(url):
    """Nothing could take its password out reliably, so it is never stored, passed or shown."""
    assert SECRET not in safe_url(url)
    for give in (
        lambda: split_password(url),
        lambda: load_config("quick", workers=1, db=url),
        lambda: check_parameters(db=url),
        lambda: check_parameters(overrides={"db": url}),
    ):
        with pytest.raises(UserError, match="is malformed and holds a password") as refused:
            give()
        assert SECRET not in str(refused.value) and "\n" not in str(refused.value)
    assert split_password("postgresql+psycopg://u@h:notaport/x") == (
        "postgresql+psycopg://u@h:notaport/x",
        None,
    )  # nothing to withhold: opening it says it is malformed


READ_COMMANDS = [["runs"], ["history"], ["show", "1"], ["compare", "1", "2"]]


@pytest.mark.parametrize("url", QUERY_SECRETS + MALFORMED_SECRETS)
@pytest.mark.parametrize(
    "command", [*READ_COMMANDS, ["run", "--workers", "1", "--budget", "5s"]], ids=" ".join
)
def test_no_command_prints_a_query_string_or_malformed_url_password(command, url, capfd):
    for given, env in ((["--db", url], {}), ([], {"AIPERF_DB_URL": url})):
        result = _cli(*command, *given, env=env)
        printed = result.output + "".join(capfd.readouterr())
        assert result.exit_code == 2, printed
        assert "127.0.0.1" in printed and SECRET not in printed, printed


# --- worker and job environments --------------------------------------------------------------

ENV_SECRETS = {
    "AIPERF_DB_URL": f"postgresql+psycopg://u:{SECRET}-url@h/db",
    "PGPASSWORD": f"{SECRET}-pgpassword",
    "PGPASSFILE": f"/home/u/{SECRET}-pgpass",
}


def _environ_of(pid: int) -> str:
    """A process's environment as it was when it started: what it inherited, whatever it unset."""
    return Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux's /proc")
def test_a_local_worker_process_starts_without_the_database_secrets(monkeypatch):
    from distributed import Client

    from aiperf.cluster.start import local_cluster
    from aiperf.urls import with_withheld_password

    for name, value in ENV_SECRETS.items():
        monkeypatch.setenv(name, value)
    with local_cluster(1) as cluster:
        # While the cluster lives this process still connects as libpq would, and reads its URL.
        here = with_withheld_password(make_url("postgresql+psycopg://u@h/env-only"))
        assert here.query["password"] == ENV_SECRETS["PGPASSWORD"]
        assert here.query["passfile"] == ENV_SECRETS["PGPASSFILE"]
        assert load_config("quick", workers=1).db == "postgresql+psycopg://u@h/db"
        with Client(cluster, security=cluster.security, set_as_default=False) as client:
            environs = {w: _environ_of(pid) for w, pid in client.run(os.getpid).items()}
            client.restart()  # its nanny spawns the worker process anew, later in the run
            environs.update(
                {f"{w} restarted": _environ_of(pid) for w, pid in client.run(os.getpid).items()}
            )
    assert len(environs) == 2
    for worker, environ in environs.items():
        assert SECRET not in environ, f"worker {worker} inherited a database secret"
        assert "AIPERF_DB_URL=" not in environ and "PGPASSWORD=" not in environ
    assert {name: os.environ.get(name) for name in ENV_SECRETS} == ENV_SECRETS  # given back


def _environment_of_a_child() -> str:
    """`env` as a process this worker starts sees it (a trial's subprocess, say)."""
    import subprocess

    return subprocess.run(["env"], capture_output=True, text=True, check=True).stdout


def test_a_worker_given_the_secrets_drops_them_as_it_starts():
    """A worker that got them anyway (started by hand for --cluster scheduler, or by a prologue that
    exports one) drops them in aiperf's preload, before any task: nothing it starts inherits them."""
    from distributed import Client, LocalCluster

    from aiperf.cluster.preload import PRELOAD

    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            preload=[PRELOAD],
            env=ENV_SECRETS,  # set in the worker process as it starts, before the preload runs
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        seen = client.run(lambda: {n: os.environ.get(n) for n in ENV_SECRETS})
        children = client.run(_environment_of_a_child)
    assert list(seen.values()) == [dict.fromkeys(ENV_SECRETS)]
    assert all(SECRET not in child for child in children.values())


def test_a_job_script_unsets_the_database_secrets_before_anything_else(monkeypatch, tmp_path):
    """A batch system copies the submitting shell's environment into the job by default (sbatch
    --export=ALL): the script's first line drops the secrets, so its worker never sees them."""
    import subprocess

    from aiperf.cluster.plan import job_plan

    monkeypatch.setenv("SLURM_SUBMIT_DIR", str(tmp_path))
    config = load_config("quick", workers=1, out=str(tmp_path), cluster="slurm")
    prologue = job_plan(config, None).kwargs["job_script_prologue"]
    assert prologue[0].startswith("unset ")
    shell = "\n".join([*prologue, "env"])
    job_env = {**os.environ, **ENV_SECRETS}  # as --export=ALL hands the job
    seen = subprocess.run(
        ["bash", "-c", shell], env=job_env, cwd=tmp_path, capture_output=True, text=True
    )
    assert seen.returncode == 0, seen.stderr
    assert SECRET not in seen.stdout and "KERAS_BACKEND=" in seen.stdout


def test_this_process_connects_with_pgpassword_while_it_is_kept_from_children(
    postgres_db, monkeypatch
):
    """The password only in PGPASSWORD, a URL without one: connections made while a cluster keeps
    it out of the environment (a pool's new connection mid-run) still log in."""
    from sqlalchemy import text as sql_text

    from aiperf.store import Store
    from aiperf.urls import secrets_kept_from_children

    bare = split_password(postgres_db)[0].replace("127.0.0.1", "localhost")  # nothing withheld
    monkeypatch.setenv("PGPASSWORD", make_url(postgres_db).password)
    monkeypatch.delenv("PGPASSFILE", raising=False)
    with secrets_kept_from_children():
        assert "PGPASSWORD" not in os.environ
        with Store.open(bare) as store, store.engine.connect() as connection:
            assert connection.execute(sql_text("SELECT 1")).scalar() == 1
