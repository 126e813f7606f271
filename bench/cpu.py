"""Where the CPU went during a run: this process, a process tree, the whole machine."""

from __future__ import annotations

import os
import resource
from pathlib import Path

_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def process_cpu_s() -> float:
    """CPU seconds (user and system) of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def machine_busy_s() -> float:
    """CPU seconds all cores spent busy since boot (from /proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) * _TICK_S


def pids_cpu_s(pids: list[int]) -> float:
    """CPU seconds (user and system) of these processes so far; a gone one counts nothing."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total * _TICK_S
