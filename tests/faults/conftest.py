"""Put tests/faults on sys.path so ``cases_*.py`` files can ``from fault_matrix import Case``; generate the task
files git does not keep before any row runs (rows assert that ``data/tasks`` does not change under them)."""

import sys
from pathlib import Path

import pytest

from rlm_lab.tasks import CHECKSUMS, DATA_DIR, ensure_files, task_from_slug

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


@pytest.fixture(scope="session", autouse=True)
def _task_files():
    for sums in sorted(DATA_DIR.glob(f"*/{CHECKSUMS}")):
        ensure_files(task_from_slug(sums.parent.name))
