"""The LM track as its users run it: `aiperf run --profile lm-quick --budget 100s --workers 1` on this
machine, valid and verified, and the ranked `--profile enwik8` on the stand-in GPU node
(benchmarks/gpu_node_standin.sh, STANDIN_PROFILE=enwik8) over a stand-in in enwik8's format,
training on all its devices with JAX, jit and bfloat16.

Each is one real run through the CLI (Prefect flow, Dask workers, SQLite through the migrations)
made once per module; the tests read its database and run `aiperf verify` on it. The assertions ask
for work done (trials that trained, two shapes among them), which the profile's first two rounds
give on the slowest machine these tests run on. One worker, so its first round is one seed trial of
one epoch and the second a grown one, each with both cores; a worker per core would train a seed on
each first, side by side, and only then grow. With every process held to 1.2 CPUs and TensorFlow's
oneDNN off (a 2-vCPU Zen 3's speed and kernels) and another run beside it, the seed's epoch ended
50-63 s into the window and the grown trial's one epoch ended at 115 s or was stopped a tenth short
of its end: both trained, which is what the test counts. The window is 100 s: the grown trial,
which starts from its parent's kept weights a few seconds after the seed's epoch, trains for half a
minute or more before the deadline stops it, and its samples count.

Under aiperf-rules-1.7 (issue 49) lm-quick's loss ceiling is 2.25 nats/token, below the bigram
model's 2.32: a seed's first epoch (2.4-2.6) does not meet it. Under 1.7 a grown trial started from
fresh weights and met it only in the third round's second epoch, which a slow machine's 2 minutes
did not always reach (2.39 and 2.48 there: invalid). Under 1.8 each grown trial continues its
parent (search.inherit) with the field's recipe (AdamW, beta_2 0.95, clipping at 1, warm-up then
cosine to a tenth): 2 minutes on a 2-vCPU Zen 4 ended at 1.52, valid; the test's 100 s may end
either side of the ceiling on a slow machine. The test asks that the verdict and exit status are the
ceiling's, that verify passes, and that the grown trials record
the parent's epoch they grew from.
"""

from __future__ import annotations

import json
import math
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from nvidia_smi_samples import standin_node_run

from aiperf.data.enwik8 import ENWIK8_SHA256

ROOT = Path(__file__).resolve().parents[1]
CEILING, FLOOR = 2.25, 0.5972  # lm-quick's in aiperf-rules-1.7 and 1.8, nats/token


def _cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "aiperf.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=cwd,
        env=env,
    )


def _rows(db: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(db) as connection:
        return connection.execute(sql).fetchall()


@pytest.fixture(scope="module")
def lm_quick(tmp_path_factory):
    """`aiperf run --profile lm-quick --budget 100s --workers 1`, once (the module says why)."""
    folder = tmp_path_factory.mktemp("lm-quick")
    db = folder / "lm.db"
    done = _cli(
        "run",
        "--profile",
        "lm-quick",
        "--budget",
        "100s",
        "--workers",
        "1",
        "--db",
        f"sqlite:///{db}",
        "--out",
        str(folder / "out"),
        "--allow-concurrent",
        cwd=folder,
    )
    return done, db


@pytest.mark.slow
def test_lm_quick_is_valid_and_verified_with_two_transformer_shapes(lm_quick):
    done, db = lm_quick
    [(valid, verified, loss, regulated, ops, reasons)] = _rows(
        db, "SELECT valid, verified, best_val_loss, regulated_score, ops, reasons FROM scores"
    )
    # Valid exactly when under the ceiling (the module says why it may not be); exit 3 if not.
    assert bool(valid) == (loss <= CEILING), (loss, reasons)
    assert done.returncode == (0 if valid else 3), (done.stdout[-3000:], done.stderr[-3000:])
    assert valid or "loss over the ceiling" in reasons, reasons
    assert verified
    assert "best val loss" in done.stdout and "nats/token" in done.stdout  # the score table
    # aiperf-rules-1.7's regulation: ln((ln V - H) / (loss - H)), H the split's entropy floor
    factor = math.log((math.log(256) - FLOOR) / (loss - FLOOR))
    assert regulated == pytest.approx(ops * factor, rel=1e-9)
    [(division, ruleset, profile, config)] = _rows(
        db, "SELECT division, ruleset, profile, config FROM runs"
    )
    assert (division, ruleset, profile) == ("closed", "aiperf-rules-1.8", "lm-quick")
    # The attention kernel the run chose (aiperf.train.attention), TensorFlow on a CPU: unfused.
    train = json.loads(config)["train"]
    assert train["attention"] == "unfused"
    # How it trained, recorded with it (aiperf-rules-1.8's recipe; each trial's warm-up is searched
    # and stored with the trial's hyperparameters)
    recipe = ("optimizer", "beta_2", "clip_norm", "lr_schedule", "weight_decay")
    assert [train[k] for k in recipe] == ["adamw", 0.95, 1.0, "cosine", 0.1]
    warmups = _rows(db, "SELECT json_extract(hyperparameters, '$.warmup_epochs') FROM trials")
    assert warmups and all(w > 0 for (w,) in warmups), warmups
    # Every trial that trained: the seed's, and a grown one's, which on the slowest machine the
    # window may stop within its one epoch (its samples count all the same).
    trained_trials = _rows(
        db,
        "SELECT t.architecture, t.train_ops_per_sample, t.eval_ops_per_sample, t.best_val_loss, "
        "t.status, SUM(e.samples_trained), SUM(e.samples_evaluated) FROM trials t JOIN epochs e "
        "ON e.trial_id = t.id GROUP BY t.id HAVING SUM(e.samples_trained) > 0",
    )
    shapes = set()
    for architecture, train_ops, eval_ops, best_loss, status, trained, evaluated in trained_trials:
        spec = json.loads(architecture)
        assert spec["format"] == "aiperf-transformer/1" and spec["seq_len"] == 64
        shapes.add((spec["layers"], spec["d_model"], spec["heads"], spec["mlp_width"]))
        assert train_ops > 0 and eval_ops > 0 and train_ops == pytest.approx(3 * eval_ops, 0.05)
        if status == "completed":
            assert best_loss is not None and math.isfinite(best_loss)
        # Every epoch's samples are windows of 64 tokens: tokens = samples x 64.
        assert 0 < trained <= 2 * 4095 and 0 <= evaluated <= 2 * 511
    assert len(shapes) >= 2, shapes  # the seed and at least one grown transformer
    # Issue 49: a grown trial continues its parent (the profile's search.inherit): each records the
    # parent's epoch whose kept weights it grew from, one of the parent's complete epochs.
    grown = _rows(
        db,
        "SELECT c.inherited_epoch, e.complete FROM trials c LEFT JOIN epochs e "
        "ON e.trial_id = c.parent_trial_id AND e.epoch = c.inherited_epoch "
        "WHERE c.parent_trial_id IS NOT NULL AND c.train_ops_per_sample IS NOT NULL",
    )
    assert grown and all(epoch is not None and complete for epoch, complete in grown), grown
    verify = _cli("verify", "1", "--db", f"sqlite:///{db}", cwd=db.parent)
    assert verify.returncode == 0 and "all 19 checks pass" in verify.stdout, (
        verify.stdout[-3000:] + verify.stderr[-3000:]
    )
    assert "val_loss" in verify.stdout  # the re-measured loss, against loss_tolerance


@pytest.mark.slow
def test_lm_quick_report_s_score_over_time_ends_at_its_headline(lm_quick):
    """Issue 49: the report's score over time is judged by the run's own quality (its loss), so it
    ends at the headline's regulated score, not at next-token accuracy's."""
    from aiperf import quality
    from aiperf.report.timeline import (
        aiperf_checkpoints,
        counted_seconds,
        judge_of,
        score_over_time,
    )
    from aiperf.store import Store

    _, db = lm_quick
    with Store.open_existing(f"sqlite:///{db}") as store:
        run = store.get_run(1)
        elapsed = counted_seconds(run)
        assert elapsed is not None and run.score is not None
        last = score_over_time(run, aiperf_checkpoints(elapsed), judge_of(store, run))[-1]
    assert last.metric == quality.LOSS and last.best_quality == pytest.approx(
        run.score.best_val_loss
    )
    assert last.regulated_score == pytest.approx(run.score.regulated_score, rel=1e-9)


@pytest.mark.slow
def test_lm_quick_is_its_own_workload_in_history(lm_quick):
    """The LM result has its own profile, hash and quality: `aiperf history` shows its loss."""
    _, db = lm_quick
    history = _cli("history", "--db", f"sqlite:///{db}", "--profile", "lm-quick", cwd=db.parent)
    assert history.returncode == 0, history.stderr[-2000:]
    assert "loss 2." in history.stdout or "loss 1." in history.stdout, history.stdout
    listed = _cli("runs", "--db", f"sqlite:///{db}", "--json", cwd=db.parent)
    [run] = json.loads(listed.stdout)
    assert run["profile"] == "lm-quick" and run["best_val_loss"] <= 3.0


@pytest.fixture(scope="module")
def lm_standin(tmp_path_factory):
    """`STANDIN_PROFILE=enwik8 bash benchmarks/gpu_node_standin.sh DB 8 OUT`, once."""
    # 40 s: lm-tiny's first trial on 8 devices (its jit compiles included) completed 18-21 s into
    # the window with every process held to 1.2 CPUs and oneDNN off (a 2-vCPU Zen 3), another
    # run beside it, on 16 Ki tokens; the enwik8 stand-in's training split is 18,432 bytes. The
    # test asks for one.
    folder = tmp_path_factory.mktemp("lm-standin")
    return standin_node_run(folder, STANDIN_PROFILE="enwik8", STANDIN_BUDGET="40s")


@pytest.mark.slow
def test_the_standin_node_trains_enwik8_on_its_8_devices_with_jax_jit_bfloat16(lm_standin):
    """Issue 35's third Done-when, on issue 49's ranked LM profile: enwik8 over a stand-in in its
    format (its sizes cut to fit a CPU, so open and over the ceiling: exit 3 allowed) trains on
    all 8 devices with JAX, jit and mixed_bfloat16; the run is open, and says that the stand-in's
    bytes are not the enwik8 aiperf-rules-1.8 pins."""
    done, db = lm_standin
    assert done.returncode in (0, 3), (done.stdout[-3000:], done.stderr[-3000:])
    [(run_id, backend, jit, precision, feed, config)] = _rows(
        db, "SELECT id, backend, jit_compile, precision, data_feed, config FROM runs"
    )
    assert (backend, bool(jit), precision, feed) == ("jax", True, "mixed_bfloat16", "tokens")
    [(division, ruleset, profile, kind, source_sha256)] = _rows(
        db,
        "SELECT r.division, r.ruleset, r.profile, d.kind, json_extract(d.manifest, "
        "'$.source_sha256') FROM runs r JOIN datasets d ON d.run_id = r.id",
    )
    assert (division, ruleset, profile, kind) == ("open", "aiperf-rules-1.8", "enwik8", "enwik8")
    assert source_sha256 and source_sha256 != ENWIK8_SHA256
    said = done.stdout + done.stderr
    assert "the data is not enwik8 as aiperf-rules-1.8 pins it" in said, said[-3000:]
    assert f"the ruleset pins {ENWIK8_SHA256[:12]}" in said
    # JAX in bfloat16, but the stand-in's devices are CPUs, where cuDNN's fused attention does not
    # run (each worker's probe, aiperf.train.attention): the run chose and recorded unfused.
    assert json.loads(config)["train"]["attention"] == "unfused"
    [(peaks,)] = _rows(db, "SELECT worker_peaks FROM runs")
    assert [peak["fused_attention"] for peak in json.loads(peaks)] == [False]
    trials = _rows(
        db,
        "SELECT devices, placement, architecture FROM trials "
        f"WHERE run_id = {run_id} AND status = 'completed'",
    )
    assert trials, "at least one trial completed"
    for devices, placement, architecture in trials:
        assert devices == 8 and len(set(json.loads(placement))) == 8
        assert json.loads(architecture)["format"] == "aiperf-transformer/1"
    verify = _cli("verify", str(run_id), "--db", f"sqlite:///{db}", cwd=db.parent)
    assert verify.returncode == 0 and "checks pass" in verify.stdout, (
        verify.stdout[-3000:] + verify.stderr[-3000:]
    )
