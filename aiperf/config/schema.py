"""The whole config of one run: BenchmarkConfig, its sections (aiperf.config.workload,
aiperf.config.machine) and the validators that check them together (a batch the data can hold,
devices and cores a trial can have). Stored verbatim with the run, and validated again wherever a
stored config is read; only a run starting here checks this machine (`CHECK_MACHINE`).
"""

from __future__ import annotations

from pydantic import Field, ValidationInfo, field_validator, model_validator

from aiperf.config.checks import (
    batch_problem,
    devices_problem,
    feed_problem,
    local_cores_problem,
    track_problem,
)
from aiperf.config.machine import ClusterConfig, SystemConfig
from aiperf.config.values import MAX_BUDGET_S, _one_line, _Strict, _utf8
from aiperf.config.workload import (
    FILE_COUNTED,
    DataConfig,
    SearchConfig,
    TrainConfig,
    ValidityConfig,
)
from aiperf.urls import DEFAULT_DB_URL, withhold_password


class BenchmarkConfig(_Strict):
    """Everything one run needs. Stored verbatim (as JSON) with the run."""

    profile: str  # a packaged profile's name, or custom-<sha of the file> for a profile file
    ruleset: str | None = (
        None  # the rules a packaged profile is judged by (aiperf/rules/), id-version
    )
    budget_s: float = Field(gt=0, le=MAX_BUDGET_S)
    workers: int = Field(ge=1)
    db: str = DEFAULT_DB_URL
    seed: int = Field(0, ge=0)
    out: str = "aiperf-out"
    data: DataConfig = DataConfig()
    search: SearchConfig = SearchConfig()
    train: TrainConfig = TrainConfig()
    validity: ValidityConfig = ValidityConfig()
    cluster: ClusterConfig = ClusterConfig()
    system: SystemConfig = SystemConfig()

    _out_one_line = field_validator("out")(_one_line)  # job logs and TLS certificates go under it
    _out_utf8 = field_validator("out")(_utf8)

    @field_validator("db")
    @classmethod
    def _db_without_password(cls, url: str) -> str:
        """The config is stored with the run and passed to the flow as a Prefect parameter, so it never
        holds a password: this process keeps it for its own connections (aiperf.urls)."""
        return withhold_password(url)

    @model_validator(mode="after")
    def _batch_fits_data(self) -> BenchmarkConfig:
        """Only where the config says how many samples there are (generated data, digits): a
        tfrecord or folder dataset's count comes from its files, and is checked against the staged
        manifest (`batch_problem`, called once it is known) rather than a default never read. On
        GPUs with batch_per_gib the listed batch_size is not what trains (the devices resolve it),
        so it too is checked against the staged count once the workers' peaks are known."""
        resolved_by_devices = bool(self.search.space.batch_per_gib) and self.cluster.gpus > 0
        if self.data.kind not in FILE_COUNTED and not resolved_by_devices:
            problem = batch_problem(self, *self.data.train_count())
            if problem:
                raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _devices_fit(self, info: ValidationInfo) -> BenchmarkConfig:
        """A trial's devices must be had: against this machine's cores only when a run starts here
        (`CHECK_MACHINE`), so a stored config validates on any machine."""
        problem = (
            devices_problem(self, this_machine=_checks_machine(info))
            or feed_problem(self, this_machine=_checks_machine(info))
            or track_problem(self)
        )
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _local_cores_fit(self, info: ValidationInfo) -> BenchmarkConfig:
        """Cores per worker times workers must fit this machine's cores, checked only when a run
        starts here (load_config passes `CHECK_MACHINE`, before anything is recorded; the local
        cluster checks again as it starts): a run recorded on a bigger machine must still validate
        where its records are verified, reported or resumed from."""
        problem = local_cores_problem(self) if _checks_machine(info) else None
        if problem:
            raise ValueError(problem)
        return self


# The validation context of a config for a run that starts on this machine (load_config): only then
# are the machine's cores checked. A stored config is validated without it, wherever it is read.
CHECK_MACHINE: dict[str, bool] = {"check_machine": True}


def _checks_machine(info: ValidationInfo) -> bool:
    """Whether this validation is for a run starting on this machine (context `CHECK_MACHINE`)."""
    return isinstance(info.context, dict) and bool(info.context.get("check_machine"))
