"""Puts this folder on sys.path so the tests share the scripted model (``scripted.py``)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
