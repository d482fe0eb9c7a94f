"""`aiperf runs`, `show`, `history` and `compare` at 80 columns (a pipe, or an 80-column terminal):
no header or value is cut, nothing ends in "…", no line is wider than the terminal; a wider one
shows the columns a narrow one leaves out."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from claims import add_phases, claim_of
from sqlalchemy import text
from test_history_data import PlantedTrial, plant_run, system_facts
from typer.testing import CliRunner

from aiperf.cli.main import app
from aiperf.status import RunStatus
from aiperf.store import RunStart, Store
from aiperf.store.records import TrialPhases
from aiperf.units import format_ops

NIGHT = datetime(2026, 12, 1, 20, 55, tzinfo=UTC)
HOST = "node-a.example.org"
# Morphisms as long as the search writes them: no spaces of their own.
OPERATORS = [
    "seed",
    "deepen(after=stage1_block1_1_relu,kernel=3)",
    "skip(source=stage2_block1_1_relu,target=stage3_block1_out)",
]

RUNS = ["run", "created (UTC)", "profile", "workers", "budget", "status", "OPS", "regulated"]
RUNS += ["quality", "valid"]
HISTORY = ["run", "created (UTC)", "system", "profile", "division", "config", "workers"]
HISTORY += ["budget", "OPS", "change", "regulated", "MFU", "quality", "valid"]
TRIALS = ["trial", "parent", "operator", "status", "worker", "devices", "convs", "skips", "params"]
TRIALS += ["lr", "batch", "dropout", "epochs", "train ops/sample", "val acc"]
TRIALS += ["samples/s", "MFU", "compile"]
PHASES = ["build", "count", "compile", "train", "evaluate", "report"]
TIME = ["worker", "trials", *PHASES, "idle", "utilisation"]
PER_TRIAL = ["trial", "worker", "status", *PHASES, "total"]


def _hour_long_trials() -> list[PlantedTrial]:
    return [
        PlantedTrial("w0", 3_000_000_000, 1_000_000_000, epoch_s=1000.0),
        PlantedTrial("w1", 5_000_000_000, 1_500_000_000, start_s=5.0, epoch_s=1000.0),
        PlantedTrial("w0", 4_000_000_000, 1_200_000_000, start_s=2001.0, epoch_s=700.0),
    ]


def _grow_and_time(store: Store, run_id: int) -> None:
    """Give the planted trials a real network, parents, long morphisms and an hour's phases, as a
    search would."""
    from aiperf.arch import seed_spec

    network = json.dumps(seed_spec("resnet-mini").to_dict())
    trials = store.get_run(run_id).trials
    update = "UPDATE trials SET parent_trial_id = :p, operator = :op, architecture = :net"
    with store.engine.begin() as connection:
        for i, (trial, operator) in enumerate(zip(trials, OPERATORS, strict=True)):
            parent = trials[i - 1].id if i else None
            connection.execute(
                text(f"{update} WHERE id = :id"),
                {"p": parent, "op": operator, "net": network, "id": trial.id},
            )
    for trial in trials:
        phases = TrialPhases(
            build_s=12.5, count_s=0.75, compile_s=120.25, train_s=1500.5, evaluate_s=250.0
        )
        add_phases(store, trial.id, phases)
    peaks = [
        {"worker": w, "flops": 1e11, "dtype": "float32", "device": "CPU", "seconds": 2.0}
        for w in ("w0", "w1")
    ]
    store.record_peaks(claim_of(store, run_id), peaks)


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> tuple[str, dict[str, int]]:
    """Two hour-long runs of one workload (one invalid), a short one, one interrupted unscored."""
    url = f"sqlite:///{tmp_path_factory.mktemp('tables') / 'aiperf.db'}"
    with Store.open(url) as store:
        facts = system_facts(HOST)
        ids = {}
        for night, valid in enumerate([True, False]):
            ids[f"hour{night}"] = plant_run(
                store,
                facts,
                started=NIGHT + timedelta(days=night),
                elapsed_s=3600.0,
                trials=_hour_long_trials(),
                valid=valid,
                config_hash="0123456789abcdef",
                division="closed",
            )
            _grow_and_time(store, ids[f"hour{night}"])
        ids["short"] = plant_run(store, facts, profile="quick", started=NIGHT + timedelta(days=2))
        system_id = store.upsert_system(facts)
        ids["lost"] = store.create_run(
            RunStart(profile="nightly", config={}, seed=0, budget_s=3600, workers=16),
            system_id=system_id,
        ).run_id
        store.finish_run(claim_of(store, ids["lost"]), status=RunStatus.INTERRUPTED)
    return url, ids


def _aiperf(columns: int, *args: str) -> str:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.output


def _fits(out: str, columns: int = 80) -> None:
    assert "…" not in out and "..." not in out, out
    too_wide = [line for line in out.splitlines() if len(line.rstrip()) > columns]
    assert not too_wide, "\n".join(too_wide)


def _headers(out: str, title: str, headers: list[str]) -> list[str]:
    """The headers of the table under `title`, each found whole on its header line; and that line
    holds nothing but whole headers."""
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(title))
    line = lines[at + 1]
    shown = [h for h in headers if re.search(rf"(?<!\S){re.escape(h)}(?!\S)", line)]
    rest = line
    for h in sorted(shown, key=len, reverse=True):
        rest = re.sub(rf"(?<!\S){re.escape(h)}(?!\S)", " ", rest)
    assert rest.strip() == "", f"{line!r} holds a cut header: {rest.strip()!r}"
    return shown


def _whole(out: str, *values: str) -> None:
    for value in values:
        assert value in out, f"{value!r} is not whole in\n{out}"


def test_runs_at_80_columns(db):
    url, ids = db
    out = _aiperf(80, "runs", "--db", url)
    _fits(out)
    shown = _headers(out, "runs in", RUNS)
    assert {"run", "created (UTC)", "profile", "status", "OPS", "valid"} <= set(shown), shown
    with Store.open_existing(url) as store:
        hour = store.get_run(ids["hour0"])
    _whole(out, "2026-12-01 20:54", "interrupted", f"{format_ops(hour.score.ops)}OPS")
    assert _headers(_aiperf(200, "runs", "--db", url), "runs in", RUNS) == RUNS


def test_history_at_80_columns(db):
    url, _ids = db
    out = _aiperf(80, "history", "--db", url)
    _fits(out)
    shown = _headers(out, "aiperf history", HISTORY)
    assert {"run", "created (UTC)", "system", "OPS", "change", "valid"} <= set(shown), shown
    _whole(out, f"1 {HOST}", "trend of OPS, nightly closed 01234567")
    assert _headers(_aiperf(250, "history", "--db", url), "aiperf history", HISTORY) == HISTORY


def test_compare_at_80_columns(db):
    url, ids = db
    a, b = str(ids["hour0"]), str(ids["hour1"])
    out = _aiperf(80, "compare", a, b, "--db", url)
    _fits(out)
    headers = ["figure", f"run {a}", f"run {b}", "difference"]
    assert _headers(out, f"run {a} vs run {b}", headers) == headers
    _whole(out, f"1 {HOST}", "best val accuracy", "3600.0 s")


@pytest.mark.parametrize("view", [[], ["--phases"], ["--tree"]])
def test_show_at_80_columns(db, view):
    url, ids = db
    run = str(ids["hour1"])
    out = _aiperf(80, "show", run, "--db", url, *view)
    _fits(out)
    _whole(out, "OPS (aiperf convention)", "samples trained / evaluated", "too short")
    time = _headers(out, f"where the time went in run {run}", TIME)
    assert {"worker", "build", "compile", "train", "evaluate", "idle", "utilisation"} <= set(time)
    if view == ["--phases"]:
        shown = _headers(out, f"phases of the trials of run {run}", PER_TRIAL)
        assert {"trial", "build", "compile", "train", "evaluate", "total"} <= set(shown), shown
        _whole(out, "1884.00")
    elif view == ["--tree"]:
        _whole(out, f"search tree of run {run}", "seed", "deepen(after=stage1_block1_1_relu,")
        assert re.search(r"MOPS/sample\s+completed", out) or "GOPS/sample" in out, out
    else:
        shown = _headers(out, f"trials of run {run}", TRIALS)
        assert {"trial", "parent", "operator", "status", "val acc"} <= set(shown), shown
        _whole(out, "skip(source=stage2_block1_1_relu,", "target=stage3_block1_out)")
        wide = _aiperf(250, "show", run, "--db", url)
        assert _headers(wide, f"trials of run {run}", TRIALS) == TRIALS
        # Each trial's rate, MFU and compile share (aiperf.results.trial_figures).
        _whole(wide, f"{2 * 384 / 1500.5:.3g}", "0.731%", "6.38%")


def test_a_run_as_planted_shows(db):
    """The planted trials' own architecture (a spec, not a grown graph) is read as a run's is."""
    url, ids = db
    out = _aiperf(80, "show", str(ids["short"]), "--db", url)
    assert _headers(out, f"trials of run {ids['short']}", TRIALS)[:4] == TRIALS[:4]


def test_a_run_without_a_score_at_80_columns(db):
    url, ids = db
    out = _aiperf(80, "show", str(ids["lost"]), "--db", url)
    _fits(out)
    assert "has no score" in out


def test_columns_go_by_rank_and_a_too_narrow_table_folds_rather_than_crops():
    import io

    from rich.console import Console

    from aiperf.report.tables import Col, FitTable

    columns = [Col("id"), Col("when", rank=2), Col("note", wrap=True), Col("figure", rank=1)]
    rows = [["17", "2026-12-01 20:55", "a note of some length", "101.234 GOPS"]]

    def drawn(width: int) -> str:
        console = Console(width=width, record=True, file=io.StringIO())
        console.print(FitTable(columns, rows, title="t"))
        return console.export_text()

    assert drawn(80).splitlines()[1].split() == ["id", "when", "note", "figure"]
    assert drawn(50).splitlines()[1].split() == ["id", "note", "figure"], "by rank, not order"
    assert "a note of\n" not in drawn(50), "one line while the columns fit so"
    assert drawn(26).splitlines()[1].split() == ["id", "note"]
    wrapped = [line.rstrip() for line in drawn(20).splitlines()[2:]]
    assert wrapped == ["17  a note of some", "    length"], "at spaces"
    tight = drawn(6)
    assert "…" not in tight
    assert "".join(tight.split()).endswith("anoteofsomelength"), tight


FRAMEWORKS = ("tensorflow", "jax", "torch", "keras")
READ_COMMANDS = [
    ["runs", "--db", "{url}"],
    ["show", "{hour0}", "--tree", "--db", "{url}"],
    ["history", "--db", "{url}"],
    ["compare", "{hour0}", "{hour1}", "--db", "{url}"],
    ["report", "{hour0}", "--to", "{tmp}/report.html", "--db", "{url}"],
    ["rules", "imagenet"],
]
# Every read command in one fresh process, one after another: after each, no framework may have
# been imported (a module, once imported, stays in sys.modules, so the first to import one is named).
_NO_FRAMEWORK = """
import json, sys
from typer.testing import CliRunner
from aiperf.cli.main import app
for args in json.loads(sys.argv[1]):
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, (args, done.output)
    loaded = [m for m in json.loads(sys.argv[2]) if m in sys.modules]
    assert not loaded, f"aiperf {' '.join(args)} imported {loaded}"
"""


def test_read_commands_start_no_framework(db, tmp_path):
    """Issue 26 item 8: reading records never imports a deep-learning framework (seconds and
    log lines); only the commands that build models (verify, flops, run) load one."""
    import subprocess
    import sys

    url, ids = db
    commands = [[a.format(tmp=tmp_path, url=url, **ids) for a in c] for c in READ_COMMANDS]
    result = subprocess.run(
        [sys.executable, "-c", _NO_FRAMEWORK, json.dumps(commands), json.dumps(FRAMEWORKS)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "report.html").is_file()


def test_read_commands_print_json_with_stable_keys(db):
    """Issue 26 item 7: --json on runs, show, history and compare, for scripts (docs/json.md)."""
    url, ids = db
    listed = json.loads(_aiperf(80, "runs", "--json", "--db", url))
    assert {r["run_id"] for r in listed} == set(ids.values())
    hour0 = next(r for r in listed if r["run_id"] == ids["hour0"])
    assert hour0["valid"] == "unverified" and hour0["division"] == "closed" and hour0["ops"] > 0
    assert next(r for r in listed if r["run_id"] == ids["lost"])["ops"] is None
    shown = json.loads(_aiperf(80, "show", str(ids["hour0"]), "--json", "--db", url))
    assert shown["verdict"].startswith("not valid until verified") and shown["verified"] is None
    assert shown["score"]["regulated_score"] > 0
    assert shown["recipe"]["optimizer"] == "sgd" and shown["recipe"]["clip_norm"] is None
    assert shown["recipe"]["lr_floor"] == 0.0  # a cosine's end (the LM track's 0.1), recorded too
    assert len(shown["trials"]) == len(_hour_long_trials()) and shown["review"] == []
    first = shown["trials"][0]  # 2 epochs of 384 samples; the phases and peak _grow_and_time gave
    assert first["samples_per_s"] == pytest.approx(2 * 384 / 1500.5)
    assert first["tokens_per_s"] is None  # a CNN trial
    tensor_ops = 2 * (384 * 1_500_000_000 + 128 * 500_000_000)
    assert first["mfu"] == pytest.approx(tensor_ops / (1500.5 + 250.0) / 1e11)
    assert first["compile_share"] == pytest.approx(120.25 / 1884.0)
    short = json.loads(_aiperf(80, "show", str(ids["short"]), "--json", "--db", url))
    assert {short["trials"][0][k] for k in ("samples_per_s", "mfu", "compile_share")} == {None}
    history = json.loads(_aiperf(80, "history", "--json", "--db", url))
    assert [r["run_id"] for r in history] == [ids["hour0"], ids["hour1"], ids["short"]]
    assert history[1]["ops_change_pct"] is not None, "the run_scores view's columns"
    compared = json.loads(
        _aiperf(80, "compare", str(ids["hour0"]), str(ids["hour1"]), "--json", "--db", url)
    )
    assert compared["a"]["run_id"] == ids["hour0"] and compared["figures"][0]["figure"]


def test_version():
    from aiperf import __version__

    assert _aiperf(80, "--version").strip() == f"aiperf {__version__}"


def test_reports_of_two_databases_never_overwrite_each_other(db, tmp_path, monkeypatch):
    """`aiperf report RUN` without --to names its file after the database and the run."""
    from aiperf.paths import database_label

    url, ids = db
    monkeypatch.chdir(tmp_path)
    _aiperf(80, "report", str(ids["hour0"]), "--db", url)
    assert [p.name for p in tmp_path.iterdir()] == [
        f"aiperf-report-{database_label(url)}-{ids['hour0']}.html"
    ]


def test_an_lm_trial_s_rate_is_in_tokens(db):
    """An LM trial's samples are windows of seq_len tokens: its rate is samples/s x seq_len."""
    import dataclasses

    from aiperf.arch.transformer import transformer_seed
    from aiperf.results.trial_figures import trial_figures

    url, ids = db
    with Store.open(url) as store:
        trial = store.get_run(ids["hour0"]).trials[0]
    lm = dataclasses.replace(trial, architecture=transformer_seed("lm-tiny").to_dict())
    figures = trial_figures(lm, {"w0": 1e11})
    assert figures.tokens_per_s == pytest.approx(64 * 2 * 384 / 1500.5)
    assert figures.mfu is not None and figures.compile_share is not None
    assert trial_figures(lm, {}).mfu is None  # no peak recorded for its worker: no MFU


def test_closing_a_run_imports_no_search():
    """`aiperf recover` closes a run and trains nothing: its code loads neither keras-tuner nor a
    framework (about 11 s of a Zen 3-speed core, each time a crashed run is closed)."""
    import subprocess
    import sys

    check = (
        "import json, sys; import aiperf.lifecycle.recovery; "
        "print(json.dumps([m for m in sys.argv[1:] if m in sys.modules]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", check, "keras_tuner", *FRAMEWORKS],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout) == []
