"""``rlm-lab models``: list the zoo with parameter counts."""
from .zoo import ZOO, make_config


def register(sub):
    p = sub.add_parser("models", help="list the model zoo")
    p.set_defaults(func=run)
    return p


def run(args):
    print(f"{'name':<10} {'arch':<8} {'hidden':>6} {'layers':>6} {'heads':>5} {'kv':>3} {'experts':>7} {'params':>10}")
    for name, s in ZOO.items():
        cfg = make_config(name)
        print(f"{name:<10} {s.arch:<8} {s.hidden:>6} {s.layers:>6} {s.heads:>5} {s.kv_heads:>3} "
              f"{s.experts or '-':>7} {_params(cfg):>10,}")


def _params(cfg) -> int:
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    return sum(p.numel() for p in model.parameters())
