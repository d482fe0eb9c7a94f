"""The Store's writes of a run's facts before and after its search (peaks, feed, reference,
resolved settings, staging, description, provenance, score, verification, kept weights): each
one transaction that takes the run's claim and checks it first (aiperf.store.ownership), retried
(each sets values: a second run of it changes nothing). Part of aiperf.store.repository.Store."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from aiperf.store import ownership
from aiperf.store.base import StoreBase, retried
from aiperf.store.conversion import now, score_columns
from aiperf.store.models import Run, Score
from aiperf.store.ownership import RunClaim
from aiperf.store.records import CheckRecord, RecordNotFound, ScoreResult


class RunFacts(StoreBase):
    """A run's facts, written by the holder of its claim."""

    @retried
    def record_peaks(self, claim: RunClaim, worker_peaks: list[dict[str, Any]]) -> None:
        """Each worker's measured peak (aiperf.train.peak), measured before the timed window, and
        their sum, MFU's divisor. A resumed run measures again: the latest measurement stands."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            run = self._get(s, Run, run_id, "run")
            run.worker_peaks = [dict(peak) for peak in worker_peaks]
            run.peak_flops = (
                float(sum(float(peak["flops"]) for peak in worker_peaks)) if worker_peaks else None
            )

    @retried
    def record_feed(self, claim: RunClaim, feed: str | None, rates: list[dict[str, Any]]) -> None:
        """Which feed ran and each worker's feed and device rates (aiperf.train.feedrate),
        measured before the timed window. A resumed run measures again: the latest stands."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            run = self._get(s, Run, run_id, "run")
            run.data_feed = feed
            run.feed_rates = [dict(rate) for rate in rates]

    @retried
    def record_reference(self, claim: RunClaim, rates: list[dict[str, Any]]) -> None:
        """Each worker's bare Keras rate, or why it was skipped (aiperf.lifecycle.reference),
        measured before the timed window. A resumed run measures again: the latest stands."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            self._get(s, Run, run_id, "run").reference_rates = [dict(r) for r in rates]

    @retried
    def record_resolved_settings(
        self,
        claim: RunClaim,
        *,
        config: dict[str, Any],
        precision: str,
        division: str,
        deviations: list[str] | tuple[str, ...],
        config_hash: str,
    ) -> None:
        """The run's config once the settings its profile left to the devices are resolved
        (aiperf.train.auto: train.precision auto, search.space.batch_per_gib), before its first
        trial, with the precision, division and workload hash judged from it."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            run = self._get(s, Run, run_id, "run")
            run.config, run.precision = dict(config), precision
            run.division, run.deviations = division, list(deviations)
            run.config_hash = config_hash

    @retried
    def record_staging(self, claim: RunClaim, seconds: float) -> None:
        """Wall seconds the run's data took to stage (validate, convert or generate, copy to the
        nodes), before and outside its timed window, as MLPerf HPC times staging. A resumed run
        stages again, and the latest staging stands."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            self._get(s, Run, run_id, "run").staging_s = float(seconds)

    @retried
    def save_best_weights(self, claim: RunClaim, weights: dict[str, Any] | None) -> None:
        """The best trial's kept weights file (aiperf.results.remeasure.keep_best_weights): which
        trial and epoch, where, its sha256 and recorded accuracy; the latest scoring stands."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            self._get(s, Run, run_id, "run").best_weights = weights

    @retried
    def save_provenance(self, claim: RunClaim, provenance: dict[str, Any]) -> None:
        """What ran on the workers (aiperf.system.provenance); a resumed run records it again, and
        the latest stands."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            self._get(s, Run, run_id, "run").provenance = dict(provenance)

    @retried
    def save_system_description(self, claim: RunClaim, description: dict[str, Any]) -> None:
        """The compute nodes as they described themselves (aiperf.system.description); a resumed run
        describes them again, and the latest description stands."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            self._get(s, Run, run_id, "run").system_description = dict(description)

    @retried
    def save_score(
        self, claim: RunClaim, score: ScoreResult, *, ruleset: str | None = None
    ) -> None:
        """The run's score (replacing an older one), judged by `ruleset`; not yet verified."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            existing = s.scalar(select(Score).where(Score.run_id == run_id))
            if existing is not None:
                s.delete(existing)
                s.flush()
            s.add(Score(**score_columns(score), run_id=run_id, computed_at=now(), ruleset=ruleset))

    @retried
    def save_verification(self, claim: RunClaim, checks: list[CheckRecord]) -> None:
        """The result of recomputing the run's score from its records, with its stored score."""
        run_id = claim.run_id
        with self.session() as s:
            ownership.guard(s, claim)
            score = s.scalar(select(Score).where(Score.run_id == run_id))
            if score is None:
                raise RecordNotFound(f"run {run_id} has no score to verify")
            score.verification = [
                {"check": c.check, "passed": c.passed, "detail": c.detail} for c in checks
            ]
            score.verified = all(c.passed for c in checks)
