"""Repeated runs as a series (aiperf run --repeat): the series columns' migration, the summary's
figures, the ruleset's series rule."""

from __future__ import annotations

import statistics
import uuid

import pytest
import sqlalchemy as sa

from aiperf.results.series import SeriesRule, SeriesSummary, enough_runs, summarise
from aiperf.store import Store, database

# --- the migration ---------------------------------------------------------------------------------


def _series_columns(engine: sa.Engine) -> set[str]:
    return {c["name"] for c in sa.inspect(engine).get_columns("runs")} & {"series", "series_index"}


def test_series_columns_go_down_and_up_again(db_url):
    engine = database.open_engine(db_url)
    try:
        database.upgrade(engine)
        assert _series_columns(engine) == {"series", "series_index"}
        assert "ix_runs_series" in {i["name"] for i in sa.inspect(engine).get_indexes("runs")}
        database.downgrade(engine, "0009")
        assert _series_columns(engine) == set()
        database.upgrade(engine)
        assert _series_columns(engine) == {"series", "series_index"}
    finally:
        engine.dispose()


def test_the_store_records_and_reads_a_series(db_url):
    series = uuid.uuid4().hex
    with Store.open(db_url) as store:
        system = store.upsert_system(_SYSTEM)
        ids = [
            store.create_run(
                system_id=system,
                profile="quick",
                config={},
                seed=1,
                budget_s=60.0,
                workers=1,
                series=series,
                series_index=index,
            )
            for index in (2, 1, 3)
        ]
        alone = store.create_run(
            system_id=system, profile="quick", config={}, seed=1, budget_s=60.0, workers=1
        )
        runs = store.series_runs(series)
        assert [(r.id, r.series, r.series_index) for r in runs] == [
            (ids[1], series, 1),
            (ids[0], series, 2),
            (ids[2], series, 3),
        ]
        assert store.get_run(alone).series is None and store.get_run(alone).series_index is None
        assert store.series_runs(uuid.uuid4().hex) == []
        with pytest.raises(ValueError, match="index from 1"):
            store.create_run(
                system_id=system,
                profile="quick",
                config={},
                seed=1,
                budget_s=60.0,
                workers=1,
                series=series,
                series_index=0,
            )


_SYSTEM = {
    "fingerprint": "s" * 64,
    "hostname": "h",
    "cpu_model": "c",
    "cpu_cores": 2,
    "memory_bytes": 1 << 30,
    "gpus": {"count": 0, "models": []},
    "platform": "linux",
    "python_version": "3.11",
    "tensorflow_version": None,
    "keras_version": "3",
    "keras_backend": "tensorflow",
}


# --- the summary -----------------------------------------------------------------------------------


def test_summarise_known_values():
    values = [10.0, 12.0, 11.0, 30.0, 9.0]
    summary = summarise(values)
    assert summary == SeriesSummary(
        runs=5,
        median=11.0,
        minimum=9.0,
        maximum=30.0,
        cv=pytest.approx(statistics.stdev(values) / 14.4),
        ranked=11.0,  # no rule: the median
    )
    # squared deviations from 14.4 sum to 309.2; / (5 - 1) = 77.3
    assert summary.cv == pytest.approx(77.3**0.5 / 14.4)


def test_the_rule_drops_the_extremes_and_takes_the_mean_of_the_rest():
    values = [10.0, 12.0, 11.0, 30.0, 9.0]
    assert summarise(values, SeriesRule(runs=5, drop=1, statistic="mean")).ranked == 11.0
    assert summarise([1.0, 2.0, 4.0, 8.0], SeriesRule(runs=4, drop=1)).ranked == 3.0
    assert summarise([1.0, 2.0, 4.0, 8.0], SeriesRule(runs=3, drop=0)).ranked == 3.75
    assert (
        summarise([1.0, 2.0, 4.0, 8.0, 9.0], SeriesRule(runs=5, statistic="median")).ranked == 4.0
    )
    # Too few runs to drop any: all of them count (and the result is not a ranked one).
    assert summarise([1.0, 3.0], SeriesRule(runs=5, drop=1)).ranked == 2.0
    assert not enough_runs(2, SeriesRule(runs=5, drop=1))
    assert enough_runs(5, SeriesRule(runs=5, drop=1))
    assert enough_runs(1, None)


def test_one_run_has_no_spread_and_bad_figures_are_refused():
    assert summarise([7.0]) == SeriesSummary(1, 7.0, 7.0, 7.0, 0.0, 7.0)
    assert summarise([0.0, 0.0]).cv == 0.0
    with pytest.raises(ValueError, match="at least one"):
        summarise([])
    with pytest.raises(ValueError, match="finite"):
        summarise([1.0, float("nan")])
    with pytest.raises(ValueError, match="more runs than it drops"):
        SeriesRule(runs=2, drop=1)
    with pytest.raises(ValueError, match="mean or median"):
        SeriesRule(runs=3, statistic="mode")
