"""The benchmarked server's CPU time and peak memory, read from /proc (bench/ingest.py).

The server is gunicorn's master and workers, and the local PostgreSQL backends that
serve the benchmark's database.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Process:
    parent: int
    name: str
    cpu_ticks: int
    rss_bytes: int


def read_processes() -> dict[int, Process]:
    """Return every process's parent, name, CPU time and RSS, read from /proc."""
    processes = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # it just exited
        # The name may hold spaces and parentheses: the other fields follow the last ")".
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        cpu_ticks = int(fields[11]) + int(fields[12])  # utime + stime
        processes[int(entry)] = Process(
            int(fields[1]), name, cpu_ticks, int(fields[21]) * PAGE_SIZE
        )
    return processes


def process_tree(processes: dict[int, Process], root: int) -> list[int]:
    """Return root and its descendants."""
    children: dict[int, list[int]] = {}
    for pid, process in processes.items():
        children.setdefault(process.parent, []).append(pid)
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def database_backends(processes: dict[int, Process], database: str) -> list[int]:
    """Return the local PostgreSQL backends serving `database`: their title names it."""
    backends = []
    for pid, process in processes.items():
        if process.name != "postgres":
            continue
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if title.startswith("postgres: ") and f" {database} " in title:
            backends.append(pid)
    return backends


class ServerSampler(threading.Thread):
    """Sample the server's peak memory and its CPU time, every `interval` seconds.

    Memory is the summed RSS of gunicorn's master and workers. CPU time, counted from
    the first sample, is theirs and that of the PostgreSQL backends serving `database`
    when they run on this machine: a figure that other load on the machine inflates
    far less than it does the wall-clock rate.
    """

    def __init__(self, root: int, database: str | None, interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.root, self.database, self.interval = root, database, interval
        self.peak_rss = 0
        self.first: dict[int, int] = {}
        self.last: dict[str, dict[int, int]] = {"gunicorn": {}, "postgres": {}}
        self.stopped = threading.Event()
        self.has_baseline = False
        self.sample()  # the baseline, before any timed request
        self.has_baseline = True

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        processes = read_processes()
        tree = process_tree(processes, self.root)
        self.peak_rss = max(self.peak_rss, sum(processes[pid].rss_bytes for pid in tree))
        backends = database_backends(processes, self.database) if self.database else []
        for kind, pids in (("gunicorn", tree), ("postgres", backends)):
            for pid in pids:
                # Processes that start later (a reconnecting backend) count whole.
                self.first.setdefault(pid, 0 if self.has_baseline else processes[pid].cpu_ticks)
                self.last[kind][pid] = processes[pid].cpu_ticks

    def stop(self) -> None:
        self.stopped.set()
        self.join()
        self.sample()

    def cpu_seconds(self, kind: str) -> float:
        ticks = sum(last - self.first[pid] for pid, last in self.last[kind].items())
        return ticks / CLOCK_TICKS
