"""The machine's load, read before and after every measurement (a shared machine only ever adds time)."""

from __future__ import annotations

import os


def machine_load(cores: int | None = None, loadavg=os.getloadavg) -> dict:
    """The 1-, 5- and 15-minute load averages and the 1-minute one per core."""
    cores = cores or os.cpu_count() or 1
    la = [float(x) for x in loadavg()]
    return {"loadavg": la, "cores": cores, "per_core": la[0] / cores}
