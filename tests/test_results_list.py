"""The results list (issue 27 items 1 and 4): verified packages imported into one database, ranked
per division, ruleset and workload, one row per system, only qualified results ranked (valid,
verified, a closed series of the rule's runs) and the others listed unranked with why; a package
that fails its checks or was imported already is refused in one line and the list is unchanged;
the list as a table at 80 columns, JSON, CSV and an HTML page that headless Chromium renders with
its plot."""

from __future__ import annotations

import csv
import io
import json
import shutil
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from conftest import TINY
from test_migrations import schema_drift
from typer.testing import CliRunner

from aiperf import paths
from aiperf.cli.main import app
from aiperf.ranking import importing, standings
from aiperf.ranking.page import build_page
from aiperf.results.series import SeriesRule
from aiperf.store import ResultRecord, Store, database
from aiperf.store.results_models import (
    RESULT_FIELDS,
    AlreadyImported,
    add_results,
    list_results,
)

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
WORKLOAD = "a" * 64


def result(
    id: int,
    system: str,
    ops: float,
    *,
    division: str | None = "closed",
    ruleset: str | None = "aiperf-rules-1.2",
    profile: str = "quick",
    workload: str | None = WORKLOAD,
    valid: bool = True,
    verified: bool = True,
    reasons: list[str] | None = None,
    series: str | None = None,
    index: int | None = None,
    accelerators: int = 0,
    cores: int | None = 8,
    days: int = 0,
    submitter: str | None = None,
    nodes: int = 1,
    interval: tuple[float, float] | None = None,
) -> ResultRecord:
    """A results row made directly, for the ranking's own tests."""
    return ResultRecord(
        id=id,
        events_sha256=f"{id:064x}",
        run_id=id,
        system_name=system,
        submitter=submitter,
        status=None,
        nodes=nodes,
        accelerator_model="H200" if accelerators else None,
        accelerators=accelerators,
        cores=cores,
        workers=2,
        ops=ops,
        regulated_score=ops / 2,
        mfu=0.1,
        best_val_accuracy=0.5,
        valid=valid,
        verified=verified,
        division=division,
        ruleset=ruleset,
        profile=profile,
        workload_hash=workload,
        run_date=T0 + timedelta(days=days),
        series=series,
        series_index=index,
        package=f"/packages/{id}",
        imported_at=T0,
        system_description=None,
        reasons=reasons if reasons is not None else ([] if valid else ["no trial completed"]),
        ops_low=None if interval is None else interval[0],
        ops_high=None if interval is None else interval[1],
    )


TOO_SHORT = "too short: budget 8 s is under the profile's minimum 60 s"


def _rows(group: standings.Group) -> list[tuple[int | None, str]]:
    return [(s.rank, s.system) for s in group.standings]


# --- ranking ---------------------------------------------------------------------------------------


def test_different_divisions_rulesets_and_workloads_are_never_ranked_together():
    results = [
        result(1, "alpha", 3e9),
        result(2, "beta", 2e9),
        result(3, "gamma", 9e9, division="open"),
        result(4, "delta", 8e9, ruleset="aiperf-rules-1.1"),
        result(5, "eps", 7e9, workload="b" * 64),
        result(6, "zeta", 6e9, profile="nightly"),
    ]
    groups = standings.rank(results)
    assert len(groups) == 5
    for g in groups:
        keys = {
            (s.key.division, s.key.ruleset, s.key.profile, s.key.workload_hash)
            for s in g.standings
        }
        assert keys == {(g.key.division, g.key.ruleset, g.key.profile, g.key.workload_hash)}
        assert g.standings[0].rank == 1
    (closed,) = [
        g
        for g in groups
        if g.key == standings.GroupKey("closed", "aiperf-rules-1.2", "quick", WORKLOAD)
    ]
    assert _rows(closed) == [(1, "alpha"), (2, "beta")]
    assert [g.key.division for g in standings.rank(results, division="open")] == ["open"]
    assert {g.key.profile for g in standings.rank(results, profile="nightly")} == {"nightly"}


def test_one_row_per_system_its_best_and_ties_share_a_rank():
    results = [
        result(1, "alpha", 2e9),
        result(2, "alpha", 5e9, days=1),  # alpha's best
        result(3, "beta", 5e9),
        result(4, "gamma", 1e9),
    ]
    (group,) = standings.rank(results)
    # Equal OPS share rank 1, listed by earlier date; the next rank is 3.
    assert _rows(group) == [(1, "beta"), (1, "alpha"), (3, "gamma")]
    assert group.standings[1].result_ids == (2,)


def test_results_whose_intervals_overlap_are_tied_and_those_apart_are_not(sqlite_url):
    """Four imported results, each with its OPS's 95% interval: alpha's and beta's overlap, so they
    share rank 1, marked tied; gamma's lies wholly under both (3), delta's under gamma's (4)."""
    rows = [
        result(1, "alpha", 10.0e9, interval=(9.0e9, 11.0e9)),
        result(2, "beta", 9.5e9, interval=(8.5e9, 10.5e9)),
        result(3, "gamma", 6.0e9, interval=(5.5e9, 6.5e9)),
        result(4, "delta", 4.0e9, interval=(3.8e9, 4.2e9)),
    ]
    with Store.open(sqlite_url) as store:
        add_results(store, [_row(r) for r in rows])
    (group,) = _listed(sqlite_url)
    assert [(r["system"], r["rank"], r["tied"]) for r in group["rows"]] == [
        ("alpha", 1, True),
        ("beta", 1, True),
        ("gamma", 3, False),
        ("delta", 4, False),
    ]
    assert group["rows"][1]["ops_interval"] == [8.5e9, 10.5e9]
    done = _aiperf("results", "list", "--db", sqlite_url)
    ranked = [line.split()[:2] for line in done.output.splitlines() if "GOPS" in line]
    assert ranked == [["=1", "alpha"], ["=1", "beta"], ["3", "gamma"], ["4", "delta"]]
    assert "±10%" in done.output  # alpha's: 1 GOPS either side of 10
    assert "=N: tied, their 95% intervals overlap" in done.output


def test_a_system_is_its_submitter_name_and_hardware():
    """Two sites' unnamed `node1`s, and one machine at two scales, are rows of their own; one
    system's runs on its one hardware stay one row."""
    results = [
        result(1, "node1", 4e9, submitter="site-a"),
        result(2, "node1", 3e9, submitter="site-b"),
        result(3, "node1", 2e9, submitter="site-a", days=1),  # site-a's node1 again: not its best
        result(4, "big", 9e9, nodes=64),
        result(5, "big", 1e9, nodes=4),
    ]
    (group,) = standings.rank(results)
    rows = [(s.rank, s.system, s.submitter, s.nodes) for s in group.standings]
    assert rows == [
        (1, "big", None, 64),
        (2, "node1", "site-a", 1),
        (3, "node1", "site-b", 1),
        (4, "big", None, 4),
    ]


def test_only_qualified_results_are_ranked_the_others_listed_below_with_why():
    """An invalid or unverified result gets no rank, however fast: it is listed after the ranked
    rows of its group with the reason in a few words."""
    results = [
        result(1, "fast-but-invalid", 9e9, valid=False, reasons=[TOO_SHORT]),
        result(2, "slow", 1e9),
        result(3, "unchecked", 8e9, verified=False),
        result(4, "slower", 0.5e9),
    ]
    (group,) = standings.rank(results)
    assert _rows(group) == [
        (1, "slow"),
        (2, "slower"),
        (None, "fast-but-invalid"),
        (None, "unchecked"),
    ]
    assert [s.reason for s in group.standings] == [None, None, "invalid: too short", "unverified"]
    assert [s.rank_text for s in group.standings] == ["1", "2", "-", "-"]
    assert group.standings[2].reasons == (TOO_SHORT,)
    # Every rule broken, in a few words each.
    both = result(
        5, "x", 1e9, valid=False, reasons=[TOO_SHORT, "no trial completed all its epochs"]
    )
    (alone,) = standings.rank([both])
    assert alone.standings[0].reason == "invalid: too short, no trial completed all its epochs"


def test_a_series_is_summarised_by_its_rule_with_its_spread(monkeypatch):
    """Five runs under a rule of five, extremes dropped, mean of the rest: ranked by that mean, the
    spread shown; a closed series short of the rule's runs is listed unranked below it, with why."""
    rule = SeriesRule(runs=5, drop=1, statistic="mean")
    monkeypatch.setattr(standings, "series_rule", lambda ruleset: rule)
    figures = [1.0e9, 2.0e9, 3.0e9, 4.0e9, 100.0e9]
    results = [
        result(i + 1, "alpha", ops, series="s1", index=i + 1) for i, ops in enumerate(figures)
    ]
    results += [result(10 + i, "beta", 50e9, series="s2", index=i + 1) for i in range(2)]
    (group,) = standings.rank(results)
    alpha, beta = group.standings
    assert (alpha.system, alpha.rank, alpha.runs) == ("alpha", 1, 5)
    assert alpha.ops.ranked == pytest.approx(3.0e9)  # mean of 2, 3, 4 GOPS
    assert (alpha.ops.minimum, alpha.ops.maximum, alpha.ops.median) == (1.0e9, 100.0e9, 3.0e9)
    assert alpha.ops.cv > 1.0
    assert (beta.rank, beta.runs, beta.valid_word, beta.qualified) == (None, 2, "few", False)
    assert beta.reason == "closed: 2 of 5 runs"
    # In the open division the rule's count does not hold a series back.
    open_results = [r.__class__(**{**vars(r), "division": "open"}) for r in results]
    (opened,) = standings.rank(open_results)
    # alpha's five runs spread so widely (CV over 100%) that its series' 95% interval takes in
    # beta's 50 GOPS: they tie, beta first by its higher ranked figure.
    assert [(s.rank_text, s.system, s.reason) for s in opened.standings] == [
        ("=1", "beta", None),
        ("=1", "alpha", None),
    ]


def test_a_systems_best_series_stands_for_it():
    results = [result(1, "alpha", 9e9, valid=False)]
    results += [result(2 + i, "alpha", 2e9, series="s", index=i + 1) for i in range(3)]
    (group,) = standings.rank(results)
    (alpha,) = group.standings
    assert alpha.series == "s" and alpha.runs == 3 and alpha.qualified


def test_csv_has_mlperf_summarizer_columns_then_aiperfs():
    groups = standings.rank(
        [
            result(1, "alpha", 3e9, accelerators=8),
            result(2, "beta", 2e9),
            result(3, "fast", 9e9, valid=False, reasons=[TOO_SHORT]),
        ]
    )
    rows = list(csv.DictReader(io.StringIO(standings.to_csv(groups))))
    assert list(rows[0])[:11] == [
        "division",
        "availability",
        "submitter",
        "system",
        "number_of_nodes",
        "host_processor_model_name",
        "host_processors_count",
        "accelerator_model_name",
        "accelerators_count",
        "framework",
        "notes",
    ]
    assert [
        (r["system"], r["rank"], r["reason"], r["accelerator_model_name"], r["accelerators_count"])
        for r in rows
    ] == [
        ("alpha", "1", "", "H200", "8"),
        ("beta", "2", "", "N/A", "0"),
        ("fast", "", "invalid: too short", "N/A", "0"),
    ]
    assert float(rows[0]["ops"]) == 3e9


def test_hardware_reads_nodes_or_mlperfs_fields():
    gpu = {"model": "NVIDIA H200", "memory_bytes": 1}
    described = {
        "nodes": [
            {"hostname": "n1", "accelerators": [gpu, gpu], "host_cores_total": 16},
            {"hostname": "n2", "accelerators": [gpu, gpu], "host_cores_total": 16},
        ]
    }
    assert importing.hardware(described) == {
        "nodes": 2,
        "accelerators": 4,
        "accelerator_model": "NVIDIA H200",
        "cores": 32,
    }
    cpu = {
        "number_of_nodes": "1",
        "accelerators_per_node": "0",
        "accelerator_model_name": "N/A",
        "host_processor_core_count": "8",
        "host_processors_per_node": "2",
    }
    assert importing.hardware(cpu) == {
        "nodes": 1,
        "accelerators": 0,
        "accelerator_model": None,
        "cores": 16,
    }


# --- the table, its migration and its unique event log -----------------------------------------------


def _row(r: ResultRecord) -> dict:
    values = {k: v for k, v in vars(r).items() if k != "id"}
    return values


def test_the_results_table_refuses_an_event_log_twice(db_url):
    with Store.open(db_url) as store:
        (first,) = add_results(store, [_row(result(1, "alpha", 3e9))])
        with pytest.raises(AlreadyImported, match=f"as result {first}"):
            add_results(store, [_row(result(2, "beta", 1e9)), _row(result(1, "alpha", 3e9))])
        assert [r.system_name for r in list_results(store)] == ["alpha"], "all or nothing"
        # The constraint itself, not only the query before inserting: the same row under a new id.
        columns = ", ".join(f for f in RESULT_FIELDS if f != "id")
        with pytest.raises(sa.exc.IntegrityError, match="events_sha256|result_event_log_unique"):
            with store.engine.begin() as c:
                c.execute(
                    sa.text(f"INSERT INTO results ({columns}) SELECT {columns} FROM results")
                )
        assert len(list_results(store)) == 1


def test_migration_0011_down_and_up(db_url):
    engine = database.open_engine(db_url)
    try:
        database.upgrade(engine)
        assert "results" in sa.inspect(engine).get_table_names()
        database.downgrade(engine, "0010")
        assert "results" not in sa.inspect(engine).get_table_names()
        database.upgrade(engine)
        columns = {c["name"] for c in sa.inspect(engine).get_columns("results")}
        assert {"events_sha256", "system_name", "ops", "series", "system_description"} <= columns
        assert schema_drift(engine) == []
    finally:
        engine.dispose()


# --- the commands on rows made directly ---------------------------------------------------------------


def _aiperf(*args: str, columns: int = 80):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": str(columns)})


@pytest.fixture
def listed(sqlite_url) -> str:
    rows = [
        result(1, "a-long-system-name-of-a-site+node2", 3.3e12, accelerators=8),
        result(2, "beta", 1.2e9, cores=64),
        *[result(10 + i, "gamma", 2e9 + i * 1e8, series="s", index=i + 1) for i in range(3)],
        result(20, "open-one", 5e9, division="open"),
        # Fastest of its group, with accelerators, but too short: listed last, unranked, unplotted.
        result(30, "too-short", 9e12, accelerators=4, valid=False, reasons=[TOO_SHORT]),
    ]
    with Store.open(sqlite_url) as store:
        add_results(store, [_row(r) for r in rows])
    return sqlite_url


def test_results_list_at_80_columns(listed):
    done = _aiperf("results", "list", "--db", listed)
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    assert not [line for line in lines if len(line.rstrip()) > 80], done.output
    assert "…" not in done.output
    headings = [line for line in lines if " division, " in line]
    assert headings == [
        f"closed division, aiperf-rules-1.2, profile quick, workload {WORKLOAD[:12]}",
        f"open division, aiperf-rules-1.2, profile quick, workload {WORKLOAD[:12]}",
    ]
    for value in ("3.3 TOPS", "H200 x 8", "gamma", "open-one", "CPU", "too-short", "too short"):
        assert value in done.output, value
    # The unranked row is last of its group, its rank "-", and why is said under the group (the
    # open group, all ranked, says nothing): no column for it crowds the figures out at 80 columns
    # (one had taken the place of the interval).
    (short, why) = [line for line in lines if "too-short" in line]
    assert short.split()[:2] == ["-", "too-short"], short
    assert why == "not ranked: too-short (invalid: too short)"
    closed, open_ = done.output.split("open division")
    assert closed.splitlines()[1].split() == [
        "rank",
        "system",
        "accelerators",
        "OPS",
        "95%",  # the interval, before the spread a wider terminal shows too
        "runs",
    ]
    assert "not ranked" not in open_


def test_results_list_json_and_csv(listed, tmp_path):
    done = _aiperf("results", "list", "--json", "--db", listed)
    assert done.exit_code == 0, done.output
    groups = json.loads(done.output)
    assert [g["division"] for g in groups] == ["closed", "open"]
    closed = groups[0]["rows"]
    assert [(r["rank"], r["system"], r["runs"], r["reason"]) for r in closed] == [
        (1, "a-long-system-name-of-a-site+node2", 1, None),
        (2, "gamma", 3, None),
        (3, "beta", 1, None),
        (None, "too-short", 1, "invalid: too short"),
    ]
    assert (closed[3]["valid"], closed[3]["reasons"]) == ("no", [TOO_SHORT])
    assert set(closed[1]["ops_summary"]) == {
        "runs",
        "median",
        "minimum",
        "maximum",
        "cv",
        "ranked",
        "low",  # the mean's 95% interval
        "high",
    }
    only_open = json.loads(
        _aiperf("results", "list", "--json", "--division", "open", "--db", listed).output
    )
    assert [g["division"] for g in only_open] == ["open"]
    done = _aiperf("results", "list", "--csv", "--to", str(tmp_path / "list.csv"), "--db", listed)
    assert done.exit_code == 0, done.output
    assert len((tmp_path / "list.csv").read_text().splitlines()) == 1 + 5


def _metered(r: ResultRecord, ops_per_watt: float, level: str, meters: str) -> ResultRecord:
    joules = r.ops * 60 / ops_per_watt
    return replace(
        r,
        ops_per_watt=ops_per_watt,
        energy_joules=joules,
        energy_level=level,
        energy_meters=meters,
    )


def test_by_ops_per_watt_ranks_within_one_level_and_meter_kind_and_lists_the_rest(sqlite_url):
    rows = [
        _metered(result(1, "fast-hot", 9e12, accelerators=8), 2e9, "L1", "bmc"),
        _metered(result(2, "slow-cool", 1e12, accelerators=8), 5e9, "L1", "bmc"),
        # more efficient still, but by its parts' counters: never ranked beside the BMCs
        _metered(result(3, "parts-only", 2e12, accelerators=8), 9e9, "below L1", "nvml+rapl"),
        result(4, "unmetered", 5e12, accelerators=8),
    ]
    groups = standings.rank(rows, by="ops-per-watt")
    assert [(g.key.energy, _rows(g)) for g in groups] == [
        ("L1, bmc", [(1, "slow-cool"), (2, "fast-hot")]),
        ("below L1, nvml+rapl", [(1, "parts-only")]),
        ("not metered", [(None, "unmetered")]),
    ]
    assert groups[2].standings[0].reason == "energy not metered"
    assert [_rows(g) for g in standings.rank(rows)] == [
        [(1, "fast-hot"), (2, "unmetered"), (3, "parts-only"), (4, "slow-cool")]
    ], "by OPS, energy groups nothing"

    with Store.open(sqlite_url) as store:
        add_results(store, [_row(r) for r in rows])
    done = _aiperf("results", "list", "--by", "ops-per-watt", "--db", sqlite_url, columns=120)
    assert done.exit_code == 0, done.output
    assert f"workload {WORKLOAD[:12]}, energy L1, bmc" in done.output
    assert (
        "5 GOPS/W" in done.output and "not ranked: unmetered (energy not metered)" in done.output
    )
    listed = json.loads(
        _aiperf("results", "list", "--by", "ops-per-watt", "--json", "--db", sqlite_url).output
    )
    assert [(r["system"], r["ops_per_watt"], r["energy"]) for r in listed[0]["rows"]] == [
        ("slow-cool", 5e9, "L1, bmc"),
        ("fast-hot", 2e9, "L1, bmc"),
    ]
    refused = _aiperf("results", "list", "--by", "watts", "--db", sqlite_url)
    assert refused.exit_code != 0 and "--by 'watts': give ops or ops-per-watt" in refused.output


def test_results_bad_input_is_one_line(listed, tmp_path):
    for args, words in [
        (("results", "list", "--division", "shut", "--db", listed), "closed or open"),
        (("results", "list", "--json", "--csv", "--db", listed), "not both"),
        (("results", "list", "--db", f"sqlite:///{tmp_path / 'none.db'}"), "no such file"),
        (("results", "import", str(tmp_path / "nowhere"), "--db", listed), "does not exist"),
    ]:
        done = _aiperf(*args)
        assert done.exit_code != 0 and words in done.output, (args, done.output)
        assert "Traceback" not in done.output


def test_list_and_page_start_no_framework(listed, tmp_path):
    """Reading the list imports no deep-learning framework (only import, which evaluates weights
    again, does)."""
    import subprocess
    import sys

    script = f"""
import sys
from typer.testing import CliRunner
from aiperf.cli.main import app
for args in (["results", "list", "--db", {listed!r}], ["results", "list", "--csv", "--db", {listed!r}],
             ["results", "page", "--to", {str(tmp_path / "p.html")!r}, "--db", {listed!r}]):
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
print(sorted(m for m in ("tensorflow", "jax", "torch", "keras", "prefect") if m in sys.modules))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


# --- the page in headless Chromium ------------------------------------------------------------------

RENDERED = """(() => ({
  title: document.title,
  headings: [...document.querySelectorAll('h2')].map(h => h.textContent),
  rows: [...document.querySelectorAll('table.ranking')].map(t =>
      [...t.querySelectorAll('tbody tr')].map(r => r.getBoundingClientRect().height > 0 ? r.dataset.system : null)),
  ranks: [...document.querySelectorAll('table.ranking tbody tr')].map(r => r.cells[0].textContent),
  greyed: [...document.querySelectorAll('table.ranking tbody tr')]
      .filter(r => getComputedStyle(r.cells[1]).color === 'rgb(136, 136, 136)').map(r => r.dataset.system),
  points: [...document.querySelectorAll('svg.plot')].map(svg =>
      [...svg.querySelectorAll('circle.point')]
        .filter(c => c.getBoundingClientRect().width > 0).map(c => c.dataset.system)),
  axes: [...document.querySelectorAll('svg.plot text.x-label')].map(t => t.textContent),
  external: [...document.querySelectorAll('[src], link[href], script')].length,
}))()"""


@pytest.mark.slow
def test_results_page_renders_in_headless_chromium(listed, tmp_path):
    import time

    from chromium import Chromium

    done = _aiperf("results", "page", "--to", str(tmp_path / "results.html"), "--db", listed)
    assert done.exit_code == 0, done.output
    page = tmp_path / "results.html"
    assert "http" not in page.read_text().replace('xmlns="http://www.w3.org/2000/svg"', "")
    browser = Chromium(tmp_path / "chromium-profile")
    try:
        browser.call("Network.enable")
        browser.navigate(page.as_uri())
        time.sleep(0.2)
        seen = browser.evaluate(RENDERED)
        requests = [e for e in browser.events if e.get("method") == "Network.requestWillBeSent"]
    finally:
        browser.close()
    assert seen["title"] == "aiperf results"
    assert len(seen["headings"]) == 2
    assert seen["rows"] == [
        ["a-long-system-name-of-a-site+node2", "gamma", "beta", "too-short"],
        ["open-one"],
    ]
    assert seen["ranks"] == ["1", "2", "3", "-", "1"]
    assert seen["greyed"] == ["too-short"]
    # The closed group has accelerators: beta and gamma (CPU only) are off its plot, and so is
    # too-short, unranked; the open group is CPU-only, plotted against cores.
    assert seen["points"] == [["a-long-system-name-of-a-site+node2"], ["open-one"]]
    assert seen["axes"][0].startswith("accelerators") and "cores" in seen["axes"][1]
    assert seen["external"] == 0
    assert [r["params"]["request"]["url"] for r in requests] == [page.as_uri()], (
        "it fetched nothing else"
    )


def test_page_plots_only_ranked_results():
    groups = standings.rank(
        [result(1, "alpha", 3e9), result(2, "beta", 9e9, valid=False, reasons=[TOO_SHORT])]
    )
    html = build_page(groups, now=T0)
    assert html.count('class="point"') == 1 and 'data-system="alpha"' in html.split("<svg")[1]
    assert "1 unranked result(s) of this group are not on the plot" in html
    assert '<tr class="result unqualified" data-rank="-" data-system="beta">' in html
    (none_ranked,) = standings.rank([result(3, "gamma", 1e9, verified=False)])
    assert "<svg" not in build_page([none_ranked], now=T0)


def test_page_plots_cpu_only_systems_against_cores():
    groups = standings.rank([result(1, "alpha", 3e9, cores=16), result(2, "beta", 2e9, cores=64)])
    html = build_page(groups, now=T0)
    assert html.count('class="point"') == 2 and "physical CPU cores" in html
    assert "<script" not in html and "2026-12-01 12:00 UTC" in html


# --- real runs from two databases, packaged and imported -----------------------------------------------


def _tiny_runs(folder: Path, name: str, runs: int = 1, facts: dict | None = None) -> Path:
    """The tiniest real runs: Keras trials on one worker for a few seconds, recorded in a database
    of their own, on a system named `name` (system.name); one run packaged, or several run as one
    series and packaged as a series package."""
    import uuid

    from aiperf.config import load_config
    from aiperf.lifecycle import run
    from aiperf.report.package import write_package
    from aiperf.report.series_package import write_series_package

    config = load_config(
        "quick",
        budget="8s",
        workers=1,
        db=f"sqlite:///{folder / 'aiperf.db'}",
        out=str(folder / "out"),
        seed=3,
        overrides={
            **TINY,
            "train.epochs": 1,
            "system.name": name,
            # Valid in the open division (TINY's data makes it open anyway): a few seconds' budget
            # and any accuracy meet its own rules, so both machines' results are ranked.
            "validity.min_budget_s": 5,
            "validity.accuracy_floor": 0.0,
            **(facts or {}),
        },
    )
    series = uuid.uuid4().hex if runs > 1 else None
    ids = []
    for index in range(1, runs + 1):
        outcome = run.run_benchmark(config, series=series, series_index=index if series else None)
        assert outcome.verified, "the run's own verification passed"
        ids.append(outcome.run_id)
    with Store.open_existing(config.db) as store:
        if series is not None:
            return write_series_package(store, series, folder / "package")
        return write_package(
            store, ids[0], folder / "package", paths.event_log_path(config.out, config.db, ids[0])
        )


@pytest.fixture(scope="module")
def two_packages(tmp_path_factory) -> tuple[Path, Path]:
    """Two machines' packages of one workload, recorded in two databases: machine-a's one run,
    machine-b's series of two."""
    return (
        _tiny_runs(
            tmp_path_factory.mktemp("a"), "machine-a", facts={"system.submitter": "Site A"}
        ),
        _tiny_runs(tmp_path_factory.mktemp("b"), "machine-b", runs=2),
    )


def _listed(url: str) -> list[dict]:
    done = _aiperf("results", "list", "--json", "--db", url)
    assert done.exit_code == 0, done.output
    return json.loads(done.output)


def _edit_one_epoch(package: Path, to: Path, run: str = "") -> Path:
    """A copy of the package (a series package: of its run folder `run`) whose log says one epoch
    trained 32 samples fewer."""
    copy = Path(shutil.copytree(package, to))
    log = copy / run / "events.log"
    lines = log.read_text().splitlines()
    for i, line in enumerate(lines):
        event = json.loads(line.removeprefix(":::MLLOG "))
        if event["key"] == "train_samples" and event["value"] >= 64:
            event["value"] -= 32
            lines[i] = ":::MLLOG " + json.dumps(event)
            break
    else:
        raise AssertionError("no epoch to edit")
    log.write_text("\n".join(lines) + "\n")
    return copy


def _refused(url: str, package: Path, *words: str) -> None:
    """`aiperf results import PACKAGE` exits 1 with one line naming the package and `words`."""
    done = _aiperf("results", "import", str(package), "--db", url)
    assert done.exit_code == 1, done.output
    (line,) = done.output.strip().splitlines()
    assert str(package) in line and all(w in line for w in words), line


@pytest.mark.slow
def test_two_machines_packages_make_one_ranked_list(two_packages, sqlite_url, tmp_path):
    a, b = two_packages
    done = _aiperf("results", "import", str(a), str(b), "--db", sqlite_url)
    assert done.exit_code == 0, done.output
    assert "imported run" in done.output and "(2 runs)" in done.output
    (group,) = _listed(sqlite_url)
    rows = group["rows"]
    assert sorted(r["system"] for r in rows) == ["machine-a", "machine-b"]
    # Two valid, verified open results: two ranked rows.
    assert group["division"] == "open"
    assert [(r["valid"], r["verified"], r["reason"]) for r in rows] == [("yes", True, None)] * 2
    assert [r["rank"] for r in rows] in ([1, 2], [1, 1])
    assert rows[0]["ops"] >= rows[1]["ops"] > 0
    assert all(r["verified"] and r["accelerators"] == 0 and r["cores"] for r in rows)
    by_system = {r["system"]: r for r in rows}
    assert (by_system["machine-a"]["runs"], by_system["machine-a"]["submitter"]) == (1, "Site A")
    series = by_system["machine-b"]
    assert series["runs"] == 2 and series["series"] and series["submitter"] is None
    summary = series["ops_summary"]
    assert summary["minimum"] <= series["ops"] <= summary["maximum"] and summary["cv"] >= 0
    # The series' 95% interval across its two runs; the single run's, as its own trials gave it.
    low, high = series["ops_interval"]
    assert low <= summary["median"] <= high
    single = by_system["machine-a"]
    assert single["ops_interval"] is None or (
        single["ops_interval"][0] <= single["ops"] <= single["ops_interval"][1]
    )
    before = _listed(sqlite_url)

    # Either package again, from anywhere, or one run of the series alone: refused, list unchanged.
    for again in (a, b, Path(shutil.copytree(a, tmp_path / "a-copy"))):
        _refused(sqlite_url, again, "imported already")
    (one_run,) = [p for p in b.iterdir() if p.name.startswith("run-")][:1]
    _refused(sqlite_url, one_run, "imported already")
    assert _listed(sqlite_url) == before

    # An edited log: refused naming the failed check, the list unchanged.
    edited = _edit_one_epoch(a, tmp_path / "edited")
    _refused(sqlite_url, edited, "checks fail", "total_operations")
    assert _listed(sqlite_url) == before
    # In a series package (into a database without its other runs): the whole series is refused.
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    edited = _edit_one_epoch(b, tmp_path / "edited-series", one_run.name)
    _refused(fresh, edited, "checks fail", f"{one_run.name}/total_operations")
    assert _listed(fresh) == []


@pytest.mark.slow
def test_packages_import_and_rank_alike_on_postgresql(two_packages, postgres_db, sqlite_url):
    """The whole import (checks, rows, the one-import constraint) on the engine a site's shared
    list runs on: the same list as SQLite's, and a second import refused."""
    a, b = two_packages
    for url in (sqlite_url, postgres_db):
        done = _aiperf("results", "import", str(a), str(b), "--db", url)
        assert done.exit_code == 0, done.output
    assert _listed(postgres_db) == _listed(sqlite_url)
    _refused(postgres_db, a, "imported already")


@pytest.mark.slow
def test_a_real_invalid_run_is_imported_and_listed_unranked_with_why(
    two_packages, short_real_run, tmp_path
):
    """A real run too short for its rules (the session's short real run, of system test-box: 12 s
    against the quick profile's 60) packages, verifies and imports like any other, and is listed
    below the ranked rows, with no rank and its rule named."""
    from aiperf.report.package import write_package

    a, _b = two_packages
    config, run_id = short_real_run.config, short_real_run.run_id
    with Store.open_existing(config.db) as store:
        short = write_package(
            store, run_id, tmp_path / "c", paths.event_log_path(config.out, config.db, run_id)
        )
    url = f"sqlite:///{tmp_path / 'list.db'}"
    done = _aiperf("results", "import", str(a), str(short), "--db", url)
    assert done.exit_code == 0, done.output
    rows = {r["system"]: r for group in _listed(url) for r in group["rows"]}
    assert (rows["machine-a"]["rank"], rows["machine-a"]["reason"]) == (1, None)
    invalid = rows["test-box"]
    assert (invalid["rank"], invalid["valid"], invalid["verified"]) == (None, "no", True), invalid
    assert invalid["reason"].startswith("invalid: too short"), invalid
    table = _aiperf("results", "list", "--db", url).output
    assert "invalid: too short" in table, table


@pytest.mark.slow
def test_a_refused_package_does_not_stop_the_others(two_packages, sqlite_url, tmp_path):
    a, b = two_packages
    edited = _edit_one_epoch(a, tmp_path / "edited")
    done = _aiperf("results", "import", str(edited), str(b), "--db", sqlite_url)
    assert done.exit_code == 1, done.output
    (group,) = _listed(sqlite_url)
    assert [(r["system"], r["runs"]) for r in group["rows"]] == [("machine-b", 2)]


@pytest.mark.slow
def test_a_series_package_whose_runs_are_not_its_series_is_refused(
    two_packages, sqlite_url, tmp_path
):
    from aiperf.report.series_package import SERIES_FORMAT

    a, _b = two_packages
    run_id = json.loads((a / "package.json").read_text())["run_id"]
    folder = tmp_path / "not-a-series"
    shutil.copytree(a, folder / f"run-{run_id}")
    runs = [{"run_id": run_id, "index": 1, "folder": f"run-{run_id}"}]
    document = {"format": SERIES_FORMAT, "series": "0" * 32, "runs": runs, "summary": {}}
    (folder / "series.json").write_text(json.dumps(document))
    _refused(sqlite_url, folder, "checks fail", "series_membership")
    assert _listed(sqlite_url) == []
