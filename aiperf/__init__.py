"""aiperf: an AutoML workload used as an AI-HPC benchmark.

The machine under test runs an architecture and hyperparameter search for a fixed wall-clock
budget; every trained and evaluated sample is counted analytically in operations, and the score
is operations per second over the budget (see docs/design.md and docs/flops.md).
"""

__version__ = "0.1.0"

from aiperf import imports

imports.install()
