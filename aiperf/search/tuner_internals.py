"""Every use aiperf makes of keras-tuner's private names, in one place.

keras-tuner's Oracle is written for a Tuner that owns a project folder; aiperf drives it as a chief
with no folder (aiperf.search.oracles) and rebuilds it from database records on resume
(aiperf.search.resume). Three private methods of `keras_tuner.Oracle` have no public equivalent:

- `_save_trial(trial)`: create_trial, update_trial and end_trial write the trial to a JSON file of
  its own; aiperf keeps trials in its records, so the write is work that grows with every trial.
- `_check_consecutive_failures()`: end_trial walks every ended trial to count failures in a row
  and raises past a limit; the orchestrator counts them itself, in constant time a trial, and
  ends the run with its own message.
- `_record_values(trial)`: adds a trial's value hash to the set the oracle avoids proposing
  twice; a resumed oracle must hold the hashes of the recorded trials, and keras-tuner offers no
  public way to add them.

And one module global: `keras_tuner.src.tuners.bayesian.sklearn`, which the Bayesian oracle reads
and aiperf sets when it builds one, since aiperf.imports keeps keras-tuner's import-time try of
scikit-learn from running.

Checked against keras-tuner 1.4.8 (pyproject.toml admits 1.4.7 up to 2). tests/test_internals.py fails,
naming the method, if the installed release drops one or changes its parameters: read keras-tuner's
engine/oracle.py for each of them before raising that pin.
"""

from __future__ import annotations

from typing import Any

# The private methods, with the parameters (after self) each is called with here.
PRIVATE_METHODS: dict[str, tuple[str, ...]] = {
    "_save_trial": ("trial",),
    "_check_consecutive_failures": (),
    "_record_values": ("trial",),
}


def skip_trial_files(oracle: Any) -> None:
    """This oracle writes no trial file: aiperf's records keep the trials."""
    oracle._save_trial = lambda _trial: None


def skip_failure_count(oracle: Any) -> None:
    """This oracle never counts failed trials in a row: the orchestrator does."""
    oracle._check_consecutive_failures = lambda: None


def record_values(oracle: Any, trial: Any) -> None:
    """Mark `trial`'s values as tried, so `oracle` does not propose them again."""
    oracle._record_values(trial)


def give_bayesian_oracle_scikit_learn() -> None:
    """Set the module global `sklearn` that keras-tuner's Bayesian oracle reads, before one is built.

    keras-tuner's bayesian.py tries `import sklearn` when keras-tuner is imported and keeps None if
    it fails; aiperf.imports makes it fail (about 2 CPU-s in every run's head, which builds this
    oracle only when a profile asks for it), so the import happens here instead.
    """
    import sklearn.exceptions
    import sklearn.gaussian_process
    from keras_tuner.src.tuners import bayesian

    bayesian.sklearn = sklearn
