"""The survey's building blocks in its own convention (arXiv 2608.27046 Table 3, Table 4, App. B.1), beside the book's.

The survey writes its costs for a canonical decoder: multi-head attention (as many KV heads as query heads), a
two-projection FFN of width d_ff, tied embeddings (one V x d matrix), no norm weights, and causal attention whose
score term over m tokens is 2 L m^2 d (half the full m x m matrix). In that convention, per token of a sequence of
length m and per model (Table 3):

    C_f^tok   = 2 L [4 d^2 + 2 d d_ff + m d] + 2 V d
    C_pf(S)   = 2 L S (4 d^2 + 2 d d_ff + S d) + 2 V d                 (logits of the last prompt position)
    C_dec     = sum_{t=1}^{T-1} [2 L (4 d^2 + 2 d d_ff + 2 (S + t) d) + 2 V d]
    |pi|      = L (4 d^2 + 2 d d_ff) + V d,     M_KV = 2 m L d elements per sequence
    C_b^tok  ~= 2 C_f^tok

and Table 4's work per iteration (B prompts, K samples, m = S + T; critic V and reward model R sized like the policy,
each with a d-wide scalar head): PPO  BK C_gen + BK m [C_f(ref) + C_f(R) + C_f(V)] + BK m [C_tr(pi) + C_tr(V)],
GRPO drops V (and keeps a learned R), DPO  B_pairs m [C_f(pi) + C_f(ref) + C_b(pi)] as printed.

The book's cost model (flops.py) reduces to these **exactly** under :func:`paper_convention`: the spec made MHA with
tied embeddings and no biases, the SwiGLU width I read as the two-projection width d_ff = 3 I / 2 (3 d I = 2 d d_ff),
and the teacher-forced attention term halved (:func:`book_forward_flops`, ``attention="paper"``). Three named
assumptions, not errors: GQA, SwiGLU and the full score matrix the CPU kernels execute make the book's numbers those
of the real model (tests/cost/test_paper_convention.py).

Two points inside the survey that its own formulas show (exact, under C_b = 2 C_f):

* its Sec. 2.6 calls the PPO - GRPO gap "precisely" the critic's training, BK m [C_f(V) + C_b(V)]; its Table 4 also
  runs the critic forward in Assessment, so the gap is BK m [2 C_f(V) + C_b(V)] = 4/3 of the stated term
  (:func:`ppo_grpo_gap`);
* its W_DPO counts one sequence of length m per pair, while its Algorithm 4 scores the chosen and the rejected
  completion under both pi and pi_ref: twice the printed expression (:func:`dpo_work`, ``sequences_per_pair``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from ..errors import RlmLabError
from . import flops as F
from .spec import ModelSpec


@dataclass(frozen=True)
class PaperDims:
    """The survey's symbols: L layers, d hidden, d_ff the FFN width (two projections), V vocabulary."""

    L: int
    d: int
    d_ff: Fraction
    V: int

    # ---- Table 3 -------------------------------------------------------------------------------
    def c_f_tok(self, m: int) -> Fraction:
        L, d, f, V = self.L, self.d, self.d_ff, self.V
        return 2 * L * (4 * d * d + 2 * d * f + m * d) + 2 * V * d

    def c_b_tok(self, m: int) -> Fraction:
        return 2 * self.c_f_tok(m)

    def c_tr_tok(self, m: int) -> Fraction:
        return 3 * self.c_f_tok(m)

    def c_pf(self, S: int) -> Fraction:
        L, d, f, V = self.L, self.d, self.d_ff, self.V
        return 2 * L * S * (4 * d * d + 2 * d * f + S * d) + 2 * V * d

    def c_dec(self, S: int, T: int) -> Fraction:
        L, d, f, V = self.L, self.d, self.d_ff, self.V
        steps = T - 1
        ctx = steps * S + steps * (steps + 1) // 2          # sum_{t=1}^{T-1} (S + t)
        return steps * (2 * L * (4 * d * d + 2 * d * f) + 2 * V * d) + 4 * L * d * ctx

    def c_gen(self, S: int, T: int) -> Fraction:
        return self.c_pf(S) + self.c_dec(S, T)

    def params(self) -> Fraction:
        return self.L * (4 * self.d ** 2 + 2 * self.d * self.d_ff) + self.V * self.d

    def m_kv(self, m: int) -> int:
        return 2 * m * self.L * self.d


def paper_dims(spec: ModelSpec) -> PaperDims:
    """The survey's (L, d, d_ff, V) of a dense model: d_ff = 3 I / 2, the two-projection FFN with the SwiGLU's
    products (3 d I = 2 d d_ff)."""
    if spec.moe_layers:
        raise RlmLabError(f"{spec.name} is a MoE model; the survey's Table 3 is written for a dense decoder")
    return PaperDims(spec.layers, spec.hidden, Fraction(3 * spec.intermediate, 2), spec.vocab)


def paper_convention(spec: ModelSpec) -> ModelSpec:
    """The spec in the survey's architecture: multi-head attention (KV heads = query heads), tied embeddings, no
    biases, no q/k norms, an LM head. Its hidden size must equal heads x head size (the survey's d)."""
    if spec.heads * spec.head_dim != spec.hidden:
        raise RlmLabError(f"{spec.name}: heads x head_dim = {spec.heads * spec.head_dim} is not the hidden size "
                          f"{spec.hidden}; the survey's attention projections are d x d")
    return replace(spec, name=f"{spec.name}/paper", kv_heads=spec.heads, tied=True, qkv_bias=False,
                   attention_bias=False, mlp_bias=False, qk_norm=False, head_out=None)


ATTENTION = ("full", "causal", "paper")


def book_forward_flops(spec: ModelSpec, m: int, attention: str = "full", logits_tokens: int | None = None) -> int:
    """The book's forward over m tokens under an attention convention: "full" (the book's default, the S x S matrix
    its CPU kernels execute), "causal" (the unmasked entries, m (m + 1) / 2 per head), "paper" (the survey's
    2 L m^2 d: half the full matrix)."""
    if attention not in ATTENTION:
        raise RlmLabError(f"attention must be one of {', '.join(ATTENTION)}, got {attention!r}")
    full = F.attention_flops(spec, m, m)
    att = {"full": full, "causal": F.attention_flops(spec, m, m, causal=True), "paper": full // 2}[attention]
    return F.matmul_flops(spec, m, logits_tokens) + att


def norm_params(spec: ModelSpec) -> int:
    """The norm weights the survey's |pi| leaves out: two per layer and the final one (plus Qwen3's q/k norms)."""
    return spec.layers * (2 * spec.hidden + (2 * spec.head_dim if spec.qk_norm else 0)) + spec.hidden


# ---- Table 4: work per iteration ---------------------------------------------------------------
def ppo_work(p: PaperDims, B: int, K: int, S: int, T: int) -> dict:
    """Table 4's PPO column (critic and reward model policy-sized, their d-wide head ignored): per stage."""
    m, n = S + T, B * K
    return {"generation": n * p.c_gen(S, T), "assessment": n * m * 3 * p.c_f_tok(m),
            "training": n * m * 2 * p.c_tr_tok(m)}


def grpo_work(p: PaperDims, B: int, K: int, S: int, T: int) -> dict:
    """Table 4's GRPO column: no critic (reference and a learned reward model forward in Assessment)."""
    m, n = S + T, B * K
    return {"generation": n * p.c_gen(S, T), "assessment": n * m * 2 * p.c_f_tok(m),
            "training": n * m * p.c_tr_tok(m)}


def dpo_work(p: PaperDims, pairs: int, S: int, T: int, sequences_per_pair: int = 2) -> dict:
    """DPO: B_pairs m [C_f(pi) + C_f(ref) + C_b(pi)] per scored sequence; ``sequences_per_pair`` 2 as Algorithm 4
    scores them (chosen and rejected), 1 as the survey's W_DPO prints it."""
    if sequences_per_pair not in (1, 2):
        raise RlmLabError(f"sequences_per_pair must be 1 (as printed) or 2 (as Algorithm 4 scores), got "
                          f"{sequences_per_pair!r}")
    m = S + T
    n = pairs * sequences_per_pair
    return {"generation": Fraction(0), "assessment": n * m * p.c_f_tok(m), "training": n * m * p.c_tr_tok(m)}


def ppo_grpo_gap(p: PaperDims, B: int, K: int, S: int, T: int) -> tuple[Fraction, Fraction]:
    """(the gap Table 4 gives, the term Sec. 2.6 states: BK m [C_f(V) + C_b(V)]). With a learned reward model in
    both columns the exact gap is BK m [2 C_f(V) + C_b(V)]: 4/3 of the stated term."""
    m = S + T
    gap = sum(ppo_work(p, B, K, S, T).values()) - sum(grpo_work(p, B, K, S, T).values())
    stated = B * K * m * (p.c_f_tok(m) + p.c_b_tok(m))
    return gap, stated
