"""Where README's test command spends its time: each test's wall and CPU seconds (its worker's
own and its waited-for children's: snakemake, torchrun, the engines), summed by file and lane.

    python -m pytest -q -p benchmarks.suite_profile    # a JSON line per test to $SUITE_PROFILE
    python benchmarks/suite_profile.py /tmp/suite-profile.jsonl   # the tables

($SUITE_PROFILE defaults to /tmp/suite-profile.jsonl; remove it before a run: lines append.)

With $SUITE_CGROUP naming a cgroup v1 ``cpuacct`` folder the run is inside (as root:
``mkdir /sys/fs/cgroup/cpuacct/suite && echo $$ > /sys/fs/cgroup/cpuacct/suite/cgroup.procs``),
each worker moves into a child group of its own, and each test's row has ``group``: the CPU
seconds of everything the worker's group ran during the test, the fork server's snakemakes and
a daemon left running included, whatever else the machine runs.

A test's CPU counts only the processes it waited for (rusage of the worker and its reaped
children); a daemon it leaves running is not in it (benchmarks/suite_wall.py's /proc/stat figure
is the machine's). Wall minus CPU is the time a test waits: on a sleep, a timer, a lock, a core
the other worker holds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from collections import defaultdict
from pathlib import Path

import pytest

OUT = Path(os.environ.get("SUITE_PROFILE", "/tmp/suite-profile.jsonl"))
CGROUP = os.environ.get("SUITE_CGROUP")


def own_group() -> Path | None:
    """This worker's cpuacct group under $SUITE_CGROUP, made and joined at the first call."""
    if not CGROUP:
        return None
    group = Path(CGROUP) / os.environ.get("PYTEST_XDIST_WORKER", "main")
    if not group.is_dir():
        group.mkdir()
    if str(os.getpid()) not in (group / "cgroup.procs").read_text().split():
        (group / "cgroup.procs").write_text(str(os.getpid()))
    return group


def group_seconds(group: Path | None) -> float:
    return 0.0 if group is None else int((group / "cpuacct.usage").read_text()) / 1e9


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    group = own_group()
    wall, cpu, held = time.monotonic(), cpu_seconds(), group_seconds(group)
    yield
    row = {
        "test": item.nodeid,
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
        "start": time.time(),
        "wall": time.monotonic() - wall,
        "cpu": cpu_seconds() - cpu,
        "group": group_seconds(group) - held,
    }
    with OUT.open("a") as f:  # one short line per write: appends from two workers do not mix
        f.write(json.dumps(row) + "\n")


def table(rows: list[dict], key, cpu: str) -> list[tuple[str, float, float, int]]:
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for row in rows:
        s = sums[key(row)]
        s[0] += row["wall"]
        s[1] += row[cpu]
        s[2] += 1
    return sorted(((k, w, c, n) for k, (w, c, n) in sums.items()), key=lambda r: -r[2])


def main(path: str, top: int = 25) -> None:
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line]
    wall = sum(r["wall"] for r in rows)
    # the group's figure where the run had one: it sees the fork server's children too
    kind = "group" if any(r.get("group") for r in rows) else "cpu"
    cpu = sum(r[kind] for r in rows)
    seen = "the workers' cgroups" if kind == "group" else "waited-for processes"
    print(
        f"{len(rows)} tests: {wall:.1f} s of test wall over the workers, {cpu:.1f} CPU s ({seen})"
    )
    for title, key in (
        ("by lane", lambda r: r["test"].split("/")[1]),
        ("by file", lambda r: r["test"].split("::")[0]),
        ("by test", lambda r: r["test"]),
    ):
        print(f"\n{title}: CPU s, wall s, wall - CPU (waiting), tests")
        for name, w, c, n in table(rows, key, kind)[:top]:
            print(f"  {c:7.1f} {w:7.1f} {w - c:7.1f} {n:4d}  {name}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", help="the JSON lines of a run with the plugin")
    parser.add_argument("--top", type=int, default=25, help="rows per table (default 25)")
    args = parser.parse_args()
    main(args.profile, args.top)
