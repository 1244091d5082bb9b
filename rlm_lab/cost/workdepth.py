"""Work and depth of one RL iteration: its dependency graph, W, D and Brent's bounds.

The iteration is a DAG whose nodes are stages (Brent, JACM 1974, doi 10.1145/321812.321815; Blelloch, CACM 1996):

    prefill -> decode -> {old_logprob, ref_logprob, reward, values} -> advantage
            -> {actor_forward -> actor_backward -> optimizer, critic_update} -> weight_sync

(PPO folds the reference KL and the values into the per-token reward before GAE, so ref and
values feed the advantage; GRPO-family losses use ref and old log-probs in the actor loss, so
those feed the actor forward.) Each node carries its work W_v (seconds on one device) and depth
D_v (seconds on unboundedly many devices: the chain that cannot be split, e.g. R_max decode steps
of one sequence, or E*M sequential optimizer steps). Then

    W = sum_v W_v,    D = max over paths of sum_{v on path} D_v,
    max(W/p, D) <= T_p <= W/p + D            (Brent 1974; Blelloch, CACM 39(3) 1996,
                                               http://www.cs.cmu.edu/~scandal/cacm/node3.html)

Ignores: that a stage's own parallelism may be lower than p (the bound assumes a greedy
scheduler over the whole DAG), communication added by splitting stages over devices, memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import RlmLabError
from ..stages import Stage

S = Stage


def iteration_edges(stages: set[Stage], advantage_inputs: tuple[Stage, ...]) -> list[tuple[Stage, Stage]]:
    """Edges among the ``stages`` present; ``advantage_inputs`` are the stages the advantage needs."""
    prep = [s for s in (S.OLD_LOGPROB, S.REF_LOGPROB, S.REWARD, S.VALUES) if s in stages]
    edges = [(S.PREFILL, S.DECODE)]
    edges += [(S.DECODE, s) for s in prep]
    edges += [(s, S.ADVANTAGE) for s in advantage_inputs if s in stages]
    loss_inputs = [S.ADVANTAGE] + [s for s in prep if s not in advantage_inputs and s != S.REWARD]
    edges += [(s, S.ACTOR_FORWARD) for s in loss_inputs]
    edges += [(S.ACTOR_FORWARD, S.ACTOR_BACKWARD), (S.ACTOR_BACKWARD, S.OPTIMIZER)]
    if S.CRITIC_UPDATE in stages:
        edges.append((S.ADVANTAGE, S.CRITIC_UPDATE))
    if S.WEIGHT_SYNC in stages:
        edges.append((S.OPTIMIZER, S.WEIGHT_SYNC))
    return [(a, b) for a, b in edges if a in stages and b in stages]


def topological_order(nodes, edges) -> list:
    nodes = list(nodes)
    indeg = {v: 0 for v in nodes}
    for _, b in edges:
        indeg[b] += 1
    order, ready = [], [v for v in nodes if indeg[v] == 0]
    while ready:
        v = ready.pop(0)
        order.append(v)
        for a, b in edges:
            if a == v:
                indeg[b] -= 1
                if indeg[b] == 0:
                    ready.append(b)
    if len(order) != len(nodes):
        raise RlmLabError("the stage graph has a cycle")
    return order


@dataclass(frozen=True)
class WorkDepth:
    """A DAG with per-node work and depth (seconds, or FLOPs: any additive unit)."""

    work_of: dict
    depth_of: dict
    edges: tuple

    @property
    def work(self) -> float:
        """W = sum of node works."""
        return float(sum(self.work_of.values()))

    def critical_path(self) -> tuple[float, list]:
        """(D, path): the heaviest chain by node depth."""
        order = topological_order(self.work_of, self.edges)
        best = {v: (self.depth_of[v], [v]) for v in order}
        for v in order:
            for a, b in self.edges:
                if a == v and best[v][0] + self.depth_of[b] > best[b][0]:
                    best[b] = (best[v][0] + self.depth_of[b], best[v][1] + [b])
        return max(best.values(), key=lambda t: t[0]) if best else (0.0, [])

    @property
    def depth(self) -> float:
        return float(self.critical_path()[0])

    def brent(self, p: int) -> tuple[float, float]:
        """Brent's bounds (lower, upper) = (max(W/p, D), W/p + D) on p devices."""
        if p < 1:
            raise RlmLabError(f"p must be >= 1, got {p}")
        w, d = self.work, self.depth
        return max(w / p, d), w / p + d

    def parallelism(self) -> float:
        """Average parallelism W/D: beyond about this many devices, more devices stop helping."""
        d = self.depth
        return self.work / d if d else float("inf")

    def graph(self) -> dict:
        """The DAG as plain data: {"nodes": [...], "edges": [[a, b], ...]}."""
        return {"nodes": [str(v) for v in self.work_of], "edges": [[str(a), str(b)] for a, b in self.edges]}


def tail_bubble(lengths) -> float:
    """Idle fraction of decode slots under a synchronous barrier: 1 - sum R_i / (n R_max)
    (the idle share of a static batch's decode slots; constant step time assumed)."""
    lengths = list(lengths)
    if not lengths or min(lengths) < 0:
        raise RlmLabError("tail_bubble needs a non-empty list of non-negative lengths")
    r_max = max(lengths)
    return 0.0 if r_max == 0 else 1.0 - sum(lengths) / (len(lengths) * r_max)


def dynamic_sampling_inflation(p: float, group_size: int) -> float:
    """Expected generation work inflation of DAPO's dynamic sampling: 1 / (1 - p^G - (1-p)^G),
    with per-prompt success probability p (a group is useless when all G answers agree;
    DAPO's dynamic sampling, arXiv 2503.14476)."""
    if not 0 <= p <= 1 or group_size < 1:
        raise RlmLabError("dynamic_sampling_inflation needs 0 <= p <= 1 and group_size >= 1")
    useless = p ** group_size + (1 - p) ** group_size
    if useless >= 1:
        return float("inf")
    return 1.0 / (1.0 - useless)
