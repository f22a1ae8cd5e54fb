"""COPO in place of OpenRLHF's group normalization (`RemoteExperienceMaker.compute_advantages_and_returns`).

OpenRLHF computes advantages once per rollout batch, on the single controller, before the batch
is split into mini-batches and sharded over data-parallel ranks: exactly where COPO's global
advantage must be computed. For COPO estimators this function replaces OpenRLHF's:

    rewards (+ length penalties) -> by prompt group   -> copo_advantages(...)
    experience.advantages        = w_local * A_local   on every action token (first clipped term)
    experience.info["copo_weighted_global_adv"] = w_global * A_global  per sample  (second clipped term)

The per-sample global term travels in `info`, which OpenRLHF splits, shuffles and collates with
the samples; `openrlhf_copo.openrlhf_ext.loss` turns it into the second PolicyLoss term.

A prompt's group is its --rollout.n_samples_per_prompt responses, or, where the rollout drew groups of different sizes
(``knapsack``: every response carries `contract.GROUP_SIZE`), as many as its responses say (`batch_groups`).
"""

from __future__ import annotations

import itertools
import sys
from typing import List

import torch

from openrlhf_copo.contract import (ADA_DRAWN, ADA_DRAWN_CORRECT, ALL_CORRECT, ALL_INCORRECT, ANSWER_ID,
                                    ANSWER_STRING_ID, CORRECT, CORRECT_PENALIZED, ENGINE_LOGPROB_ABSDIFF, ENTROPY,
                                    GLOBAL_ADV_RAW, GROUP_SIZE, GLOBAL_ADV_STD, ID_LABELS, INCORRECT_REINFORCED, LOCAL_ADV,
                                    MIXED_LOCAL_LOST, NUM_ENGINES, NUM_PROMPTS, PROMPT_REWARD_MEAN, ROLLOUT_ENGINE_SEED,
                                    ROLLOUT_LOGPROB_ABSDIFF, SIGNAL_COPO, SIGNAL_GRPO, TOKEN_SURPRISAL, VERIFY_FAILED,
                                    WEIGHTED_GLOBAL_ADV, W_GLOBAL, W_LOCAL, W_LOCAL_MID, ZERO_STD, info_tensor)
from openrlhf_copo.core import Groups, copo_advantages, mode_info
from openrlhf_copo.openrlhf_ext.config import CopoConfigError, copo_settings
from openrlhf_copo.openrlhf_ext.probe_step import ProbeFinished, batch_record



class RewardCheckError(RuntimeError):
    """Most of a rollout step's answers could not be checked: training on their zero rewards would teach
    nothing (every prompt all-incorrect, a global advantage of exactly 0) without a word."""


#: The warnings this process has printed (`warn_once`).
_warned: set = set()


def warn_once(key: str, message: str) -> None:
    """Print ``message`` once per process (the controller runs the advantage step every rollout step)."""
    if key not in _warned:
        _warned.add(key)
        print(f"openrlhf_copo: warning: {message}", file=sys.stderr, flush=True)


def check_verify_failures(experiences, max_share: float) -> None:
    """Stop (one line) when more than ``max_share`` of the rollout step's verdicts failed. A reward function that
    returns no failure flag cannot be checked: said once."""
    if not all(VERIFY_FAILED in exp.info for exp in experiences):
        warn_once(VERIFY_FAILED, f"the reward function returns no extra_logs['{VERIFY_FAILED}'], so answers it could "
                                 "not check (a crashed or timed-out verifier) cannot be told from wrong ones: "
                                 "--copo.max_verify_failed is not enforced")
        return
    failed = _info_column(experiences, VERIFY_FAILED).float()
    n_failed, total = int((failed > 0.5).sum()), int(failed.numel())
    if total and n_failed > max_share * total:
        raise RewardCheckError(
            f"math-verify failed on {n_failed} of {total} responses of this rollout step (timed out, crashed, or "
            "cannot start on the node of the vLLM engines: its log has an 'openrlhf_copo: the math-verify worker "
            f"... cannot start on node ...' line); stopping instead of training on zero rewards "
            f"(--copo.max_verify_failed {max_share})"
        )


def _info_column(experiences, key: str) -> torch.Tensor:
    """One per-sample value of ``info[key]`` per response, in experience order."""
    cols = []
    for exp in experiences:
        if key not in exp.info:
            why = " (read under --copo.answer_buckets string)" if key == ANSWER_STRING_ID else ""
            raise CopoConfigError(
                f"the reward function returned no extra_logs['{key}']{why} for prompt {exp.prompts[:1]!r}: COPO needs "
                "one answer id per response; use --reward.remote_url openrlhf_copo/rewards/math_reward.py, or return "
                f"it in the extra_logs of your agent function's step (--train.agent_func_path)"
            )
        cols.append(info_tensor(exp.info[key]))
    return torch.cat(cols)


def batch_groups(experiences, indices: torch.Tensor, n: int) -> Groups:
    """The rollout batch's prompt groups, in the order OpenRLHF numbered the responses: n responses each, or, where
    every response carries `contract.GROUP_SIZE` (a rollout that drew groups of different sizes), the sizes those
    give: each group's first response says how many follow it."""
    total = int(indices.numel())
    if not all(GROUP_SIZE in exp.info for exp in experiences):
        if total % n != 0:
            raise CopoConfigError(f"{total} responses is not a multiple of --rollout.n_samples_per_prompt {n}")
        return Groups.equal(total // n, n)
    size = torch.empty(total, dtype=torch.int64)
    size[indices] = _info_column(experiences, GROUP_SIZE).to(torch.int64)
    sizes, k = [], 0
    while k < total:
        sizes.append(int(size[k]))
        if sizes[-1] < 1 or k + sizes[-1] > total or not bool((size[k:k + sizes[-1]] == sizes[-1]).all()):
            raise RuntimeError(f"COPO: the rollout batch's response {k} starts a group of {sizes[-1]} "
                               f"(info['{GROUP_SIZE}']) that its next responses do not continue")
        k += sizes[-1]
    return Groups(sizes)


def check_prompt_groups(experiences, indices: torch.Tensor, groups: Groups) -> None:
    """Every group of the advantage step is one prompt's responses: the indices OpenRLHF numbered are a
    permutation of 0..N-1 and the responses of each group (`batch_groups`: consecutive numbers) share their prompt.
    A batch that arrives out of order (a rollout path that renumbers, an engine that drops a response) must stop
    here, not mix two prompts into one group's statistics."""
    total = int(indices.numel())
    if not torch.equal(torch.sort(indices).values, torch.arange(total)):
        raise RuntimeError(f"COPO: the rollout batch's response indices are not 0..{total - 1} once each")
    prompts = in_index_order(experiences, "prompts", total)
    for k, (start, size) in enumerate(zip(groups.starts.tolist(), groups.sizes)):
        if len(set(prompts[start:start + size])) != 1:
            raise RuntimeError(f"COPO: group {k} of the rollout batch holds responses to different prompts")


def in_index_order(experiences, field: str, total: int) -> list:
    """Each response's ``field`` (its prompt, its label) in the order OpenRLHF numbered the responses: each prompt's
    group is a run of consecutive numbers (`batch_groups`)."""
    out = [None] * total
    for exp in experiences:
        for j, value in zip(exp.index, getattr(exp, field)):
            out[int(j)] = value
    return out


def engine_metrics(experiences, train_seed: int) -> dict:
    """How many vLLM engines fed the rollout batch, and the logprob gap of each engine's responses
    (`contract.ENGINE_LOGPROB_ABSDIFF`): after a weight sync every engine must show the same small
    gap; one engine that missed the sync stands out. Empty if a response lacks the engine tag (patch 7)."""
    if not all(ROLLOUT_ENGINE_SEED in exp.info for exp in experiences):
        warn_once(ROLLOUT_ENGINE_SEED, f"responses without their engine tag (info['{ROLLOUT_ENGINE_SEED}'], patch 7 "
                                       "in the vLLM engines' workers): the per-engine metrics (copo_num_engines, the "
                                       "weight-sync logprob gap per engine) are not logged")
        return {}
    engine = _info_column(experiences, ROLLOUT_ENGINE_SEED).to(torch.int64) - int(train_seed)
    engines = engine.unique().tolist()
    out = {NUM_ENGINES: float(len(engines))}
    if all(ROLLOUT_LOGPROB_ABSDIFF in exp.info for exp in experiences):
        gap = _info_column(experiences, ROLLOUT_LOGPROB_ABSDIFF).float()
        for e in engines:
            out[ENGINE_LOGPROB_ABSDIFF.format(e)] = gap[engine == e].mean().item()
    return out


def pool_statistics(experiences, mode: str, in_batch_order, groups: Groups) -> dict:
    """For a mode that samples adaptively (Reinforce-Ada), each prompt's pool statistics [B] as `copo_advantages`
    takes them, from the info the sampling rounds (patch 11) put on every kept response (its group's first
    response's); {} for any other mode."""
    if not mode_info(mode).adaptive_sampling:
        return {}
    if not all(ADA_DRAWN in exp.info and ADA_DRAWN_CORRECT in exp.info for exp in experiences):
        raise CopoConfigError(f"mode {mode}: the responses carry no info['{ADA_DRAWN}']: its sampling rounds (run-time "
                              "patch 11, runtime_patches/adaptive_sampling.py) did not run in the rollout")
    return {"pool_correct": in_batch_order(_info_column(experiences, ADA_DRAWN_CORRECT).float())[groups.starts],
            "pool_size": in_batch_order(_info_column(experiences, ADA_DRAWN).float())[groups.starts]}


@torch.no_grad()
def copo_compute_advantages_and_returns(maker, experiences: List) -> List:
    """Replacement for `RemoteExperienceMaker.compute_advantages_and_returns` under COPO estimators."""
    # Length penalties are OpenRLHF's, looked up where its experience maker looks them up.
    from openrlhf.trainer.ppo_utils import experience_maker as em

    args = maker.strategy.args
    if args.algo.kl.init_coef > 0 and not args.algo.kl.use_loss:
        raise CopoConfigError("COPO with a KL penalty in the reward: add --algo.kl.use_loss or --algo.kl.init_coef 0")
    n = args.rollout.n_samples_per_prompt
    check_verify_failures(experiences, float(args.copo.max_verify_failed))

    for exp in experiences:
        exp.rewards = exp.rewards.to(torch.promote_types(exp.rewards.dtype, torch.float32))
    em.apply_length_penalties(experiences, args)

    # Responses back in prompt order: OpenRLHF numbered them (`experience.index`) before
    # splitting the rollout batch into micro-batches.
    exp_len = [len(exp.index) for exp in experiences]
    indices = torch.tensor(list(itertools.chain.from_iterable(exp.index for exp in experiences)))
    total = int(indices.numel())
    groups = batch_groups(experiences, indices, n)

    def in_batch_order(values: torch.Tensor) -> torch.Tensor:
        """[N] in OpenRLHF's numbering: each prompt's group a run of `groups`."""
        out = torch.empty_like(values)
        out[indices] = values
        return out

    def per_group(fn, *values: torch.Tensor) -> torch.Tensor:
        """``fn`` of each group's [*, G] responses (`Groups.reduce`), on each of its responses: [N]."""
        return groups.per_response(groups.reduce(fn, *values))

    check_prompt_groups(experiences, indices, groups)
    rewards = in_batch_order(torch.cat([exp.rewards.reshape(-1) for exp in experiences]))
    # The entropy's answer buckets (--copo.answer_buckets): equal values (ours) or equal normalized strings (the
    # released code's), both returned by the reward function.
    answer_ids = in_batch_order(_info_column(experiences, ANSWER_STRING_ID if args.copo.answer_buckets == "string"
                                        else ANSWER_ID).to(torch.int64))
    # What "incorrect" means for zero control and the selective ablations (--copo.incorrect): a final
    # answer that is not the label's (paper), or a reward of 0 (released code). They differ under the
    # 0 / 0.1 / 1 format reward, where a formatted wrong answer scores 0.1.
    if args.copo.incorrect == "answer":
        if not all(CORRECT in exp.info for exp in experiences):
            # Falling back to rewards > 0 would make a formatted-but-wrong answer (0.1 under the format reward)
            # "correct", and zero control would never fire: say so instead.
            raise CopoConfigError(
                f"--copo.incorrect answer needs extra_logs['{CORRECT}'] from the reward function, which returned "
                "none: return it (openrlhf_copo/rewards/math_reward.py does), or use --copo.incorrect reward to "
                "call a response incorrect when its reward is 0")
        correct = in_batch_order(_info_column(experiences, CORRECT).float()) > 0.5
    else:
        correct = rewards > 0

    settings = copo_settings(args)
    adv = copo_advantages(rewards, answer_ids, correct, group_sizes=groups.sizes, **settings,
                          **pool_statistics(experiences, settings["mode"], in_batch_order, groups))

    # Per-response columns, back in experience order. A per-prompt column is on each of the prompt's responses, so
    # its step mean (OpenRLHF averages over responses) weighs a prompt by its group's size.
    mixed = per_group(lambda r: r.amax(1) != r.amin(1), rewards)
    columns = {  # the metrics (contract.py), plus OpenRLHF's own group_reward_std
        ENTROPY: groups.per_response(adv.entropy),
        W_LOCAL: adv.w_local,
        W_GLOBAL: adv.w_global,
        # Blending, not switching: responses whose prompt weighs both terms (0.05 < w_local < 0.95).
        W_LOCAL_MID: ((adv.w_local > 0.05) & (adv.w_local < 0.95)).float(),
        # Mixed groups (rewards differ, so GRPO would train on them) whose local term is gone: at G = 4 with the
        # paper's gamma and rho, every 3+1 and 2+2 answer split. Step mean / (1 - zero_std) = share of mixed groups.
        MIXED_LOCAL_LOST: (mixed & (per_group(lambda w: w.amax(1), adv.w_local) < 0.05)).float(),
        # Responses pushed the wrong way: an incorrect answer raised, a correct one lowered. GRPO never does either
        # (its advantage has the sign of r - mean r); COPO does in a 3+1 group trained on the global term alone.
        INCORRECT_REINFORCED: (~correct & (adv.weighted_local + adv.weighted_global > 0)).float(),
        CORRECT_PENALIZED: (correct & (adv.weighted_local + adv.weighted_global < 0)).float(),
        LOCAL_ADV: adv.local_adv,
        GLOBAL_ADV_RAW: adv.global_adv,
        ALL_CORRECT: per_group(lambda c: c.all(1), correct).float(),
        ALL_INCORRECT: per_group(lambda c: ~c.any(1), correct).float(),
        ZERO_STD: (~mixed).float(),
        # Share of responses with a non-zero gradient weight: GRPO's (A_local) versus COPO's (either term).
        SIGNAL_GRPO: (adv.local_adv != 0).float(),
        SIGNAL_COPO: adv.has_signal.float(),
        "group_reward_std": per_group(lambda r: r.std(1), rewards),
    }
    if args.copo.probe:  # the first rollout batch measured: the run stops here, before any training (probe_step.py)
        texts = {f: [in_index_order(experiences, f, total)[k] for k in groups.starts.tolist()]
                 for f in ("prompts", "labels")}
        record = batch_record(columns, groups, rewards, correct, answer_ids, texts["prompts"], texts["labels"],
                              copo_settings(args), G=n)
        raise ProbeFinished({**record, "seed": args.train.seed})
    split = {k: v.reshape(-1)[indices].split(exp_len) for k, v in columns.items()}
    weighted_local, weighted_global = (v.reshape(-1)[indices].split(exp_len)
                                       for v in (adv.weighted_local, adv.weighted_global))
    batch_constants = {GLOBAL_ADV_STD: adv.global_adv[groups.starts].std(correction=0).item(),
                       PROMPT_REWARD_MEAN: adv.prompt_reward.mean().item(),
                       # prompts in the global statistics: the whole rollout batch, from every engine
                       NUM_PROMPTS: float(groups.n_groups)}

    for exp in experiences:
        if exp.rollout_log_probs is not None and exp.action_log_probs is not None:
            # Train/inference mismatch per response: vLLM's logprobs of the sampled tokens against the
            # trainer's on the same tokens (mean |difference| over action tokens). After a correct
            # weight sync it is bf16 noise; stale weights in vLLM show up here first.
            mask = exp.action_mask.to(torch.float32)
            diff = (exp.rollout_log_probs.float() - exp.action_log_probs.float()).abs() * mask
            exp.info[ROLLOUT_LOGPROB_ABSDIFF] = diff.sum(1) / mask.sum(1).clamp(min=1)
        if exp.action_log_probs is not None:
            # The policy's per-token entropy on its own samples, estimated without a second forward: the mean
            # surprisal -log pi(token) of the sampled tokens (unbiased at temperature 1). A global term that
            # pushes down every token of all-incorrect responses shows here as a rising entropy.
            mask = exp.action_mask.to(torch.float32)
            exp.info[TOKEN_SURPRISAL] = -(exp.action_log_probs.float() * mask).sum(1) / mask.sum(1).clamp(min=1)
    batch_constants.update(engine_metrics(experiences, args.train.seed))

    # --copo.mask_zero_advantage (AGPO's loss mask): responses without any advantage leave the loss, and so the
    # token count OpenRLHF divides the optimizer step's loss by (its normalizer reads the action masks). Where no
    # response of the batch has one, the masks stay: the loss is 0 either way, and an empty step would divide by 0.
    live = adv.has_signal.reshape(-1)[indices].split(exp_len) if args.copo.mask_zero_advantage else None
    if live is not None and not adv.has_signal.any():
        live = None
    for i, exp in enumerate(experiences):
        if live is not None:
            exp.action_mask = exp.action_mask & live[i].to(exp.action_mask.device).unsqueeze(1)
        mask = exp.action_mask.to(torch.float32)
        local = weighted_local[i].to(torch.float32)
        exp.advantages = local.unsqueeze(1) * mask
        exp.returns = exp.advantages.clone()
        exp.info[WEIGHTED_GLOBAL_ADV] = weighted_global[i].to(torch.float32)
        exp.info["return"] = local + exp.info[WEIGHTED_GLOBAL_ADV]
        for k in columns:
            exp.info[k] = split[k][i].to(torch.float32)
        for k, v in batch_constants.items():
            exp.info[k] = torch.full((len(exp.index),), float(v))
        # Ids are labels, not metrics: averaging them into the logs would be noise.
        for label in ID_LABELS:
            exp.info.pop(label, None)
        exp.kl = None
    return experiences
