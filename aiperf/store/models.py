"""SQLAlchemy models: the SQL schema users query. Part of the product, so every column says what it
holds, constraints are explicit, and every change comes with an Alembic migration
(migrations/versions); no table is ever created outside a migration.

Times are UTC. Operation counts per sample are exact integers; run totals can pass 2**63 on a
large machine, so totals and rates are stored as floating point.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from aiperf.status import RunStatus, TrialStatus

RUN_STATUSES = tuple(s.value for s in RunStatus.stored())
TRIAL_STATUSES = tuple(s.value for s in TrialStatus)


class Base(DeclarativeBase):
    type_annotation_map = {
        dict[str, Any]: JSON,
        list[str]: JSON,
        list[dict[str, Any]]: JSON,
        datetime: DateTime(timezone=True),
    }


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class System(Base):
    """The machine under test, identified by a fingerprint of what shapes its speed."""

    __tablename__ = "systems"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64), unique=True)
    hostname: Mapped[str] = mapped_column(String(255))
    cpu_model: Mapped[str] = mapped_column(String(255))
    cpu_cores: Mapped[int] = mapped_column(Integer)
    memory_bytes: Mapped[int] = mapped_column(BigInteger)
    gpus: Mapped[dict[str, Any]] = mapped_column(JSON, doc="{'count': n, 'models': [...]}")
    platform: Mapped[str] = mapped_column(String(255))
    python_version: Mapped[str] = mapped_column(String(32))
    tensorflow_version: Mapped[str | None] = mapped_column(String(32))
    keras_version: Mapped[str] = mapped_column(String(32))
    keras_backend: Mapped[str] = mapped_column(String(32))
    first_seen_at: Mapped[datetime]


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        CheckConstraint(_in("status", RUN_STATUSES), name="run_status_known"),
        CheckConstraint("budget_s > 0", name="run_budget_positive"),
        CheckConstraint("workers >= 1", name="run_workers_positive"),
        CheckConstraint("division IN ('closed', 'open')", name="run_division_known"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    system_id: Mapped[int] = mapped_column(ForeignKey("systems.id"))
    profile: Mapped[str] = mapped_column(String(64))
    config: Mapped[dict[str, Any]] = mapped_column(JSON, doc="the whole validated config")
    seed: Mapped[int] = mapped_column(Integer)
    budget_s: Mapped[float] = mapped_column(Float)
    workers: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime]
    search_started_at: Mapped[datetime | None] = mapped_column(doc="start of the timed window")
    deadline: Mapped[datetime | None] = mapped_column(doc="when trials are told to stop")
    search_ended_at: Mapped[datetime | None] = mapped_column(doc="end of the timed window")
    flow_run_id: Mapped[str | None] = mapped_column(String(64))
    message: Mapped[str | None] = mapped_column(Text, doc="why a run failed or was interrupted")
    ruleset: Mapped[str | None] = mapped_column(
        String(64), doc="id-version of the rules it is judged by"
    )
    division: Mapped[str | None] = mapped_column(
        String(8), doc="closed (the packaged profile as it is) or open"
    )
    deviations: Mapped[list[str] | None] = mapped_column(
        JSON, doc="how an open run differs from its profile"
    )
    config_hash: Mapped[str | None] = mapped_column(
        String(64), doc="sha256 of the workload settings"
    )
    heartbeat_at: Mapped[datetime | None] = mapped_column(
        doc="last sign of life of the run's process; a running run without one for the timeout is lost"
    )
    precision: Mapped[str | None] = mapped_column(
        String(32), doc="float32, mixed_bfloat16 or mixed_float16"
    )
    backend: Mapped[str | None] = mapped_column(
        String(32), doc="Keras backend: tensorflow, jax or torch"
    )
    jit_compile: Mapped[bool | None] = mapped_column(Boolean, doc="trials compiled with XLA")
    peak_flops: Mapped[float | None] = mapped_column(
        Float,
        doc="sum of the workers' measured matmul peaks (FLOP/s) in the run's precision: MFU's divisor",
    )
    worker_peaks: Mapped[list[dict[str, Any]] | None] = mapped_column(
        JSON,
        doc="[{'worker', 'flops', 'dtype', 'device', 'seconds'}] each worker's peak, measured before the window",
    )
    data_feed: Mapped[str | None] = mapped_column(
        String(32), doc="the input pipeline that fed the trials (data.feed): tf.data, or dali"
    )
    feed_rates: Mapped[list[dict[str, Any]] | None] = mapped_column(
        JSON,
        doc="[{'worker', 'feed', 'feed_images_per_s', 'device_images_per_s', 'batch', ...}] each "
        "worker's feed rate against its devices' rate, measured before the window",
    )
    reference_rates: Mapped[list[dict[str, Any]] | None] = mapped_column(
        JSON,
        doc="[{'worker', 'samples_per_s', 'ops_per_s', 'batch', 'seconds', ...} or {'worker', "
        "'skipped'}] each worker's bare Keras rate in a clean process on its node, measured "
        "before the window (aiperf.train.bare_reference), or why it was not",
    )
    energy_windows: Mapped[list[dict[str, Any]] | None] = mapped_column(
        JSON,
        doc="[{'opened', 'closed', 'idle_s', 'nodes': [{'node', 'meters': [{'kind', 'joules', "
        "'seconds', 'mean_w', 'peak_w', 'samples', 'idle_w', 'stopped', ...}]} or {'node', "
        "'missing'}]}] per window segment, each metered node's energy (aiperf.lifecycle.metering)",
    )
    system_description: Mapped[dict[str, Any] | None] = mapped_column(
        JSON, doc="the compute nodes as they describe themselves (MLPerf-style fields)"
    )
    staging_s: Mapped[float | None] = mapped_column(
        Float, doc="seconds the dataset took to stage, before and outside the timed window"
    )
    best_weights: Mapped[dict[str, Any] | None] = mapped_column(
        JSON,
        doc="{'trial', 'epoch', 'file', 'sha256', 'val_accuracy'}: the best trial's weights, kept for verify",
    )
    provenance: Mapped[dict[str, Any] | None] = mapped_column(
        JSON,
        doc="what ran: {'prologue', 'scheduler', 'submit_files', 'workers': {worker: {'env', 'files'}}}",
    )
    owner: Mapped[str | None] = mapped_column(
        String(36),
        doc="token of the process that owns the running run (recover takes it by compare-and-set)",
    )
    series: Mapped[str | None] = mapped_column(
        String(36),
        index=True,
        doc="id (uuid4 hex) of the series of repeated runs it belongs to (aiperf run --repeat)",
    )
    series_index: Mapped[int | None] = mapped_column(
        Integer, doc="its place in its series, 1..N (None: not in a series)"
    )

    system: Mapped[System] = relationship()
    trials: Mapped[list[Trial]] = relationship(back_populates="run", order_by="Trial.number")
    score: Mapped[Score | None] = relationship(back_populates="run")
    windows: Mapped[list[SearchWindow]] = relationship(order_by="SearchWindow.segment")


class Dataset(Base):
    """A staged dataset, with the manifest that describes and checks it: one row per run that
    trained on it, and one (without a run) each time `aiperf stage` staged it on its own."""

    __tablename__ = "datasets"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int | None] = mapped_column(
        ForeignKey("runs.id", ondelete="CASCADE"), unique=True
    )
    staged_at: Mapped[datetime | None]
    name: Mapped[str] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(32))
    sha256: Mapped[str] = mapped_column(String(64))
    train_samples: Mapped[int] = mapped_column(Integer)
    val_samples: Mapped[int] = mapped_column(Integer)
    classes: Mapped[int] = mapped_column(Integer)
    manifest: Mapped[dict[str, Any]] = mapped_column(JSON)


class Trial(Base):
    __tablename__ = "trials"
    __table_args__ = (
        UniqueConstraint("run_id", "trial_key", name="trial_key_unique_in_run"),
        CheckConstraint(_in("status", TRIAL_STATUSES), name="trial_status_known"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    trial_key: Mapped[str] = mapped_column(String(32), doc="the oracle's trial id")
    number: Mapped[int] = mapped_column(Integer, doc="order of creation within the run, from 0")
    parent_trial_id: Mapped[int | None] = mapped_column(ForeignKey("trials.id"))
    operator: Mapped[str | None] = mapped_column(
        Text, doc="the morphism that made it from its parent, or 'seed'"
    )
    architecture: Mapped[dict[str, Any]] = mapped_column(JSON, doc="aiperf.arch.ArchSpec as JSON")
    hyperparameters: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16))
    worker: Mapped[str | None] = mapped_column(String(255))
    started_at: Mapped[datetime]
    ended_at: Mapped[datetime | None]
    parameters: Mapped[int | None] = mapped_column(
        BigInteger, doc="trainable + non-trainable weights"
    )
    train_ops_per_sample: Mapped[int | None] = mapped_column(BigInteger, doc="'aiperf' convention")
    eval_ops_per_sample: Mapped[int | None] = mapped_column(BigInteger, doc="'aiperf' convention")
    tensor_train_ops_per_sample: Mapped[int | None] = mapped_column(
        BigInteger, doc="'tensor' convention"
    )
    tensor_eval_ops_per_sample: Mapped[int | None] = mapped_column(
        BigInteger, doc="'tensor' convention"
    )
    best_val_accuracy: Mapped[float | None] = mapped_column(Float)
    best_val_loss: Mapped[float | None] = mapped_column(
        Float, doc="lowest of its complete epochs, nats per token (the LM track's quality)"
    )
    message: Mapped[str | None] = mapped_column(Text)
    # Where the trial's seconds went, measured on its worker.
    build_s: Mapped[float | None] = mapped_column(Float, doc="data feed and model built")
    count_s: Mapped[float | None] = mapped_column(Float, doc="operations counted analytically")
    compile_s: Mapped[float | None] = mapped_column(
        Float, doc="compile, and tracing of the first steps"
    )
    train_s: Mapped[float | None] = mapped_column(Float, doc="in training steps")
    evaluate_s: Mapped[float | None] = mapped_column(Float, doc="in evaluation steps")
    report_s: Mapped[float | None] = mapped_column(Float, doc="sending reports back")
    devices: Mapped[int | None] = mapped_column(
        Integer,
        doc="devices the trial trained on, data-parallel (None: recorded before 0008, one)",
    )
    placement: Mapped[list[str] | None] = mapped_column(
        JSON, doc="the devices, as the framework names them (e.g. ['cuda:0', 'cuda:1'])"
    )
    inherited_epoch: Mapped[int | None] = mapped_column(
        Integer,
        doc="the parent's epoch whose kept weights the model grew from (search.inherit); "
        "None: fresh weights",
    )

    run: Mapped[Run] = relationship(back_populates="trials")
    epochs: Mapped[list[Epoch]] = relationship(back_populates="trial", order_by="Epoch.epoch")


class Epoch(Base):
    """One epoch of one trial: what was trained and evaluated, and when. A partial epoch is one
    cut by the deadline; its samples count, its accuracy does not."""

    __tablename__ = "epochs"
    __table_args__ = (
        UniqueConstraint("trial_id", "epoch", name="epoch_unique_in_trial"),
        CheckConstraint(
            "samples_trained >= 0 AND samples_evaluated >= 0", name="epoch_samples_nonnegative"
        ),
        CheckConstraint("ended_at >= started_at", name="epoch_ends_after_start"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"), index=True)
    epoch: Mapped[int] = mapped_column(Integer, doc="from 0")
    started_at: Mapped[datetime]
    ended_at: Mapped[datetime]
    samples_trained: Mapped[int] = mapped_column(BigInteger)
    samples_evaluated: Mapped[int] = mapped_column(BigInteger)
    loss: Mapped[float | None] = mapped_column(Float)
    accuracy: Mapped[float | None] = mapped_column(Float)
    val_loss: Mapped[float | None] = mapped_column(Float)
    val_accuracy: Mapped[float | None] = mapped_column(Float)
    complete: Mapped[bool] = mapped_column(Boolean)

    trial: Mapped[Trial] = relationship(back_populates="epochs")


class Score(Base):
    __tablename__ = "scores"
    __table_args__ = (CheckConstraint("elapsed_s > 0", name="score_elapsed_positive"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), unique=True)
    elapsed_s: Mapped[float] = mapped_column(Float)
    total_ops: Mapped[float] = mapped_column(Float, doc="'aiperf' convention, train + eval")
    ops: Mapped[float] = mapped_column(Float, doc="total_ops / elapsed_s")
    tensor_ops: Mapped[float] = mapped_column(Float, doc="'tensor' convention FLOP/s")
    best_val_accuracy: Mapped[float | None] = mapped_column(Float)
    val_samples: Mapped[int] = mapped_column(Integer)
    regulated_score: Mapped[float] = mapped_column(
        Float, doc="ops * |ln(1 - capped accuracy)|; the LM track: ops * max(0, ln V - loss)"
    )
    best_val_loss: Mapped[float | None] = mapped_column(
        Float, doc="the LM track's quality, nats per token (aiperf.quality)"
    )
    trials_completed: Mapped[int] = mapped_column(Integer)
    samples_trained: Mapped[int] = mapped_column(BigInteger)
    samples_evaluated: Mapped[int] = mapped_column(BigInteger)
    valid: Mapped[bool] = mapped_column(Boolean)
    reasons: Mapped[dict[str, Any]] = mapped_column(JSON, doc="{'invalid': [every broken rule]}")
    computed_at: Mapped[datetime]
    ruleset: Mapped[str | None] = mapped_column(
        String(64), doc="id-version of the rules that judged it"
    )
    verified: Mapped[bool | None] = mapped_column(
        Boolean, doc="every check of `aiperf verify` passed"
    )
    verification: Mapped[list[dict[str, Any]] | None] = mapped_column(
        JSON, doc="[{'check': name, 'passed': bool, 'detail': text}] from the recomputation"
    )
    mfu: Mapped[float | None] = mapped_column(
        Float, doc="model FLOPs utilisation: tensor_ops / runs.peak_flops"
    )
    utilisation: Mapped[float | None] = mapped_column(
        Float, doc="seconds in training and evaluation steps / (workers x window seconds)"
    )
    ops_low: Mapped[float | None] = mapped_column(Float, doc="OPS's 95% interval, its low end")
    ops_high: Mapped[float | None] = mapped_column(Float, doc="OPS's 95% interval, its high end")
    regulated_low: Mapped[float | None] = mapped_column(Float, doc="the regulated score's, low")
    regulated_high: Mapped[float | None] = mapped_column(Float, doc="the regulated score's, high")

    run: Mapped[Run] = relationship(back_populates="score")


class SearchState(Base):
    """The oracle's own state after the latest trial ended: with the trials' records, enough to
    rebuild the oracle and resume the search after an interruption."""

    __tablename__ = "search_states"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), unique=True)
    oracle: Mapped[str] = mapped_column(String(32))
    state: Mapped[dict[str, Any]] = mapped_column(JSON)
    updated_at: Mapped[datetime]


class SearchWindow(Base):
    """One segment of a run's timed window: the first from the search's start, one more each time
    the run is resumed. The score's seconds are the sum of the segments; the gaps between them (the
    crash, the restart) are not counted."""

    __tablename__ = "search_windows"
    __table_args__ = (UniqueConstraint("run_id", "segment", name="search_window_segment_unique"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    segment: Mapped[int] = mapped_column(Integer, doc="from 0, in the order the segments ran")
    started_at: Mapped[datetime] = mapped_column(
        doc="workers up and warm: the segment's clock starts"
    )
    deadline: Mapped[datetime] = mapped_column(doc="when this segment's trials are told to stop")
    ended_at: Mapped[datetime | None] = mapped_column(
        doc="the last trial stopped; for a crashed segment, its last recorded epoch (aiperf recover)"
    )
