"""One validated benchmark config, built from a YAML profile plus command-line overrides.

A profile is the whole description of a workload (data, search space, epochs, validity rules);
the command line only changes how long and where it runs. Every value is checked before anything
touches the database or starts a worker, so a mistake costs nothing already recorded. The package's
modules, each one job, lowest first:

- gpu_backend: where the cluster has GPUs, trials train on JAX with jit (and which JAX platforms
  are a node's accelerators);
- host: what this host offers (cores, and NVIDIA GPUs through the one nvidia-smi call);
- values: the strict model and the single-value checks every section shares;
- workload, machine: the sections (data, search, train, validity; cluster, system);
- checks: a config against the machine (batch, devices, cores, workers, backends);
- schema: BenchmarkConfig, the sections validated together;
- layers: loading, the layers a run's settings come from merged into one config (load_config).

Importers take the public names from here.
"""

from aiperf.config.checks import (
    backend_installed,
    batch_problem,
    devices_problem,
    local_cores_problem,
    trial_devices,
)
from aiperf.config.host import machine_cores, nvidia_smi, visible_devices, visible_gpus
from aiperf.config.layers import (
    CUSTOM_PREFIX,
    SITE_FILE,
    RunRequest,
    available_profiles,
    config_layers,
    load_config,
    set_dotted,
    site_system,
)
from aiperf.config.machine import MLPERF_STATUS, ClusterConfig, SystemConfig, mlperf_status
from aiperf.config.schema import CHECK_MACHINE, BenchmarkConfig
from aiperf.config.values import MAX_BUDGET_S
from aiperf.config.workload import (
    AUTO,
    BACKENDS,
    FILE_COUNTED,
    PRECISIONS,
    TOKEN_KINDS,
    DataConfig,
    LimitsConfig,
    SearchConfig,
    SpaceConfig,
    TrainConfig,
    ValidityConfig,
)

__all__ = [
    "AUTO",
    "BACKENDS",
    "CHECK_MACHINE",
    "CUSTOM_PREFIX",
    "FILE_COUNTED",
    "MAX_BUDGET_S",
    "MLPERF_STATUS",
    "PRECISIONS",
    "SITE_FILE",
    "TOKEN_KINDS",
    "BenchmarkConfig",
    "ClusterConfig",
    "DataConfig",
    "LimitsConfig",
    "SearchConfig",
    "SpaceConfig",
    "SystemConfig",
    "TrainConfig",
    "ValidityConfig",
    "available_profiles",
    "backend_installed",
    "batch_problem",
    "config_layers",
    "devices_problem",
    "load_config",
    "RunRequest",
    "local_cores_problem",
    "machine_cores",
    "mlperf_status",
    "nvidia_smi",
    "set_dotted",
    "site_system",
    "trial_devices",
    "visible_devices",
    "visible_gpus",
]
