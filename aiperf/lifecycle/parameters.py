"""What a flow-run parameter may carry (the flows in flows/ check theirs here, first thing).

Prefect stores every flow run's parameters on its server, and anyone allowed to run a deployment
chooses them. So a parameter never holds a database password (it belongs where the flow runs:
AIPERF_DB_URL, PGPASSWORD or ~/.pgpass), and never a job setting that reaches a job script as text:
`cluster.prologue` is shell that every batch job runs, and queue, account, memory and interface are
written into its directives and its worker's command line as given. Those come from the profile or
`aiperf run --cluster-opt`, which only someone on the machine can change.

For the same reason a flow's `profile` is a name, never a path: a packaged profile's, or NAME for
NAME.yaml in the folder AIPERF_PROFILE_DIR names where the work pool's worker runs (its host's
choice, not the caller's). Its type, FlowProfile, is a Literal of those names as they are where the
flows' module is imported: by `prefect deploy`, so the run form offers them as a choice (and the
server refuses any other), and by the worker's flow run, which checks the name again.

A run resumed through a flow brings a config stored in whatever database
`db` names, so it is held to the same rule: its profile must be one of those, and its job settings
that profile's own.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import Field

from aiperf import settings
from aiperf.config import (
    CUSTOM_PREFIX,
    BenchmarkConfig,
    ClusterConfig,
    RunRequest,
    available_profiles,
)
from aiperf.errors import UserError
from aiperf.urls import split_password

# The cluster settings a parameter may choose: each is checked to a fixed form before any job script
# sees it (a kind, a flag, whole numbers, and a walltime that is parsed and written anew as HH:MM:SS).
PARAMETER_CLUSTER_SETTINGS = frozenset(
    {"kind", "adaptive", "walltime", "cores", "gpus", "workers_per_job"}
)


def check_parameters(
    db: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    config: object | None = None,
    from_deployment: bool = False,
) -> None:
    """Refuse, naming the fix, parameters that hold a database password or a job setting, and a
    whole `config` in a deployment's run (only `aiperf run` passes one, to its own flow run)."""
    overrides = overrides or {}
    for name, url in (("db", db), ("overrides db", overrides.get("db"))):
        if isinstance(url, str):
            bare, password = split_password(url)
            if password is not None:
                raise UserError(
                    f"flow parameter {name} holds a database password, which Prefect stores with the "
                    f"flow run; pass {bare} and set the password where the flow runs (AIPERF_DB_URL, "
                    "PGPASSWORD or ~/.pgpass)"
                )
    for key, value in overrides.items():
        for setting in sorted(_cluster_settings(key, value) - PARAMETER_CLUSTER_SETTINGS):
            if setting == "bmc":
                raise UserError(
                    "flow parameter overrides may not set cluster.bmc: it names the hosts the "
                    "workers send a password file's secret to, so it comes from the profile or "
                    "`aiperf run --set` only"
                )
            raise UserError(
                f"flow parameter overrides may not set cluster.{setting}: it is written into batch job "
                "scripts, so it comes from the profile or `aiperf run --cluster-opt` only"
            )
    if config is not None and from_deployment:
        raise UserError(
            "flow parameter config is for `aiperf run` only; a deployment's run takes profile, budget, "
            "workers, db, seed, out, cluster and overrides"
        )


def _cluster_settings(key: str, value: Any) -> set[str]:
    """The cluster settings one override sets: `cluster.queue`, or `cluster` with a mapping (or a kind)."""
    section, _, rest = key.partition(".")
    if section != "cluster":
        return set()
    if rest:
        return {rest.split(".", 1)[0]}
    return {str(k) for k in value} if isinstance(value, Mapping) else {"kind"}


# A profile's name: no folder, no suffix, nothing a path could be read from.
PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


def flow_profile(profile: object) -> str:
    """What `load_config` reads for a flow's `profile` parameter: a packaged profile's name, or the
    file NAME.yaml (or .yml) in AIPERF_PROFILE_DIR for a NAME that is not packaged. A path, or a
    name found in neither, is refused in one line before anything is recorded. `aiperf run
    --profile FILE` keeps reading any file: that is the user's own shell, not a deployment's."""
    if not isinstance(profile, str) or not PROFILE_NAME.fullmatch(profile):
        raise UserError(
            f"flow parameter profile {profile!r} is not a profile name: a flow run reads no path; "
            f"give one of {', '.join(available_profiles())}, or the name (no folder, no .yaml) of "
            "a profile in the folder AIPERF_PROFILE_DIR names where the work pool's worker runs"
        )
    if profile in available_profiles():
        return profile
    path = _host_profiles().get(profile)
    if path is None:
        folder = settings.text(settings.PROFILE_DIR)
        where = (
            f"nor in AIPERF_PROFILE_DIR ({folder})" if folder else "(AIPERF_PROFILE_DIR is unset)"
        )
        raise UserError(
            f"flow parameter profile {profile!r} is no packaged profile {where}; give one of "
            f"{', '.join(available_profiles())}, or put {profile}.yaml in that folder"
        )
    return str(path)


def flow_profiles() -> list[str]:
    """The profiles a flow run may name: the packaged ones, then AIPERF_PROFILE_DIR's other names."""
    packaged = available_profiles()
    return packaged + sorted(set(_host_profiles()) - set(packaged))


def flow_request(
    profile: str = "quick",
    budget: str = "",
    workers: int = 0,
    db: str = "",
    seed: int = -1,
    out: str = "",
    cluster: str = "profile",
    overrides: dict[str, Any] | None = None,
) -> RunRequest:
    """The run a flow's parameters ask for: its profile a name, never a path (`flow_profile`), and
    each "empty" parameter (below) as None, which keeps the profile's value."""
    return RunRequest(
        flow_profile(profile),
        budget=budget.strip() or None,
        workers=workers or None,
        db=db.strip() or None,
        seed=None if seed < 0 else seed,
        out=out.strip() or None,
        cluster=None if cluster == "profile" else cluster,
        overrides=overrides or None,
    )


def check_resumed_config(config: BenchmarkConfig, run_id: int) -> None:
    """Refuse to resume, through a flow, a run whose stored config a flow run could not have had:
    its profile neither packaged nor a file of AIPERF_PROFILE_DIR (matched by the digest in its
    name), or a job setting that is not that profile's own, such as a cluster.prologue (shell that
    each batch job runs). The database `db` names may be anyone's; `aiperf run --resume` is the
    way for a run the machine's own user started with their own profile or --cluster-opt."""
    own = _profile_cluster(config.profile)
    fix = f"resume it with `aiperf run --resume {run_id} --db URL` where it was started"
    if own is None:
        raise UserError(
            f"run {run_id} was made from profile {config.profile}, which is neither packaged nor in "
            f"AIPERF_PROFILE_DIR, so a flow run may not resume it; {fix}"
        )
    for name in sorted(set(ClusterConfig.model_fields) - PARAMETER_CLUSTER_SETTINGS):
        if getattr(config.cluster, name) != getattr(own, name):
            raise UserError(
                f"run {run_id}'s stored config sets cluster.{name}, which is written into batch job "
                f"scripts and is not its profile's own, so a flow run may not resume it; {fix}"
            )


def _host_profiles() -> dict[str, Path]:
    """The profiles of AIPERF_PROFILE_DIR by name (NAME.yaml, else NAME.yml); none when unset."""
    folder = settings.text(settings.PROFILE_DIR)
    if not folder or not Path(folder).is_dir():
        return {}
    found: dict[str, Path] = {}
    for suffix in (".yml", ".yaml"):  # .yaml wins over .yml
        for path in Path(folder).glob(f"*{suffix}"):
            name = path.name.removesuffix(suffix)
            if PROFILE_NAME.fullmatch(name) and path.is_file():
                found[name] = path
    return found


def _profile_cluster(profile: str) -> ClusterConfig | None:
    """The cluster settings a flow run of `profile` starts from: the packaged profile's, or those of
    the AIPERF_PROFILE_DIR file whose text has the digest in the name (config.py names a profile
    file custom-<sha256 of its text>); None when it is neither."""
    if profile in available_profiles():
        text = (resources.files("aiperf") / "profiles" / f"{profile}.yaml").read_text()
    elif profile.startswith(CUSTOM_PREFIX):
        texts = (p.read_text(errors="replace") for p in _host_profiles().values())
        digest = profile.removeprefix(CUSTOM_PREFIX)
        text = next(
            (t for t in texts if hashlib.sha256(t.encode()).hexdigest()[:12] == digest), ""
        )
        if not text:
            return None
    else:
        return None
    try:
        raw = yaml.safe_load(text) or {}
        section = raw.get("cluster") if isinstance(raw, dict) else None
        return ClusterConfig.model_validate(section if isinstance(section, dict) else {})
    except (yaml.YAMLError, ValueError):
        return None


# A flow's `profile`: one of flow_profiles() where the flows' module is imported (prefect deploy:
# the form's choices; the worker: the run's). A profile added to AIPERF_PROFILE_DIR later is offered
# once the deployments are made again (`make serve`, or `prefect deploy --all` with the variable set).
if TYPE_CHECKING:
    FlowProfile = str
else:
    FlowProfile = Literal[tuple(flow_profiles())]

# What a flow parameter's "empty" is, so the form shows one typed field each, never "None": the
# empty text, 0 workers or run id, seed -1, and cluster "profile" each mean the profile's own (or,
# for `resume`, a new run). Converted by flow_request.
Workers = Annotated[int, Field(ge=0)]
Seed = Annotated[int, Field(ge=-1)]
RunId = Annotated[int, Field(ge=0)]
FlowCluster = Literal["profile", "local", "slurm", "pbs", "lsf", "sge"]
