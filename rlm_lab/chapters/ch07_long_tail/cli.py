"""``rlm-lab longtail`` (also ``rlm-lab chapter 7 run``): measure chapter 7's techniques, each against
its prediction, one record ``ch07_<technique>`` per technique.

    rlm-lab longtail --size smoke                             # into _build/runs/smoke (not committed)
    flock -x /tmp/rlm-lab-measure.lock rlm-lab longtail --size cpu --out data/runs/cpu   # the committed ones
"""

from __future__ import annotations

from ...records.lifecycle import interruptible
from .run import TECHNIQUES, measure


def register(sub) -> None:
    p = sub.add_parser("longtail", help="measure chapter 7's long-tail techniques against their predictions")
    p.add_argument("--size", default="smoke", help="smoke | cpu (default smoke; gpu: not yet)")
    p.add_argument("--out", default=None, help="folder for the ch07_* records (default: _build/runs/<size>)")
    p.add_argument("--only", nargs="+", choices=TECHNIQUES, help="technique(s) to measure (default: all)")
    p.add_argument("--force", action="store_true", help="set aside runs already in the --out folders")
    p.set_defaults(func=main)


def main(args) -> int:
    interruptible()  # SIGINT / SIGTERM end the technique's record `interrupted`

    for name, rec in measure(args.size, only=args.only, out=args.out, force=args.force).items():
        print("recorded", name, rec.dir, flush=True)
    return 0
