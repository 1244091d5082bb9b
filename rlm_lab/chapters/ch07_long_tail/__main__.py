"""``python -m rlm_lab.chapters.ch07_long_tail --size cpu [--out data/runs/cpu] [--only packing ...]``: ``rlm-lab longtail``."""

import sys

from ...cli import main

if __name__ == "__main__":
    sys.exit(main(["longtail", *sys.argv[1:]]))
