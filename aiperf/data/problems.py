"""Bad data is the user's mistake: one line that names every bad file (the first few, and a count)."""

from __future__ import annotations

from aiperf.errors import UserError

SHOWN = 6


class DataError(UserError):
    """A dataset that cannot be staged. `problems` holds one message per bad file or folder."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source, self.problems = source, list(problems)
        shown = "; ".join(self.problems[:SHOWN])
        more = f"; and {len(self.problems) - SHOWN} more" if len(self.problems) > SHOWN else ""
        noun = "problem" if len(self.problems) == 1 else "problems"
        super().__init__(f"dataset {source}: {len(self.problems)} {noun}: {shown}{more}")

    def __reduce__(self):  # picklable across Dask and Prefect, which re-raise it elsewhere
        return (DataError, (self.source, self.problems))
