"""A run's progress as a person following it sees it (issue 26 item 3): the orchestrator publishes
its figures (on_progress; in a flow, the aiperf-progress and aiperf-best artifacts, tested on a real
flow run in tests/test_benchmark_flow.py) as the search starts, as each trial ends, at each tenth of
the budget while none ends, and as it ends at the whole budget. The real orchestrator, oracle and
store; trials are simulated plans that end on a timer (tests/test_orchestrator_wake.py's)."""

from __future__ import annotations

import queue
import time

from simulated_search import simulated_orchestrator
from test_orchestrator_wake import FAST, _Timed

from aiperf.lifecycle.live import PROGRESS_STEP, LiveFigures
from aiperf.train.messages import TrialResult, to_event
from aiperf.train.simulated import plan_trial


def search(tmp_path, budget_s: float, trial_s: float) -> tuple[list[LiveFigures], int, float]:
    """Run the orchestrator for `budget_s` on trials of `trial_s` each; what it published, how
    many trials ended, and the share of the budget used when the first trial started."""
    events: queue.Queue = queue.Queue()
    launched: list[float] = []

    def launch(request):
        launched.append(time.time())
        plan = plan_trial(request, time.time(), "worker-a", FAST)
        events.put({**to_event(plan.built), "sent_from": "tcp://127.0.0.1:40001"})
        result = TrialResult(request.trial_key, plan.status, plan.built, plan.epochs)
        return _Timed(result, trial_s)

    published: list[LiveFigures] = []
    orchestrator = simulated_orchestrator(
        tmp_path, launch, events=events, on_progress=published.append, grace_s=30.0
    )
    with orchestrator.recorder.store:
        started = time.time()
        summary = orchestrator.run(started, started + budget_s)
    return published, summary.trials, (launched[0] - started) / budget_s


def test_progress_moves_every_tenth_of_the_budget_while_no_trial_ends(tmp_path):
    # One trial, past the deadline.
    published, trials, first = search(tmp_path, budget_s=1.5, trial_s=2.0)
    assert trials == 1
    steps = [int(f.budget_used / PROGRESS_STEP + 1e-9) for f in published]
    assert steps[0] == 0 and published[0].budget_used < PROGRESS_STEP  # from the search's start
    # Each tenth, though no trial ended until the end: from the first trial's start on (the oracle's
    # first proposal is waited for; on a loaded machine that wait can take a few tenths of 1.5 s).
    assert set(range(int(first / PROGRESS_STEP), 11)) <= set(steps), (steps, first)
    assert steps == sorted(steps) and published[-1].budget_used == 1.0
    assert published[-1].trials_done == 1 and published[-1].trials_running == 0
    assert len(published) <= 13, "published every turn of the loop, not every tenth"


def test_progress_is_published_as_each_trial_ends_with_the_best_so_far(tmp_path):
    published, trials, _first = search(tmp_path, budget_s=1.5, trial_s=0.1)
    assert trials >= 5
    done = [f.trials_done for f in published]
    assert set(range(trials + 1)) <= set(done), done  # every trial's end, as it came
    last = published[-1]
    assert last.budget_used == 1.0 and last.trials_done == trials
    assert last.best_quality is not None and last.best_trial is not None
    assert last.total_ops > 0 and last.ops_per_s > 0
    # The best-so-far table's versions: a new best trial, each tenth, the end; not every trial's end.
    marks = [f.milestone() for f in published]
    assert marks[-1][2] and not any(end for _best, _step, end in marks[:-2])
    bests = {best for best, _step, _end in marks}
    assert len(set(marks)) <= 11 + len(bests) + 1, (marks, trials)
    text = last.markdown(7)
    assert text.startswith("## aiperf run 7: progress")
    assert f"{last.best_quality:.4f} (trial {last.best_trial})" in text
    assert "(100%)" in text and "OPS so far |" in text
