"""``python -m rlm_lab.chapters.ch10_open_directions ...``: the same as ``rlm-lab open-directions ...``."""

import sys

from rlm_lab.cli import main

raise SystemExit(main(["open-directions", *sys.argv[1:]]))
