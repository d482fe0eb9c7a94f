"""Loading a config: the layers a run's settings come from, merged as Dask merges its own config,
then checked against this machine and validated into one BenchmarkConfig.

A profile is the whole description of a workload (data, search space, epochs, validity rules);
the command line only changes how long and where it runs. The layers, lowest first (`config_layers`):

1. the site file's `system:` facts (SITE_FILE in AIPERF_PROFILE_DIR), under the profile's own
   (docs/package.md: the machine's facts are the site's to give and a profile's to change);
2. the profile, a packaged one or a file, and over it its name: a packaged profile's own, or
   custom-<sha of the file> for a file, whatever the file says;
3. a packaged profile's ruleset: its validity section, for that profile;
4. the environment: AIPERF_DB_URL over the profile's database;
5. the command line's `--set` overrides (dotted names, `set_dotted`);
6. the command line's own options (--budget, --workers, --db, --seed, --out, --cluster).

They are merged with dask.config.merge (a later layer's value wins, sections merge key by key), so
where a setting came from is read off one list; a `--set` whose value is a mapping (`--set
'cluster={kind: slurm}'`) merges into its section as --cluster-opt does. A layer that would replace
a section of a lower one with a value (`--set data.kind=x` over a profile whose `data:` is not a
mapping) is refused in one line rather than merged away. Every value is then checked, before
anything touches the database or starts a worker, so a mistake costs nothing already recorded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from aiperf import settings
from aiperf.config.checks import check_backends, worker_count
from aiperf.config.gpu_backend import train_on_gpus
from aiperf.config.host import gpu_evidence, node_gpus
from aiperf.config.schema import CHECK_MACHINE, BenchmarkConfig
from aiperf.config.values import MAX_BUDGET_S
from aiperf.errors import UserError
from aiperf.rules import load_ruleset
from aiperf.units import parse_duration
from aiperf.urls import environment_value

CUSTOM_PREFIX = "custom-"  # the name of every profile read from a file
# The site file in AIPERF_PROFILE_DIR: the machine's `system:` facts, under every profile's and --set.
# Its leading underscore keeps it from being read as a profile (no profile name starts with one).
SITE_FILE = "_site.yaml"


def available_profiles() -> list[str]:
    folder = resources.files("aiperf") / "profiles"
    return sorted(
        p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml")
    )


def _read_profile(name_or_path: str) -> tuple[dict[str, Any], str]:
    """The profile's settings and its name: a packaged profile's own, or custom-<sha> for a file."""
    path = Path(name_or_path)
    if name_or_path.endswith((".yaml", ".yml")):
        if not path.is_file():
            raise UserError(
                f"profile file {name_or_path} does not exist; give a YAML file or one of: "
                f"{', '.join(available_profiles())}"
            )
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = (
                "it is not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else exc.strerror
            )
            raise UserError(
                f"profile file {name_or_path} cannot be read ({reason}); give a YAML profile file"
            ) from None
        name = f"{CUSTOM_PREFIX}{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    elif name_or_path in available_profiles():
        text = (resources.files("aiperf") / "profiles" / f"{name_or_path}.yaml").read_text()
        name = name_or_path
    else:
        raise UserError(
            f"unknown profile {name_or_path!r}; use one of: {', '.join(available_profiles())} "
            "(or a path to a .yaml profile)"
        )
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise UserError(
            f"profile {name_or_path} is not valid YAML: {str(exc).splitlines()[0]}"
        ) from None
    if not isinstance(raw, dict):
        raise UserError(f"profile {name_or_path} must be a YAML mapping of settings")
    return raw, name


def site_system() -> dict[str, Any]:
    """The `system:` facts of the site file (SITE_FILE in AIPERF_PROFILE_DIR); none when unset or
    absent. A site file that is not a mapping with only a `system:` mapping is refused in one line."""
    folder = settings.text(settings.PROFILE_DIR)
    path = Path(folder) / SITE_FILE if folder else None
    if path is None or not path.is_file():
        return {}
    fix = f"site file {path} must hold only a `system:` mapping (name, submitter, status, ...)"
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        raise UserError(f"site file {path} cannot be read as YAML; {fix}") from None
    if not isinstance(raw, dict) or set(raw) - {"system"}:
        raise UserError(fix)
    system = raw.get("system") or {}
    if not isinstance(system, dict):
        raise UserError(fix)
    return system


def _first_error(exc: ValidationError) -> str:
    """One line for the first problem: the setting's dotted name and pydantic's message."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    message = err["msg"].removeprefix("Value error, ")
    return f"invalid setting {where}: {message}" if where else f"invalid profile: {message}"


@dataclass(frozen=True)
class RunRequest:
    """What a user asks a run to be: a profile and the options over it, as `aiperf run`, the
    benchmark flow's form and the nightly deployment take them. Made once where the user's
    options are read; None keeps the profile's value."""

    profile: str = "quick"
    budget: str | float | None = None
    workers: int | str | None = None
    db: str | None = None
    seed: int | None = None
    out: str | None = None
    cluster: str | dict[str, Any] | None = None  # a kind ("slurm"), or cluster settings
    overrides: Mapping[str, Any] | None = None  # --set: settings by dotted name


def config_layers(request: RunRequest) -> list[dict[str, Any]]:
    """The layers of a run's settings, lowest first (this module's docstring lists them); each is
    refused in one line where it cannot go over the layers below it."""
    written, name = _read_profile(request.profile)
    layers = [
        _site_layer(written),
        written,
        {"profile": name},
        _ruleset_layer(name, written),
        _environment_layer(),
    ]
    layers.append(_override_layer(_merge(layers), request.overrides or {}))
    options = {
        "budget": request.budget,
        "workers": request.workers,
        "db": request.db,
        "seed": request.seed,
        "out": request.out,
    }
    layers.append(_option_layer(_merge(layers), options, request.cluster))
    return layers


def _merge(layers: list[dict[str, Any]]) -> dict[str, Any]:
    """The layers merged as Dask merges its config: a later layer's value wins, sections merge key by
    key. Dask reads every key of a section as a name; one that is not text (a YAML `1:`) is refused
    as validation would refuse it."""
    import dask.config  # here, not at the top: importing Dask costs the CLI's every command

    for layer in layers:
        _names_are_text(layer, ())
    return dask.config.merge(*layers)


def _names_are_text(section: Mapping[Any, Any], where: tuple[str, ...]) -> None:
    for key, value in section.items():
        if not isinstance(key, str):
            raise UserError(
                f"invalid setting {'.'.join((*where, str(key)))}: Keys should be strings"
            )
        if isinstance(value, Mapping):
            _names_are_text(value, (*where, key))


def _site_layer(profile: Mapping[str, Any]) -> dict[str, Any]:
    """The site file's `system:` facts, under the profile's own system: facts and any --set."""
    site = site_system()
    if not site:
        return {}
    if not isinstance(profile.get("system", {}), dict):
        raise UserError("system: must be a mapping of facts (name, submitter, status, ...)")
    return {"system": site}


def _ruleset_layer(name: str, profile: Mapping[str, Any]) -> dict[str, Any]:
    """A packaged profile names its ruleset; its validity section is the ruleset's, for that profile."""
    if name.startswith(CUSTOM_PREFIX) or not profile.get("ruleset"):
        return {}
    rules = load_ruleset(profile["ruleset"]).for_profile(name)
    return {"validity": rules.validity()}


def _environment_layer() -> dict[str, Any]:
    """AIPERF_DB_URL, over the profile's database; a `db` override and --db win over it."""
    from_environment = environment_value(settings.DB_URL.name)  # kept out of workers: aiperf.urls
    return {"db": from_environment} if from_environment else {}


def _override_layer(below: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The command line's `--set` overrides, by dotted name; `profile` and `ruleset` cannot be."""
    layer: dict[str, Any] = {}
    for key, value in overrides.items():
        if key.split(".", 1)[0] in ("profile", "ruleset"):
            raise UserError(
                f"{key} cannot be overridden: choose a packaged profile with --profile, or give your "
                "own profile file (its result is in the open division)"
            )
        set_dotted(layer, key, value, below)
    return layer


def _option_layer(
    below: Mapping[str, Any],
    options: Mapping[str, Any],
    cluster: str | Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The command line's own options that were given, and its cluster: a kind ("slurm") or a
    mapping of cluster settings, over the cluster section below."""
    layer = {key: value for key, value in options.items() if value is not None}
    if cluster is not None:
        if not isinstance(below.get("cluster", {}), dict):
            raise UserError("cluster: must be a mapping of settings (kind, queue, walltime, ...)")
        layer["cluster"] = {"kind": cluster} if isinstance(cluster, str) else dict(cluster)
    return layer


def load_config(
    request: RunRequest | str = "quick", /, *, runs_here: bool = True, **options: Any
) -> BenchmarkConfig:
    """Profile + overrides -> a validated config, or a UserError naming the bad value.

    `request`: the run's request, or a profile's name with the request's other fields given as
    keywords (`options`: budget=..., overrides=...), as scripts and tests write it.

    A packaged profile's validity rules come from its ruleset. A profile file is named
    custom-<sha256 of its text, 12 digits> whatever it says inside, so no file can pass for a
    packaged profile; `profile` and `ruleset` cannot be overridden. `runs_here`: the config is for
    a run that starts on this machine, so refuse a train.backend this Python cannot import and
    cores it lacks (`CHECK_MACHINE`); off where a config is only judged (aiperf.results.division),
    so judging a run never depends on the judging machine."""
    if isinstance(request, str):
        request = RunRequest(**{"profile": request, **options})
    elif options:
        raise TypeError(f"give the options in the RunRequest, not beside it: {sorted(options)}")
    raw = _merge(config_layers(request))
    raw["budget_s"] = _budget_seconds(raw.pop("budget", "3m"))
    section = raw.get("cluster")
    kind = section.get("kind", "local") if isinstance(section, dict) else "local"
    train = raw.get("train")
    simulated = isinstance(train, dict) and train.get("trainer") == "simulated"  # uses no cores
    local = kind == "local" and not simulated
    gpus, found = _local_gpus(raw, local=local, runs_here=runs_here)
    gpu_run = train_on_gpus(
        raw, request.overrides or {}
    )  # GPUs: JAX with jit (aiperf.config.gpu_backend)
    per_trial = section.get("devices_per_trial") if isinstance(section, dict) else None
    raw["workers"] = worker_count(
        raw.get("workers", "auto"), local=local, gpus=gpus, found=found > 0, per_trial=per_trial
    )
    validity = raw.get("validity")
    if isinstance(validity, dict) and "min_budget" in validity:
        try:
            validity["min_budget_s"] = parse_duration(validity.pop("min_budget"))
        except ValueError as exc:
            raise UserError(f"validity.min_budget: {exc}") from None
    try:
        config = BenchmarkConfig.model_validate(raw, context=CHECK_MACHINE if runs_here else None)
    except ValidationError as exc:
        raise UserError(_first_error(exc)) from None
    if runs_here:
        check_backends(config, gpu_run, found > 0)
    return config


def _local_gpus(raw: dict[str, Any], *, local: bool, runs_here: bool) -> tuple[Any, int]:
    """cluster.gpus of a run on this machine (given, or found here; None: neither) and how many
    GPUs were found here (0: none, or none looked for).

    The one place found GPUs become cluster.gpus: the workers are then pinned one per GPU exactly
    as with a cluster.gpus given. A run on a node whose GPUs exist but cannot be used is refused
    in one line before anything starts (aiperf.config.host.node_gpus), never trained on its CPUs
    unasked. The user asks with train.device cpu, which looks for no GPU and is recorded (an open
    run); cluster.gpus 0 on a node with the driver's device files, or its libraries where nvidia-smi
    does not answer (host.gpu_evidence), is refused, naming them, so that no CPU run of a GPU node
    passes for a closed one."""
    section = raw.get("cluster")
    given = section.get("gpus") if isinstance(section, dict) else None
    train = raw.get("train")
    on_cpus = isinstance(train, dict) and train.get("device") == "cpu"
    if on_cpus and given not in (None, 0, "0"):
        raise UserError(
            f"train.device cpu trains on the CPUs, but cluster.gpus is {given}: drop one of them"
        )
    gpus = given if local else None
    if on_cpus or not local or not (section is None or isinstance(section, dict)):
        return gpus, 0
    if gpus is not None:
        seen = gpu_evidence() if gpus in (0, "0") and runs_here else []
        if seen:
            raise UserError(
                f"cluster.gpus 0 on a node with NVIDIA GPUs ({', '.join(seen[:3])}): to train on "
                f"its CPUs give --set train.device=cpu (an open run), or leave cluster.gpus out "
                f"to train on its GPUs"
            )
        return gpus, 0
    node = node_gpus()
    if node.problem and runs_here:
        raise UserError(node.problem)
    if not node.count:
        return None, 0
    raw["cluster"] = {**(section or {}), "gpus": node.count}
    return node.count, node.count


def _budget_seconds(value: Any) -> float:
    """The budget in seconds, refused in one line before anything is recorded when it is not a
    positive duration of at most MAX_BUDGET_S."""
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise UserError(f"--budget: {exc}") from None
    if seconds <= 0:
        raise UserError(f"--budget must be positive, got {value!r}; give e.g. --budget 3m")
    if seconds > MAX_BUDGET_S:
        raise UserError(
            f"--budget {value} is more than the longest budget aiperf takes, "
            f"{MAX_BUDGET_S // 86400:.0f} days; give e.g. --budget 2h"
        )
    return seconds


def set_dotted(
    raw: dict[str, Any], dotted: str, value: Any, below: Mapping[str, Any] | None = None
) -> None:
    """Set `dotted` (a.b.c) in `raw`, making the sections it names. Each of them must be a section
    in `raw` and in `below`, the layers `raw` goes over: merged, a value would replace it."""
    node, under = raw, below or {}
    *parents, leaf = dotted.split(".")
    for part in parents:
        node = node.setdefault(part, {})
        under = under.get(part, {})
        if not isinstance(node, dict) or not isinstance(under, Mapping):
            raise UserError(f"cannot set {dotted}: {part} is not a section")
    node[leaf] = value
