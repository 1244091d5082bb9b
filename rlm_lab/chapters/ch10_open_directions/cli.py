"""``rlm-lab open-directions`` (also ``rlm-lab chapter 10 run``): make chapter 10's
records, one part at a time, the prediction first.

    rlm-lab open-directions --size smoke                       # both parts, into _build/runs/smoke
    rlm-lab open-directions --size cpu --part parallel --only predict sft --out data/runs/cpu
    rlm-lab open-directions --size cpu --part parallel --only grpo measure --out data/runs/cpu
"""

from __future__ import annotations

from ...errors import RlmLabError
from ...records.lifecycle import interruptible
from ...sizes import check_size
from . import cases
from .cases import PARTS
from .run import MD_STEPS, PAR_STEPS, md_campaign, parallel_campaign

STEPS = {"parallel": PAR_STEPS, "multidomain": MD_STEPS}


def register(sub) -> None:
    p = sub.add_parser("open-directions", help="chapter 10: parallel reasoning and multi-domain RLVR, predicted "
                                               "then measured")
    p.add_argument("--size", default="smoke", help="smoke | cpu | gpu (default smoke)")
    p.add_argument("--part", nargs="+", choices=PARTS, default=list(PARTS), help="which part(s) (default both)")
    p.add_argument("--only", nargs="+", default=None,
                   help=f"steps of the part: parallel: {' '.join(PAR_STEPS)}; multidomain: {' '.join(MD_STEPS)} "
                        "(default all, in that order)")
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="GRPO seeds (default: the size's)")
    p.add_argument("--out", default=None, help="folder for the ch10_* records (default: _build/runs/<size>)")
    p.add_argument("--force", action="store_true", help="set aside runs already in the --out folders")
    p.set_defaults(func=main)


def main(args) -> int:
    check_size(args.size)
    cases.params(args.size)
    if args.seeds is not None and (not args.seeds or min(args.seeds) < 0):
        raise RlmLabError(f"--seeds must be integers >= 0, got {args.seeds}")
    allowed = [s for part in args.part for s in STEPS[part]]
    bad = [s for s in args.only or () if s not in allowed]
    if bad:
        raise RlmLabError(f"unknown step {bad[0]!r} of part {' and '.join(args.part)}; choose from: "
                          f"{', '.join(dict.fromkeys(allowed))}")
    interruptible()  # SIGINT / SIGTERM end the open record `interrupted`
    campaigns = {"parallel": parallel_campaign, "multidomain": md_campaign}
    for part in args.part:
        only = [s for s in args.only or STEPS[part] if s in STEPS[part]]
        if not only:
            continue
        for name, rec in campaigns[part](args.size, args.out, args.seeds, args.force, only).items():
            print("recorded", name, rec.dir, flush=True)
    return 0
