"""The actor's real training step (OpenRLHF ActorPPOTrainer + DeepSpeed on the CPU + a tiny Qwen2) under COPO."""

import pytest
import torch

from openrlhf_copo.core import copo_advantages
from openrlhf_copo.openrlhf_ext.loss import CopoPolicyLoss
from tests_support import (MIXED_IDS, MIXED_REWARDS, build_trainer, clipped_term, copo_argv, micro_batch,
                           params_snapshot)

pytestmark = pytest.mark.usefixtures("copo_patched", "gloo_world", "cpu_path")

def test_loss_equals_the_explicit_two_term_formula(load_args, tiny_model_dir):
    args = load_args(copo_argv(model=tiny_model_dir))
    _, trainer = build_trainer(args)
    assert isinstance(trainer.actor_loss_fn, CopoPolicyLoss)
    exp = micro_batch(args, trainer, MIXED_REWARDS, MIXED_IDS, old_logprob_shift=0.5)
    mask = exp.action_mask.float()
    with torch.no_grad():
        logp = trainer.actor(exp.sequences, exp.action_mask, attention_mask=exp.attention_mask).float()

    # expected advantages straight from the core, matched to the shuffled micro-batch by prompt/answer
    adv = copo_advantages(torch.tensor(MIXED_REWARDS, dtype=torch.float32), torch.tensor(MIXED_IDS))
    a_local = exp.advantages.float()
    a_global = torch.stack(list(exp.info["copo_weighted_global_adv"])).float().view(-1, 1) * mask
    assert sorted(a_global.amax(1).add(a_global.amin(1)).tolist()) == pytest.approx(
        sorted(adv.weighted_global.reshape(-1).tolist()), abs=1e-6)

    expected = (clipped_term(logp, exp.action_log_probs.float(), a_local, mask)
                + clipped_term(logp, exp.action_log_probs.float(), a_global, mask))
    blended = clipped_term(logp, exp.action_log_probs.float(), a_local + a_global, mask)

    status = trainer.training_step(exp, kl_ctl=0.0, step=0)
    loss = status["metrics"]["policy_loss"].item()
    assert loss == pytest.approx(expected.item(), rel=1e-4, abs=1e-6)
    assert abs(expected.item() - blended.item()) > 1e-4  # the two-term loss is not one blended advantage
    assert status["metrics"]["copo_loss_local"].item() + status["metrics"]["copo_loss_global"].item() == \
        pytest.approx(loss, rel=1e-5, abs=1e-7)
    assert status["metrics"]["ppo_clip_ratio"].item() > 0  # the shift made clipping matter


@pytest.mark.parametrize("mode, expect_gradient", [("copo", True), ("grpo", False)])
def test_uniform_groups_train_under_copo_not_grpo(load_args, tiny_model_dir, mode, expect_gradient):
    """A batch made only of all-correct and all-incorrect prompts: GRPO has nothing to learn, COPO does."""
    args = load_args(copo_argv("--copo.mode", mode, model=tiny_model_dir))
    _, trainer = build_trainer(args)
    exp = micro_batch(args, trainer, [[1] * 4, [0] * 4, [1] * 4, [0] * 4], [[5] * 4, [2, 3, 2, 3], [9] * 4, [1] * 4],
                      old_logprob_shift=0.0)
    before = params_snapshot(trainer)
    status = trainer.training_step(exp, kl_ctl=0.0, step=0)
    moved = max((a - b).abs().max().item() for a, b in zip(before, params_snapshot(trainer)))
    grad_norm = status["metrics"]["actor_grad_norm"]
    if expect_gradient:
        assert grad_norm > 0 and moved > 0
        assert status["metrics"]["copo_loss_global"].item() != 0
    else:
        assert grad_norm == 0 and moved == 0
        assert status["metrics"]["policy_loss"].item() == 0


def test_missing_global_advantages_fail_loudly(load_args, tiny_model_dir):
    args = load_args(copo_argv(model=tiny_model_dir))
    _, trainer = build_trainer(args)
    exp = micro_batch(args, trainer, MIXED_REWARDS, MIXED_IDS, old_logprob_shift=0.0)
    exp.info.pop("copo_weighted_global_adv")
    with pytest.raises(RuntimeError, match="copo_weighted_global_adv"):
        trainer.training_step(exp, kl_ctl=0.0, step=0)


def test_a_training_step_that_bypasses_the_loss_fails_loudly(load_args, tiny_model_dir):
    """The global advantages reach the loss only through the call of trainer.actor_loss_fn: a training step that
    returns without that call (a step computing its loss some other way) would drop COPO's global term without a
    word, and log the previous micro-batch's terms. It must stop instead."""
    from openrlhf_copo.openrlhf_ext.runtime_patches import after_training_step, before_training_step

    args = load_args(copo_argv(model=tiny_model_dir))
    _, trainer = build_trainer(args)
    exp = micro_batch(args, trainer, MIXED_REWARDS, MIXED_IDS, old_logprob_shift=0.0)
    status = trainer.training_step(exp, kl_ctl=0.0, step=0)  # through the loss: the terms are logged
    assert status["metrics"]["copo_loss_global"].item() != 0

    before_training_step(trainer, exp)  # what the patched step does first ...
    assert trainer.actor_loss_fn.last_terms is None  # ... the last step's terms are gone
    bypassed = {"metrics": {"policy_loss": torch.tensor(0.0)}, "weights": {}}  # a step that never called the loss
    with pytest.raises(RuntimeError, match="without calling the actor loss .* global term would vanish"):
        after_training_step(trainer, bypassed)
    assert "copo_loss_global" not in bypassed["metrics"]  # nothing stale was logged
    assert trainer.actor_loss_fn.global_advantages is None  # and nothing leaks into the next micro-batch


def test_a_real_training_step_that_bypasses_the_loss_stops_before_the_update(load_args, tiny_model_dir):
    """OpenRLHF's real training step, with the COPO loss bypassed (its PolicyLoss called directly, as a step that
    computes its loss some other way would): the run stops at the actor's backward, before any gradient or update,
    so no weight moves (until issue 44 it stopped after the step, its optimizer update made)."""
    args = load_args(copo_argv(model=tiny_model_dir))
    _, trainer = build_trainer(args)
    exp = micro_batch(args, trainer, MIXED_REWARDS, MIXED_IDS, old_logprob_shift=0.5)
    loss = trainer.actor_loss_fn
    loss.forward = loss.base.forward  # the global term never reaches this step
    before = params_snapshot(trainer)
    with pytest.raises(RuntimeError, match="without calling the actor loss .* global term would vanish"):
        trainer.training_step(exp, kl_ctl=0.0, step=0)
    assert max((a - b).abs().max().item() for a, b in zip(before, params_snapshot(trainer))) == 0
    del loss.forward  # through the loss again: the step trains
    exp = micro_batch(args, trainer, MIXED_REWARDS, MIXED_IDS, old_logprob_shift=0.5)
    assert trainer.training_step(exp, kl_ctl=0.0, step=0)["metrics"]["copo_loss_global"].item() != 0
    assert max((a - b).abs().max().item() for a, b in zip(before, params_snapshot(trainer))) > 0


def test_a_mode_registered_outside_core_reaches_the_cli_and_trains(load_args, tiny_model_dir):
    """A new method is one registered function: it is an --advantage_estimator value and a --copo.mode choice
    (read when the parser is built, not frozen when core was imported), and the real training step runs it."""
    from openrlhf_copo.core import register_mode, unregister_mode

    @register_mode("half_half_plugin", blended=False)
    def half_half(x):
        return torch.full_like(x.soft, 0.5), torch.full_like(x.soft, 0.5)

    try:
        args = load_args(copo_argv("--advantage_estimator", "half_half_plugin", model=tiny_model_dir))
        assert load_args(copo_argv("--copo.mode", "half_half_plugin", model=tiny_model_dir)).copo.mode == \
            "half_half_plugin"
        _, trainer = build_trainer(args)
        exp = micro_batch(args, trainer, [[1] * 4, [0] * 4, [1, 0, 1, 0], [0] * 4],
                          [[5] * 4, [2, 3, 2, 3], [9, 1, 9, 2], [1] * 4], old_logprob_shift=0.0)
        assert torch.stack(list(exp.info["copo_w_local"])).unique().tolist() == [0.5]
        before = params_snapshot(trainer)
        status = trainer.training_step(exp, kl_ctl=0.0, step=0)
        assert status["metrics"]["actor_grad_norm"] > 0
        assert max((a - b).abs().max().item() for a, b in zip(before, params_snapshot(trainer))) > 0
    finally:
        unregister_mode("half_half_plugin")
    with pytest.raises(SystemExit):  # gone from the parser's choices with the registry entry
        load_args(copo_argv("--advantage_estimator", "half_half_plugin", model=tiny_model_dir))


def test_go_only_reports_the_global_terms_clip_ratio(load_args, tiny_model_dir):
    """Under GO-Only the local term is empty: OpenRLHF's ppo_clip_ratio is the global term's, not a constant 0."""
    args = load_args(copo_argv("--advantage_estimator", "go_only", model=tiny_model_dir))
    _, trainer = build_trainer(args)
    exp = micro_batch(args, trainer, MIXED_REWARDS, MIXED_IDS, old_logprob_shift=0.5)
    status = trainer.training_step(exp, kl_ctl=0.0, step=0)
    clip = status["metrics"]["ppo_clip_ratio"].item()
    assert clip > 0 and clip == pytest.approx(status["metrics"]["copo_clip_ratio_global"].item())


def test_rl_zvp_scales_zero_variance_prompts_by_the_forwards_token_entropy(load_args, tiny_model_dir):
    """RL-ZVP through the real training step: the entropy comes from OpenRLHF's own forward (--actor.entropy_coef 0),
    and the loss equals GRPO's term on the mixed prompts plus, on the all-correct / all-incorrect ones, the clipped
    term of alpha H_t / -alpha (max_k H_k - H_t), with H computed here from the actor's logits by hand."""
    args = load_args(copo_argv("--advantage_estimator", "rl_zvp", "--actor.entropy_coef", "0", model=tiny_model_dir))
    _, trainer = build_trainer(args)
    exp = micro_batch(args, trainer, MIXED_REWARDS, MIXED_IDS, old_logprob_shift=0.5)
    mask = exp.action_mask.float()
    T = mask.shape[1]
    with torch.no_grad():
        logp, output = trainer.actor(exp.sequences, exp.action_mask, attention_mask=exp.attention_mask,
                                     return_output=True)
        logits = output["logits"].float()[:, :-1][:, -T:]  # position t predicts action token t
        probs = torch.softmax(logits, -1)
        entropy = -(probs * torch.log_softmax(logits, -1)).sum(-1)
    coef = torch.stack(list(exp.info["copo_weighted_global_adv"])).float().view(-1, 1)
    assert sorted(set(round(c, 6) for c in coef.view(-1).tolist())) == [-0.1, 0.0, 0.1]  # +-alpha, 0 when mixed
    h_max = torch.where(mask > 0, entropy, torch.full_like(entropy, -1e9)).amax(1, keepdim=True)
    a_zvp = torch.where(coef > 0, coef * entropy, torch.where(coef < 0, coef * (h_max - entropy), 0 * entropy)) * mask
    a_local = exp.advantages.float()
    assert (a_local.abs().sum(1) > 0).sum() == 8 and ((a_local.abs().sum(1) > 0) & (coef.view(-1) != 0)).sum() == 0
    expected = (clipped_term(logp.float(), exp.action_log_probs.float(), a_local, mask)
                + clipped_term(logp.float(), exp.action_log_probs.float(), a_zvp, mask))

    status = trainer.training_step(exp, kl_ctl=0.0, step=0)
    assert status["metrics"]["policy_loss"].item() == pytest.approx(expected.item(), rel=1e-4, abs=1e-6)
    assert status["metrics"]["copo_loss_global"].item() != 0
    assert trainer.actor_loss_fn.token_entropy is None  # used once, never carried to the next micro-batch


def test_rl_zvp_without_the_forwards_entropy_fails_loudly(load_args, tiny_model_dir):
    args = load_args(copo_argv("--advantage_estimator", "rl_zvp", "--actor.entropy_coef", "0", model=tiny_model_dir))
    _, trainer = build_trainer(args)
    exp = micro_batch(args, trainer, MIXED_REWARDS, MIXED_IDS, old_logprob_shift=0.0)
    loss = trainer.actor_loss_fn
    loss.global_advantages = torch.stack(list(exp.info["copo_weighted_global_adv"]))
    with pytest.raises(RuntimeError, match="without the policy's token entropy"):
        loss(exp.action_log_probs, exp.action_log_probs, exp.advantages, action_mask=exp.action_mask)


@pytest.mark.parametrize("mode, std", [("ngrpo", "unbiased"), ("dr_grpo", "none")])
def test_local_only_peers_train_all_incorrect_prompts_only_if_their_paper_does(load_args, tiny_model_dir, mode, std):
    """NGRPO gives an all-incorrect prompt a uniform negative advantage (-0.447 at G = 4), Dr. GRPO nothing; both
    put their advantage in the first term and none in the second."""
    from openrlhf_copo.core import copo_advantages

    flags = ("--advantage_estimator", "ngrpo") if mode == "ngrpo" else ("--copo.mode", "dr_grpo")
    args = load_args(copo_argv(*flags, model=tiny_model_dir))
    _, trainer = build_trainer(args)
    exp = micro_batch(args, trainer, MIXED_REWARDS, MIXED_IDS, old_logprob_shift=0.0)
    expected = copo_advantages(torch.tensor(MIXED_REWARDS, dtype=torch.float32), torch.tensor(MIXED_IDS), mode=mode,
                               std=std).weighted_local
    got = sorted(a[m > 0][0].item() for a, m in zip(exp.advantages, exp.action_mask))
    assert got == pytest.approx(sorted(expected.view(-1).tolist()), abs=1e-6)
    assert any(abs(g + 0.2 / (0.8 / 4) ** 0.5) < 1e-5 for g in got) == (mode == "ngrpo")  # the all-incorrect prompt
    assert torch.stack(list(exp.info["copo_weighted_global_adv"])).abs().max().item() == 0
    status = trainer.training_step(exp, kl_ctl=0.0, step=0)
    assert status["metrics"]["actor_grad_norm"] > 0


def test_masking_zero_advantage_responses_takes_dead_groups_out_of_the_token_mean(load_args, tiny_model_dir):
    """--copo.mask_zero_advantage (AGPO's loss mask, issue 37's control): under GRPO the all-correct and all-incorrect
    prompts leave the loss and its denominator. The loss through OpenRLHF's real training step is the clipped term's
    token-mean over the two mixed prompts' tokens alone, which is GRPO's loss times all tokens / live tokens."""
    args = load_args(copo_argv("--copo.mode", "grpo", "--copo.mask_zero_advantage", model=tiny_model_dir))
    _, trainer = build_trainer(args)
    exp_masked = micro_batch(args, trainer, MIXED_REWARDS, MIXED_IDS, old_logprob_shift=0.5)
    args.copo.mask_zero_advantage = False  # the advantage step reads the trainer's args: the same batch unmasked
    exp_plain = micro_batch(args, trainer, MIXED_REWARDS, MIXED_IDS, old_logprob_shift=0.5)
    assert torch.equal(exp_plain.sequences, exp_masked.sequences)  # the same responses in the same order

    all_tokens, live_tokens = exp_plain.action_mask.float(), exp_masked.action_mask.float()
    live = exp_plain.advantages.abs().amax(1) > 0  # GRPO's signal: the responses of the two mixed prompts
    assert int(live.sum()) == 8
    assert torch.equal(live_tokens, all_tokens * live.float().unsqueeze(1))  # dead responses: every token masked
    with torch.no_grad():
        logp = trainer.actor(exp_plain.sequences, exp_plain.action_mask,
                             attention_mask=exp_plain.attention_mask).float()
    old = exp_plain.action_log_probs.float()
    expected = clipped_term(logp, old, exp_plain.advantages.float(), live_tokens)  # the mean over live tokens
    grpo = clipped_term(logp, old, exp_plain.advantages.float(), all_tokens)
    assert expected.item() == pytest.approx(grpo.item() * all_tokens.sum().item() / live_tokens.sum().item(), rel=1e-5)

    status = trainer.training_step(exp_masked, kl_ctl=0.0, step=0)
    assert status["metrics"]["policy_loss"].item() == pytest.approx(expected.item(), rel=1e-4, abs=1e-6)
    assert abs(expected.item() - grpo.item()) > 1e-4  # the denominator made a difference


def test_masking_refuses_several_optimizer_steps_per_rollout_batch(load_args, capsys):
    """With two optimizer steps per rollout batch, one step could hold dead groups alone: 0 tokens to divide by."""
    with pytest.raises(SystemExit):
        load_args(copo_argv("--copo.mode", "grpo", "--copo.mask_zero_advantage", "--train.batch_size", "8"))
    assert ("--copo.mask_zero_advantage needs one optimizer step per rollout batch: --train.batch_size 8 != "
            "--rollout.batch_size 4 x --rollout.n_samples_per_prompt 4 = 16") in capsys.readouterr().err


def test_masking_a_batch_without_any_advantage_keeps_its_masks_and_loses_nothing(load_args, tiny_model_dir):
    """Every prompt all correct or all incorrect: nothing is live, so the masks stay (an empty step would divide by 0
    tokens): the loss is GRPO's 0, not NaN."""
    args = load_args(copo_argv("--copo.mode", "grpo", "--copo.mask_zero_advantage", model=tiny_model_dir))
    _, trainer = build_trainer(args)
    exp = micro_batch(args, trainer, [[1] * 4, [0] * 4, [1] * 4, [0] * 4], [[5] * 4, [2, 3, 2, 3], [9] * 4, [1] * 4],
                      old_logprob_shift=0.0)
    assert exp.action_mask.sum() > 0
    status = trainer.training_step(exp, kl_ctl=0.0, step=0)
    assert status["metrics"]["policy_loss"].item() == 0 and status["metrics"]["actor_grad_norm"] == 0


def test_a_micro_batch_whose_every_response_was_masked_out_logs_without_dividing_by_zero(load_args, tiny_model_dir):
    """A batch with live groups can still hold a micro-batch of dead ones alone (the CPU plateau did, two groups a
    micro-batch): no action token is left in it. Its step is 0 and its status counts one token with 0 for every
    token-weighted metric, so OpenRLHF's `ppo_train`, which divides each by the micro-batch's token count, neither
    raises ZeroDivisionError nor logs NaN; its sample-weighted metrics stay as they were."""
    args = load_args(copo_argv("--copo.mode", "grpo", "--copo.mask_zero_advantage", model=tiny_model_dir))
    _, trainer = build_trainer(args)
    exp = micro_batch(args, trainer, MIXED_REWARDS, MIXED_IDS, old_logprob_shift=0.5)
    exp.action_mask = torch.zeros_like(exp.action_mask)  # what the mask leaves of a micro-batch of dead groups
    exp.advantages = torch.zeros_like(exp.advantages)
    # ppo_train's normalizer is the optimizer step's (every micro-batch of the rollout batch, which has live tokens)
    window = {"dp_size": 1, "batch_num_tokens": torch.tensor(100.0), "global_batch_size": torch.tensor(8.0)}
    status = trainer.training_step(exp, kl_ctl=0.0, step=0, loss_batch_info=window)
    assert status["num_action_tokens"] == 1.0 and status["num_samples"] == float(len(exp.sequences))
    token_weighted = [k for k, w in status["weights"].items() if w == "token" and k in status["metrics"]]
    assert "policy_loss" in token_weighted
    assert all(float(status["metrics"][k]) == 0.0 for k in token_weighted)
    assert status["metrics"]["actor_grad_norm"] == 0  # the update is untouched: nothing to learn from
