"""Where `make test`'s CPU goes: every process's CPU, once a second, joined with each test's start
and end on its pytest-xdist worker.

    python benchmarks/suite_cpu.py sample SAMPLES.jsonl &            # outside the measured group
    PYTHONPATH=benchmarks PYTEST_ARGS="-p suite_cpu" SUITE_CPU_TIMELINE=DIR \\
        bash benchmarks/slow_machine.sh -- env CI=true bash .ci/run
    kill %1; python benchmarks/suite_cpu.py report SAMPLES.jsonl DIR [--by-test]

On a slow machine the suite is CPU-bound (docs/performance.md, "The test suite"), so its time is
the CPU its tests ask for: this says which processes and which tests ask for it. `sample` reads
/proc: each process's user and system time since the last sample, by kind (the Dask workers that
multiprocessing spawns, `aiperf` heads, Prefect's servers, the pytest workers...) and by the pytest
worker it belongs to (PYTEST_XDIST_WORKER in its environment; the workers themselves by process id,
the lower gw0). As a pytest plugin (`-p suite_cpu`) it writes each test's start and end per worker
into $SUITE_CPU_TIMELINE. `report` prints the CPU by kind, then by test file (or test), heaviest
first, with each one's wall time. A process that starts and ends between two samples is missed.
"""

from __future__ import annotations

import bisect
import collections
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

HZ = os.sysconf("SC_CLK_TCK")
KINDS = (  # the first that the command line contains names the process
    ("uvicorn", "prefect server"),
    ("prefect server", "prefect server"),
    ("prefect worker", "prefect worker"),
    ("postgres", "postgres"),
    ("slurm", "slurm"),
    ("chrom", "browser"),
    ("multiprocessing", "dask worker"),
    ("distributed.cli", "dask worker"),
    ("aiperf", "aiperf head"),
    ("pytest", "pytest"),
)


def kind(command: str) -> str:
    for part, name in KINDS:
        if part in command:
            return name
    return command.split(" ")[0].rsplit("/", 1)[-1][:30] or "kernel"


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _process(pid: int) -> tuple[int, int]:
    """(start time, user + system ticks) of a process."""
    text = _read(f"/proc/{pid}/stat").decode()
    fields = text[text.rfind(")") + 2 :].split()
    return int(fields[19]), int(fields[11]) + int(fields[12])


def _owner(pid: int, name: str) -> str:
    for item in _read(f"/proc/{pid}/environ").split(b"\0"):
        if item.startswith(b"PYTEST_XDIST_WORKER="):
            return item.split(b"=", 1)[1].decode()
    return f"pid{pid}" if name in ("python", "python3", "pytest") else "none"


def sample(out: Path) -> None:
    """Write one line a second: {"t": time, "rows": [[owner, kind, cpu_s], ...]}, until killed."""
    seen: dict[int, tuple[int, int, str, str]] = {}  # pid: start, ticks, owner, kind
    with out.open("w") as f:
        while True:
            now = time.time()
            rows: dict[tuple[str, str], float] = collections.defaultdict(float)
            alive = set()
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                pid = int(entry)
                try:
                    start, ticks = _process(pid)
                    if pid not in seen or seen[pid][0] != start:
                        name = kind(_read(f"/proc/{pid}/cmdline").replace(b"\0", b" ").decode())
                        seen[pid] = (start, 0, _owner(pid, name), name)
                except (OSError, IndexError, ValueError):
                    continue
                alive.add(pid)
                _, before, owner, name = seen[pid]
                seen[pid] = (start, ticks, owner, name)
                if ticks > before:
                    rows[(owner, name)] += (ticks - before) / HZ
            for pid in set(seen) - alive:
                del seen[pid]
            rows_out = [[o, k, round(v, 3)] for (o, k), v in rows.items()]
            f.write(json.dumps({"t": now, "rows": rows_out}) + "\n")
            f.flush()
            time.sleep(max(0.0, 1.0 - (time.time() - now)))


# --- the pytest plugin: each test's start and end on its worker --------------------------------------


def _log(record: dict[str, Any]) -> None:
    folder = os.environ.get("SUITE_CPU_TIMELINE")
    if folder:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(Path(folder) / f"timeline-{worker}.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    _log({"id": nodeid, "start": time.time()})


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    _log({"id": nodeid, "end": time.time()})


# --- the report ------------------------------------------------------------------------------------


def _timelines(folder: Path) -> dict[str, list[tuple[float, float, str]]]:
    found = {}
    for path in sorted(folder.glob("timeline-gw*.jsonl")):
        starts, tests = {}, []
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if "start" in record:
                starts[record["id"]] = record["start"]
            else:
                tests.append((starts[record["id"]], record["end"], record["id"].split("@")[0]))
        found[path.stem.split("-", 1)[1]] = sorted(tests)
    return found


def report(samples_path: Path, folder: Path, by_test: bool) -> None:
    timelines = _timelines(folder)
    samples = [json.loads(line) for line in samples_path.read_text().splitlines()][1:]
    first = min(t[0][0] for t in timelines.values())
    last = max(t[-1][1] for t in timelines.values())
    samples = [s for s in samples if first <= s["t"] <= last + 1]
    by_kind: collections.Counter[str] = collections.Counter()
    by_pid: collections.Counter[str] = collections.Counter()
    for s in samples:
        for owner, name, used in s["rows"]:
            by_kind[name] += used
            if owner.startswith("pid"):
                by_pid[owner] += used
    busiest = sorted((p for p, _ in by_pid.most_common(2)), key=lambda p: int(p[3:]))
    workers = dict(zip(busiest, ("gw0", "gw1"), strict=False))
    total = sum(by_kind.values())
    print(f"tests ran {last - first:.0f} s; {total:.0f} CPU-s, {total / (last - first):.2f} CPUs")
    for name, used in by_kind.most_common(12):
        print(f"  {used:7.0f} CPU-s  {name}")
    key = (lambda i: i) if by_test else (lambda i: i.split("::")[0])
    starts = {w: [t[0] for t in tests] for w, tests in timelines.items()}
    cpu: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for s in samples:
        for owner, name, used in s["rows"]:
            worker = workers.get(owner, owner)
            if worker not in timelines:
                continue
            i = bisect.bisect_right(starts[worker], s["t"] - 0.5) - 1
            tests = timelines[worker]
            if i >= 0 and tests[i][1] >= s["t"] - 1.0:
                cpu[key(tests[i][2])][name] += used
    wall: dict[str, float] = collections.defaultdict(float)
    for tests in timelines.values():
        for start, end, test in tests:
            wall[key(test)] += end - start
    print(f"{'CPU-s':>7} {'wall s':>7}  {'test' if by_test else 'test file'}: its heaviest kinds")
    for test, used in sorted(cpu.items(), key=lambda item: -sum(item[1].values()))[:40]:
        kinds = ", ".join(f"{name} {v:.0f}" for name, v in used.most_common(3))
        print(f"{sum(used.values()):7.0f} {wall[test]:7.0f}  {test}: {kinds}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["sample"] and len(sys.argv) == 3:
        sample(Path(sys.argv[2]))
    elif sys.argv[1:2] == ["report"] and len(sys.argv) in (4, 5):
        report(Path(sys.argv[2]), Path(sys.argv[3]), by_test=sys.argv[4:] == ["--by-test"])
    else:
        sys.exit(__doc__)
