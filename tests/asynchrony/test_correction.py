"""TRL's own importance-sampling correction, switched on by rlm_lab.asynchrony.correction (no Ray, one tiny
trainer): the ratio TRL records equals an independent recomputation, exp(trainer log-prob - behaviour
log-prob) truncated at clip_max, computed here with a separate forward (right padding, logits / temperature);
on-policy samples (the behaviour log-probs of the rollout engine with the trainer's own weights, at a
temperature other than 1) give a ratio of 1 within fp noise; the adapter refuses a TRL with other gates."""

import pytest


@pytest.fixture(scope="module")
def setup(place_cfg, tmp_path_factory):
    from rlm_lab.placement.rollout import RolloutEngine
    from rlm_lab.placement.runtime import _sft_checkpoint
    from rlm_lab.train.rl import make_trainer
    from rlm_lab.tasks import ensure_data, parse_task

    cfg = place_cfg.replace(temperature=0.7)
    task = parse_task(cfg.task)
    rows = ensure_data(task)["train"]
    state = {"shift": {}}

    def rollout_func(prompts, trainer):  # on-policy generation, behaviour log-probs optionally shifted
        gen = trainer.generation_config.to_dict()
        eng = RolloutEngine(trainer.accelerator.unwrap_model(trainer.model), gen, trainer._tokenizer.pad_token_id,
                            trainer.eos_token_ids)
        ids = trainer.processing_class(text=prompts)["input_ids"]
        out = eng.generate(ids, seed=11)
        lps = [[x + state["shift"].get(j, 0.0) for j, x in enumerate(lp)] for lp in out["logprobs"]]
        return {"prompt_ids": ids, "completion_ids": out["completion_ids"], "logprobs": lps}

    trainer = make_trainer(cfg, _sft_checkpoint(cfg), rows, task, str(tmp_path_factory.mktemp("corr")), [],
                           rollout_func=rollout_func)
    g = cfg.num_generations
    batch = [rows[i // g] for i in range(cfg.batch_size)]  # batch_size / G prompts, each G times
    return trainer, batch, state


def independent_ratio(trainer, out, clip_max):
    """exp(logp_trainer - logp_behaviour) per completion token, from our own forward, truncated."""
    import torch

    model = trainer.accelerator.unwrap_model(trainer.model)
    ratios = []
    with torch.no_grad():
        for p, pm, c, cm, lb in zip(out["prompt_ids"], out["prompt_mask"], out["completion_ids"],
                                    out["completion_mask"], out["sampling_per_token_logps"]):
            p, c = p[pm.bool()], c[cm.bool()]
            ids = torch.cat([p, c])[None]
            logits = model(input_ids=ids).logits[0].float() / trainer.temperature
            lt = logits.log_softmax(-1)[torch.arange(len(p) - 1, len(ids[0]) - 1), c]
            ratios.append((lt - lb[: len(c)]).exp().clamp(max=clip_max))
    return ratios


def test_trl_ratio_matches_an_independent_recomputation(setup):
    from rlm_lab.asynchrony.correction import enable

    trainer, batch, state = setup
    enable(trainer, "token_truncate", clip_max=3.0)
    assert trainer.use_vllm and trainer.vllm_importance_sampling_mode == "token_truncate"
    # on-policy: ratio 1 (temperature 0.7: a mismatch in how either side applies it would show here)
    state["shift"] = {}
    out = trainer._generate_and_score_completions(batch)
    on = [r for r, m in zip(out["importance_sampling_ratio"], out["completion_mask"]) for r in r[m.bool()]]
    assert len(on) > 10 and max(abs(float(r) - 1) for r in on) < 1e-4
    # off-policy by a known amount: token 0's behaviour log-prob 2 lower (ratio e^2 > 3: truncated at 3),
    # token 1's 0.5 higher (ratio ~e^-0.5)
    state["shift"] = {0: -2.0, 1: 0.5}
    out = trainer._generate_and_score_completions(batch)
    mine = independent_ratio(trainer, out, 3.0)
    trl_r = [r[m.bool()] for r, m in zip(out["importance_sampling_ratio"], out["completion_mask"])]
    worst = max((a - b).abs().max().item() for a, b in zip(trl_r, mine))
    assert worst < 1e-4
    assert all(abs(float(r[0]) - 3.0) < 1e-6 for r in trl_r)  # truncated
    assert all(abs(float(r[1]) - 0.6065) < 1e-3 for r in trl_r if len(r) > 1)
    mode = "train" if trainer.model.training else "eval"
    logged = trainer._metrics[mode]["sampling/importance_sampling_ratio/max"]
    assert abs(logged[-1] - 3.0) < 1e-6


def test_refuses_other_gates(setup, monkeypatch):
    from rlm_lab.asynchrony import correction
    from rlm_lab.errors import RlmLabError

    trainer = setup[0]
    monkeypatch.setattr(correction, "VERIFIED_GATES", correction.VERIFIED_GATES[:-1])
    was = trainer.use_vllm
    trainer.use_vllm = False
    try:
        with pytest.raises(RlmLabError, match="verified ones"):
            correction.enable(trainer)
    finally:
        trainer.use_vllm = was
