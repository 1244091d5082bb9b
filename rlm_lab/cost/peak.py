"""Peak memory per stage, not only model state (issue 12, item 5).

The cost model's :class:`~rlm_lab.cost.predict.Prediction` carries the model states each stage holds
(weights, AdamW state, gradients while training). This module adds what a stage allocates on top of
them and frees afterwards, term by term, so that the peak of every stage can be compared with a
measured peak:

* **generation**: the KV cache of the whole batch after P + R - 1 positions (:func:`memory.kv_cache_bytes`),
  plus one layer's K and V again (transformers' ``DynamicCache`` grows a layer with ``torch.cat``,
  which allocates the grown tensor before the old one is freed), plus the sampling temporaries of one
  decode step: the logits of the last position, the processed scores and the softmax probabilities
  (3 x b x V fp32; transformers ``GenerationMixin._sample``);
* **no-grad forward** (reference / old log-probs / critic values): one layer's activations alive at a
  time, plus the completion logits and TRL's log-softmax of them (2 x fp32);
* **training forward + backward**: the activations kept for backward, all layers, with or without
  activation checkpointing (Korthikanti et al., arXiv 2205.05198, Sec. 4.1 and 5; ``full``
  recompute keeps only each layer's input, 2 s b h bytes at 2 bytes/element, plus one layer's
  activations while it is recomputed), the logits, their log-softmax and its gradient (3 x fp32),
  and the gradients (:attr:`Prediction.persistent` holds the rest of the training state);
* **optimizer**: gradients plus torch AdamW's foreach temporaries (about one fp32 copy of the
  parameters; ``torch.optim.AdamW(foreach=True)`` computes the update in per-group buffers).

On CPU the measured peak is the resident set size, which also holds the runtime (interpreter, torch,
transformers, TRL, the data set, allocator caches): that part is not predicted but measured, as the
RSS just before the run starts (``baseline``), and added. :func:`peak_rows` therefore reports two
comparisons: the whole peak (baseline + predicted) against the measured peak, and the part above the
baseline alone, which is the honest test of the terms above (the runtime dominates tiny models' RSS).

* **retained** (a profile fitted in situ, ``insitu.rss_retained``): the tracer resets the high-water mark at
  each stage's start (``/proc/self/clear_refs``), but that resets it to the CURRENT resident set, which still
  holds what glibc's allocator kept of the memory earlier stages freed (it returns small, fragmented chunks
  to the system only from the top of the heap: mallopt(3), M_TRIM_THRESHOLD and M_MMAP_THRESHOLD,
  https://man7.org/linux/man-pages/man3/mallopt.3.html). After the first step every stage therefore starts
  from a floor near the step's largest stage. Predicted as floor = base_bytes + factor x (largest predicted
  stage), and a stage's peak as max(its own terms, floor); the two coefficients are fitted by
  rlm_lab.insitu on the calibration runs (never on the validation suite). Without the section the floor is 0.

Ignores: fragmentation beyond that floor, Python objects of the batch, CUDA context. The kept memory cuts both ways in a measurement: a stage's first allocations raise the
RSS above what it holds at once, and memory an earlier run in the same process freed is reused
without raising it (so it hides in the baseline): compare in a fresh process per run where it matters.
"""

from __future__ import annotations

from ..compare import relative_error
from ..stages import Stage
from . import memory as M
from .spec import scalar_head

FP32 = 4
GENERATE, TRAIN = Stage.GENERATE.value, (Stage.ACTOR_FORWARD.value, Stage.ACTOR_BACKWARD.value)


def generation_bytes(spec, rows: int, prompt_len: int, response_len: int, dtype_bytes: int) -> dict:
    """Transient bytes of one ``generate`` call of ``rows`` sequences (see the module docstring)."""
    kv = M.kv_cache_bytes(spec, rows * M.generate_kv_tokens(prompt_len, response_len), dtype_bytes)
    return {"kv_cache": kv, "kv_grow_copy": kv // max(spec.layers, 1), "sampling": 3 * rows * spec.vocab * FP32}


def forward_bytes(spec, rows: int, seq_len: int, logit_tokens: int, dtype_bytes: int) -> dict:
    """Transient bytes of a no-grad forward pass that scores ``logit_tokens`` positions per row."""
    acts = M.activation_bytes(spec, rows, seq_len, dtype_bytes)
    return {"activations": acts // max(spec.layers, 1), "logits": 2 * rows * logit_tokens * spec.head_width * FP32}


def training_bytes(spec, rows: int, seq_len: int, logit_tokens: int, dtype_bytes: int,
                   checkpointing: bool = False) -> dict:
    """Transient bytes of a training forward + backward (gradients not included: see :func:`stage_peaks`)."""
    if checkpointing:
        acts = (M.activation_bytes(spec, rows, seq_len, dtype_bytes, recompute="full")
                + M.activation_bytes(spec, rows, seq_len, dtype_bytes) // max(spec.layers, 1))
    else:
        acts = M.activation_bytes(spec, rows, seq_len, dtype_bytes)
    return {"activations": acts, "logits": 3 * rows * logit_tokens * spec.head_width * FP32}


def stage_peaks(pred, checkpointing: bool = False) -> dict[str, dict]:
    """``{stage: {term: bytes, ..., "total": bytes}}`` for every predicted stage (prefill and decode joined
    as ``generate``); each total includes the model states held (:attr:`Prediction.persistent`)."""
    wl, spec, db = pred.workload, pred.spec, pred.workload.dtype_bytes
    P, R = wl.prompt_len, int(wl.response.length)
    seq, rows, micro = P + R, wl.gen, wl.micro
    n_logit = R + 1 if wl.logits == "completion" else seq  # TRL: logits_to_keep = completion length + 1
    grads = M.grad_bytes(spec, wl.precision)
    base = pred.persistent.total
    out: dict[str, dict] = {}
    for r in pred.rows:
        st = r.stage.value
        if r.stage in (Stage.PREFILL, Stage.DECODE):
            terms = generation_bytes(spec, rows, P, R, db)
            st = GENERATE
        elif r.stage in (Stage.OLD_LOGPROB, Stage.REF_LOGPROB):
            terms = forward_bytes(spec, micro, seq, n_logit, db)
        elif r.stage == Stage.VALUES:
            terms = forward_bytes(scalar_head(spec), micro, seq, seq, db)
        elif st in TRAIN:
            terms = {**training_bytes(spec, micro, seq, n_logit, db, checkpointing), "gradients": grads}
        elif r.stage == Stage.CRITIC_UPDATE:
            c = scalar_head(spec)
            terms = {**training_bytes(c, micro, seq, seq, db, checkpointing),
                     "gradients": M.grad_bytes(c, wl.precision) + grads}
        elif r.stage == Stage.OPTIMIZER:
            terms = {"gradients": grads, "adamw_temporaries": spec.params * FP32}
        else:
            terms = {}
        terms = {"model_states": base, **terms}
        terms["total"] = sum(terms.values())
        if st not in out or terms["total"] > out[st]["total"]:
            out[st] = terms
    return out


def peak_rows(record, pred, baseline: int, checkpointing: bool = False) -> list[dict]:
    """Per measured stage: predicted peak (``baseline`` + :func:`stage_peaks`) against the tracer's peak
    RSS, and the part above the baseline alone (``transient_*``). ``record`` is a traced run record."""
    stages = record.results["trace"]["stages"]
    peaks = stage_peaks(pred, checkpointing)
    floor = retained_floor(pred.profile, peaks)
    rows = []
    for st, terms in peaks.items():
        meas = stages.get(st, {}).get("peak_bytes")
        if not meas:
            continue
        above = max(terms["total"], floor)
        p = baseline + above
        rows.append({"stage": st, "peak_predicted": p, "peak_measured": meas,
                     "peak_rel_error": relative_error(p, meas), "transient_predicted": above,
                     "transient_measured": meas - baseline,
                     "transient_rel_error": relative_error(above, meas - baseline)})
    return rows


def retained_floor(profile, peaks: dict) -> float:
    """Bytes above the runtime baseline every stage starts from once the allocator has kept what earlier
    stages freed (module docstring, "retained"): base + factor x the largest stage's total; 0 without a fit."""
    fit = ((getattr(profile, "insitu", None) or {}).get("rss_retained")) or {}
    if not fit or not peaks:
        return 0.0
    return float(fit.get("base_bytes", 0.0)) + float(fit.get("factor", 0.0)) * max(t["total"] for t in peaks.values())
