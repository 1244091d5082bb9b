"""Put tests/faults on sys.path so ``cases_*.py`` files can ``from fault_matrix import Case``."""

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
