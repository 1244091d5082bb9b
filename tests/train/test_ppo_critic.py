"""PPO's critic as a component: fp16 loss scaling, its own LR schedule, no_sync under gradient accumulation,
save/resume with the actor, completions no reward function could score, and the refused GRPOConfig options.

fp16 on CPU: accelerate 1.15 builds no ``GradScaler`` on a CPU device (``Accelerator.__init__``: native AMP only
off-CPU), so ``fp16=True`` there would silently train in fp32; PPOConfig refuses it. The scaling logic is tested
instead by giving the accelerator torch's CPU ``GradScaler`` (torch 2.13 has one): with a loss scale of 2^10 the
gradients each optimizer steps on must equal those of the unscaled run (scaling by a power of two is exact), with
gradient accumulation over 2 micro-batches so that unscaling the actor's optimizer early (accelerate's
``clip_grad_norm_`` unscales every prepared optimizer) or leaving the critic's loss unscaled would show.
"""

import pytest
import torch

pytest.importorskip("trl")

from accelerate import Accelerator  # noqa: E402
from accelerate.utils import AutocastKwargs  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

from rlm_lab.errors import RlmLabError  # noqa: E402
from rlm_lab.models import load  # noqa: E402
from rlm_lab.tasks import ensure_data, get_task  # noqa: E402
from rlm_lab.train.critic import CriticTrainer  # noqa: E402
from rlm_lab.train.ppo import PPOConfig, PPOTrainer  # noqa: E402

SCALE = 2.0 ** 10


def half_scored(completions, **_):
    """The share of digit characters; None (unscorable) for every other completion."""
    return [None if i % 2 else sum(ch.isdigit() for ch in c) / 4 for i, c in enumerate(completions)]


def config(out, **kw):
    base = dict(output_dir=str(out), max_steps=1, learning_rate=1e-3, critic_learning_rate=1e-3,
                per_device_train_batch_size=4, gradient_accumulation_steps=2, num_generations=4,
                max_completion_length=4, beta=0.0, lr_scheduler_type="linear", use_cpu=True, bf16=False,
                activation_checkpointing=False, save_strategy="no", report_to="none", seed=0, disable_tqdm=True,
                logging_steps=1)
    return PPOConfig(**{**base, **kw})


class Grads(TrainerCallback):
    """The actor's gradients as its optimizer steps on them (after the Trainer's unscale and clip)."""

    def __init__(self):
        self.actor = []

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        self.actor.append([p.grad.detach().clone() for p in model.parameters() if p.grad is not None])


def run(path, out, ds, scaler=None, spy=None, resume=None, **kw):
    """Train; return the trainer and what was captured: rollouts, the gradients each optimizer stepped on."""
    model, tok = load(str(path))
    tr = PPOTrainer(model=model, reward_funcs=[half_scored], args=config(out, **kw), train_dataset=ds,
                    processing_class=tok)
    grads = Grads()
    tr.add_callback(grads)
    cap = {"rollouts": [], "critic": [], "grads": grads}
    tr.critic_optimizer.register_step_pre_hook(lambda opt, a, k: cap["critic"].append(
        [p.grad.detach().clone() for p in tr.critic.parameters() if p.grad is not None]))
    rollout = tr._generate_and_score_completions
    tr._generate_and_score_completions = lambda inputs: cap["rollouts"].append(rollout(inputs)) or cap["rollouts"][-1]
    if scaler is not None:  # what accelerate does off-CPU for fp16 (Accelerator.__init__, native AMP), minus
        tr.accelerator.scaler, tr.accelerator.native_amp = scaler, True  # the autocast (it would be bf16 on CPU)
        tr.accelerator.autocast_handler = AutocastKwargs(enabled=False)
    if spy is not None:
        spy(tr)
    tr.train(resume_from_checkpoint=resume)
    return tr, cap


@pytest.fixture(scope="module")
def dataset():
    from datasets import Dataset

    return Dataset.from_list(ensure_data(get_task("arithmetic", digits=2))["train"][:8])


@pytest.fixture(scope="module")
def reference(nano_path, dataset, tmp_path_factory):
    """One optimizer step (2 micro-batches) in fp32, checkpointed, with the critic's no_sync and backward watched."""
    calls = []
    orig_no_sync = Accelerator.no_sync

    def spy(tr):
        state = {"in": False}

        def no_sync(model):
            ctx = orig_no_sync(tr.accelerator, model)

            class Watch:
                def __enter__(self):
                    if model is tr.critic:
                        state["in"] = True
                    return ctx.__enter__()

                def __exit__(self, *exc):
                    if model is tr.critic:
                        state["in"] = False
                    return ctx.__exit__(*exc)

            return Watch()

        tr.accelerator.no_sync = no_sync
        forward, backward = CriticTrainer.train_values, CriticTrainer.backward
        tr.critic_trainer.train_values = lambda *a: calls.append(("forward", state["in"])) or forward(tr.critic_trainer, *a)
        tr.critic_trainer.backward = lambda loss: calls.append(("backward", state["in"])) or backward(tr.critic_trainer, loss)

    out = tmp_path_factory.mktemp("ref")
    tr, cap = run(nano_path, out, dataset, spy=spy, save_strategy="steps", save_steps=1)
    return tr, cap, calls, out


def test_unscored_completions_carry_no_signal(reference):
    tr, cap, _, _ = reference
    out = cap["rollouts"][0]
    mask, adv, unscored = out["completion_mask"].bool(), out["advantages"], torch.arange(8) % 2 == 1
    assert torch.all(adv[unscored] == 0) and torch.all(out["returns"][unscored] == 0)
    assert torch.all(out["value_mask"][unscored] == 0) and torch.all(out["value_mask"][~unscored] == mask[~unscored])
    scored = adv[~unscored][mask[~unscored]]  # whitened over the scored tokens alone: mean 0, std 1
    assert abs(scored.mean().item()) < 1e-5 and scored.std(unbiased=False).item() == pytest.approx(1.0, abs=1e-3)
    completions = tr.processing_class.batch_decode(out["completion_ids"], skip_special_tokens=True)
    expected = sum(half_scored(completions)[::2]) / 4  # the logged score: scored completions only
    assert tr.state.log_history[0]["ppo/score"] == pytest.approx(expected, abs=1e-6)


def test_critic_steps_once_with_its_own_schedule_and_no_sync(reference):
    tr, cap, calls, _ = reference
    # 2 micro-batches: the first accumulates inside no_sync (forward and backward), the second syncs and steps.
    assert calls == [("forward", True), ("backward", True), ("forward", False), ("backward", False)]
    assert len(cap["critic"]) == 1 and len(cap["grads"].actor) == 1
    # linear schedule over 1 step: the critic's LR, like the actor's, is 0 after its one step (1e-3 if never stepped)
    assert tr.critic_scheduler.last_epoch == tr.lr_scheduler.last_epoch == 1
    assert tr.critic_optimizer.param_groups[0]["lr"] == 0.0 == tr.optimizer.param_groups[0]["lr"]


def test_fp16_loss_scaling_matches_the_unscaled_step(reference, nano_path, dataset, tmp_path):
    _, ref, _, _ = reference
    scaler = torch.amp.GradScaler("cpu", init_scale=SCALE)
    orig = Accelerator.mixed_precision
    Accelerator.mixed_precision = property(lambda self: "fp16")  # accelerate unscales only under fp16
    try:
        _, cap = run(nano_path, tmp_path / "fp16", dataset, scaler=scaler)
    finally:
        Accelerator.mixed_precision = orig
    assert scaler.get_scale() == SCALE  # one update, no inf: the scale did not move
    for got, want in ((cap["critic"][0], ref["critic"][0]), (cap["grads"].actor[0], ref["grads"].actor[0])):
        assert len(got) == len(want) > 0
        assert max((g - w).abs().max().item() / (w.abs().max().item() + 1e-12) for g, w in zip(got, want)) < 1e-5


def test_critic_resumes_from_checkpoint(reference, nano_path, dataset, tmp_path):
    tr, _, _, out = reference
    ckpt = out / "checkpoint-1"
    assert {"model.safetensors", "optimizer.pt", "scheduler.pt"} <= {p.name for p in (ckpt / "critic").iterdir()}
    saved = [p.detach().clone() for p in tr.critic.parameters()]
    before = []

    def spy(t):
        step = CriticTrainer.step
        t.critic_trainer.step = lambda norm: before.append([p.detach().clone() for p in t.critic.parameters()]) \
            or step(t.critic_trainer, norm)

    tr2, _ = run(nano_path, tmp_path / "resumed", dataset, spy=spy, max_steps=2, resume=str(ckpt))
    # the resumed step starts from the saved critic (a fresh critic's head is all zeros), AdamW's count continues
    assert all(torch.equal(a, b) for a, b in zip(before[0], saved)) and saved[-1].abs().max() > 0
    state = tr2.critic_optimizer.state[next(tr2.critic.parameters())]
    assert state["step"].item() == 2 and tr2.critic_scheduler.last_epoch == 2


@pytest.mark.parametrize("kw, match", [
    (dict(loss_type="grpo"), "loss_type"),
    (dict(top_entropy_quantile=0.2), "top_entropy_quantile"),
    (dict(importance_sampling_level="sequence"), "importance_sampling_level"),
    (dict(scale_rewards="batch"), "scale_rewards"),
    (dict(delta=2.0), "delta"),
    (dict(entropy_coef=0.01), "entropy_coef"),
    (dict(fp16=True), "fp16"),
    (dict(lr_scheduler_type="reduce_lr_on_plateau", eval_strategy="steps", eval_steps=1), "reduce_lr_on_plateau"),
])
def test_options_ppo_ignores_are_one_clear_error(tmp_path, kw, match):
    with pytest.raises(RlmLabError, match=match):
        config(tmp_path, **kw)


def test_default_loss_types_are_accepted(tmp_path):
    assert config(tmp_path).loss_type == "dapo" and config(tmp_path, loss_type="bnpo").loss_type == "bnpo"
