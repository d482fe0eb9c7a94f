"""Epochs per trial by round, as AIPerf grows them (15, 30, 45, 60 on ImageNet): early rounds
screen many architectures cheaply, later rounds train the survivors' children longer."""

from __future__ import annotations


def epochs_for(trial_number: int, workers: int, schedule: list[int]) -> int:
    """Round r is the r-th wave of `workers` trials; past the schedule's end its last entry holds."""
    round_index = trial_number // max(1, workers)
    return schedule[min(round_index, len(schedule) - 1)]
