"""`aiperf run`'s exit status: the one policy that maps a finished run's record to a number.

A script or a scheduler tells a result it may publish from one it may not by the status alone,
without reading the output (README "Command line", docs/rules.md "Validity"). The statuses a run
can end with, and where each is decided:

    status  the run                                                  decided by
    ------  -------------------------------------------------------  ------------------------------
    0       scored, valid by its rules, every verification check ok  run_exit_code (EXIT_VALID)
    1       crashed (a traceback)                                    Python
    2       refused: a mistake in the command, nothing recorded      aiperf.cli.common.fail, main()
    3       scored and verified, but it breaks a validity rule       run_exit_code (EXIT_INVALID)
    4       a verification check failed, or it was never verified    run_exit_code
                                                                     (EXIT_VERIFICATION_FAILED)
    5       taken over by another process (recover, run --resume)    aiperf.cli.benchmark
                                                                     (EXIT_TAKEN_OVER)
    130     interrupted by SIGINT or SIGTERM                         aiperf.cli.benchmark

A series (`aiperf run --repeat`) ends with the highest of its runs' statuses (aiperf.cli.series).
why_not_valid is the one line printed beside a status other than 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiperf.store import RunRecord


# `aiperf run`'s exit status, so a script or a scheduler can tell a result it may publish from one
# it may not without reading the output (README "Command line", docs/rules.md "Validity"). Besides
# these: 1 is a crash (a traceback), 2 a user's mistake (one line, nothing recorded), 130 a run
# interrupted by SIGINT or SIGTERM.
EXIT_VALID = 0  # scored, valid by its rules, and every check of its verification passed
EXIT_INVALID = 3  # scored and verified, but it breaks a validity rule (too short, simulated, ...)
EXIT_VERIFICATION_FAILED = 4  # a check of its verification failed (or it was never verified)
# Another process (`aiperf recover`, `run --resume`) took the run over while this one had stopped
# beating: this process stopped without another write, and the run goes on being the other's. Not
# 2: nothing in the command was wrong, and a script must not fix and run again what runs elsewhere.
EXIT_TAKEN_OVER = 5


def run_exit_code(record: RunRecord) -> int:
    """0 only for a valid result whose every check passed; 4 when its verification failed (or
    never ran), whatever the rules say, since then not even its verdict can be trusted; else 3."""
    if record.score is None or record.verified is not True:
        return EXIT_VERIFICATION_FAILED
    return EXIT_VALID if record.score.valid else EXIT_INVALID


def why_not_valid(record: RunRecord) -> str:
    """One line: the checks that failed, or the rules the result breaks."""
    if record.score is None or record.verification is None:
        return "the result was not verified, so it is not valid"
    failed = [c.check for c in record.verification if not c.passed]
    if failed:
        return (
            f"verification FAILED ({', '.join(failed)}), so the result is invalid; "
            f"`aiperf verify {record.id}` shows each check"
        )
    return "the result is invalid: " + "; ".join(record.score.reasons)
