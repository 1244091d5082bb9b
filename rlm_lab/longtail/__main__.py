"""``python -m rlm_lab.longtail --size cpu [--out data/runs/cpu] [--only packing ...]``: measure chapter 7."""

import argparse
import sys

from ..errors import RlmLabError
from .run import TECHNIQUES, measure


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rlm_lab.longtail", description=__doc__)
    ap.add_argument("--size", default="cpu")
    ap.add_argument("--out", default=None, help="folder for the ch07_* records (default: _build/runs/<size>)")
    ap.add_argument("--only", nargs="*", choices=TECHNIQUES)
    ap.add_argument("--force", action="store_true", help="set aside runs already in the --out folders")
    args = ap.parse_args(argv)
    try:
        for name, rec in measure(args.size, only=args.only, out=args.out, force=args.force).items():
            print("recorded", name, rec.dir, flush=True)
    except RlmLabError as e:
        print(f"rlm-lab: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
