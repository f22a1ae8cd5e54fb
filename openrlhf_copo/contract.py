"""What passes from the reward to the advantage step, the loss and the metrics: its keys and rules, in one place;
and the few names every process of a run agrees on (environment variable, worker hook).

    reward file (rewards/math_reward.py)    extra_logs[REWARD_LOGS], one number per response
      -> OpenRLHF                          copies each into experience.info[key]
      -> advantage step (openrlhf_ext/advantages.py)
                                           reads ANSWER_ID (consistency entropy), CORRECT (zero control),
                                           VERIFY_FAILED (stops a step of failed checks); writes
                                           experience.advantages = w_local * A_local and
                                           info[WEIGHTED_GLOBAL_ADV] = w_global * A_global
      -> loss (openrlhf_ext/loss.py)       PolicyLoss(advantages) + PolicyLoss(info[WEIGHTED_GLOBAL_ADV])
    in-training eval (openrlhf_ext/runtime_patches/evaluation.py) and `evaluate` read a response's outcome with `sample_outcome`.

Pure Python: the reward's worker processes, the driver and the actors all import it.
"""

from __future__ import annotations

from typing import Mapping, Optional, Tuple

#: int64 id of the response's final answer; equal ids = equivalent answers (the consistency entropy's input).
ANSWER_ID = "copo_answer_id"
#: int64 id of the response's answer *string* as the authors' released code normalizes it (no equivalence: `2/4` and
#: `1/2` differ); the entropy's input under `--copo.answer_buckets string`, to reproduce their entropy.
ANSWER_STRING_ID = "copo_answer_string_id"
#: 1.0 if the final answer is equivalent to the label.
CORRECT = "copo_correct"
#: 1.0 if a final answer was extracted at all.
HAS_ANSWER = "copo_has_answer"
#: 1.0 if the check could not be made (math-verify timed out, crashed, or cannot start): reward 0 by default.
VERIFY_FAILED = "copo_verify_failed"
#: 1.0 if math-verify cannot read the label.
LABEL_ERROR = "copo_label_error"
#: What a COPO reward function returns in `extra_logs`, in this order.
REWARD_LOGS = (ANSWER_ID, CORRECT, HAS_ANSWER, VERIFY_FAILED, LABEL_ERROR, ANSWER_STRING_ID)
#: The name a reward file may give, at module level, to the (least, greatest) reward its `reward_func` returns, as a
#: literal pair: ``REWARD_RANGE = (0.0, 1.0)``. Read from the file's source, not run, by the preflight
#: (`preflight.declared_reward_range`), which refuses a `--copo.ada_threshold` no reward can exceed, or every reward
#: exceeds, before the run starts.
REWARD_RANGE = "REWARD_RANGE"

#: w_global * A_global of each response: the advantage of the loss's second PolicyLoss term.
WEIGHTED_GLOBAL_ADV = "copo_weighted_global_adv"

#: The vLLM seed of the engine that sampled the response (OpenRLHF seeds engine i with --train.seed + i), set by
#: patch 7 in the engine's process; the advantage step turns it into the engine index and drops it.
ROLLOUT_ENGINE_SEED = "copo_rollout_engine_seed"

#: The number of responses in the response's prompt group, set on every response by a rollout that draws groups of
#: different sizes (``knapsack``: patch 11); the advantage step reads the groups' boundaries from it and drops it.
GROUP_SIZE = "copo_group_size"

#: Per-response ids that travel in `experience.info` but are labels, not metrics: dropped before OpenRLHF averages
#: the info into its logs (by the advantage step under COPO, by patch 1 under any other estimator).
ID_LABELS = (ANSWER_ID, ANSWER_STRING_ID, ROLLOUT_ENGINE_SEED, GROUP_SIZE)

#: Prefix of the answer key of a response without an extractable answer (its own text follows).
NO_ANSWER_PREFIX = "noanswer:"

# The metrics COPO logs (through experience.info or the training step's status, into OpenRLHF's logger), declared
# once with their meaning. Written by openrlhf_ext/advantages.py and patches/, read by the demo's summary and plots;
# docs/openrlhf.md's Metrics section names every one (tests/test_contract.py).

#: Per response, averaged over the step by OpenRLHF.
ENTROPY = "copo_entropy"  # consistency entropy H of the response's prompt
W_LOCAL = "copo_w_local"  # sigmoid(gamma (H - rho)), 0 under zero control
W_GLOBAL = "copo_w_global"  # 1 - w_local
W_LOCAL_MID = "copo_w_local_mid"  # 1 if the prompt blends both terms (0.05 < w_local < 0.95)
MIXED_LOCAL_LOST = "copo_mixed_local_lost"  # 1 if the prompt's rewards differ but w_local < 0.05 (global term alone)
INCORRECT_REINFORCED = "copo_incorrect_reinforced"  # 1 if incorrect and w_l A_l + w_g A_g > 0 (never under GRPO)
CORRECT_PENALIZED = "copo_correct_penalized"  # 1 if correct and w_l A_l + w_g A_g < 0 (never under GRPO)
LOCAL_ADV = "copo_local_adv"  # A_local (GRPO's group-normalized advantage)
GLOBAL_ADV_RAW = "copo_global_adv_raw"  # A_global, before its weight
ALL_CORRECT = "copo_all_correct"  # 1 if every response of the prompt is correct
ALL_INCORRECT = "copo_all_incorrect"  # 1 if none is
ZERO_STD = "copo_zero_std"  # 1 if the prompt's rewards are all equal
SIGNAL_GRPO = "copo_signal_grpo"  # 1 if A_local != 0 (a gradient under GRPO)
SIGNAL_COPO = "copo_signal_copo"  # 1 if either weighted term != 0 (a gradient under COPO)
ROLLOUT_LOGPROB_ABSDIFF = "copo_rollout_logprob_absdiff"  # mean |vLLM - trainer| logprob over sampled tokens
#: Per rollout batch (the same value on every response).
GLOBAL_ADV_STD = "copo_global_adv_std"  # std of A_global over the batch's prompts
PROMPT_REWARD_MEAN = "copo_prompt_reward_mean"  # mean of the prompts' mean rewards R(q)
NUM_PROMPTS = "copo_num_prompts"  # prompts in the global statistics (the whole rollout batch)
NUM_ENGINES = "copo_num_engines"  # vLLM engines whose responses the batch holds
#: `ROLLOUT_LOGPROB_ABSDIFF` of engine i's responses: ENGINE_LOGPROB_ABSDIFF.format(i).
ENGINE_LOGPROB_ABSDIFF = "copo_rollout_logprob_absdiff_engine{}"
#: Per training step (the loss's two terms, each its exact token mean over the step).
LOSS_LOCAL = "copo_loss_local"
LOSS_GLOBAL = "copo_loss_global"
CLIP_RATIO_GLOBAL = "copo_clip_ratio_global"
#: Per training step, token means of each term's push on the sampled tokens' log-probs (openrlhf_ext/loss.py):
#: share of the global term = PUSH_GLOBAL_SQ / (PUSH_LOCAL_SQ + PUSH_GLOBAL_SQ), cosine = PUSH_DOT / sqrt(product).
PUSH_LOCAL_SQ = "copo_push_local_sq"
PUSH_GLOBAL_SQ = "copo_push_global_sq"
PUSH_DOT = "copo_push_dot"
#: Per response, the mean over its tokens of -log pi(token) under the trainer at rollout time: at temperature 1
#: (on-policy samples) an unbiased estimate of the policy's per-token entropy on its own responses.
TOKEN_SURPRISAL = "copo_token_surprisal"
#: Reinforce-Ada's sampling rounds (patch 11, `runtime_patches.adaptive_sampling`), per kept response: its prompt's
#: pool (every response drawn for it this step: the step mean is the mean per prompt), the correct ones in that pool
#: (the advantage's pool baseline reads both), and 1 if the prompt met its exit rule within the budget.
ADA_DRAWN = "copo_ada_drawn"
ADA_DRAWN_CORRECT = "copo_ada_drawn_correct"
ADA_RESOLVED = "copo_ada_resolved"
#: Per rollout batch: generation rounds, the largest pool, the response tokens generated in all rounds and in the
#: first (the normal rollout's, what GRPO would have generated).
ADA_ROUNDS = "copo_ada_rounds"
ADA_DRAWN_MAX = "copo_ada_drawn_max"
ADA_TOKENS = "copo_ada_tokens"
ADA_TOKENS_FIRST_ROUND = "copo_ada_tokens_first_round"
#: Per training step, for every estimator (patch 4, `runtime_patches.metrics_file.GeneratedTokens`): the response
#: tokens the step's training rollout generated, every response drawn counted (DAPO's dropped groups and
#: Reinforce-Ada's later rounds included, the held-out evaluation's not), and their sum over the run so far (kept in
#: each checkpoint, so a resumed run goes on counting). Read back by `evaluation.metrics_file.generated_tokens`.
GENERATED_TOKENS = "copo_generated_tokens"
GENERATED_TOKENS_TOTAL = "copo_generated_tokens_total"
#: Knapsack RL's allocation (mode ``knapsack``, `runtime_patches.knapsack`), per rollout batch: the largest and the
#: smallest group, the prompts whose success rate lay strictly between 0 and 1 (the dynamic program's), the prompts
#: whose rate came from this step's pilot (never drawn before), and the surplus: the responses beyond every prompt's
#: minimum that the mixed prompts' need left, given to unsolved, then solved, prompts.
KNAPSACK_N_MAX = "copo_knapsack_n_max"
KNAPSACK_N_MIN = "copo_knapsack_n_min"
KNAPSACK_MIXED = "copo_knapsack_mixed"
KNAPSACK_PILOTED = "copo_knapsack_piloted"
KNAPSACK_SURPLUS = "copo_knapsack_surplus"
#: Every metric above (the engine one as its pattern), and the reward file's.
METRICS = (ENTROPY, W_LOCAL, W_GLOBAL, W_LOCAL_MID, MIXED_LOCAL_LOST, INCORRECT_REINFORCED, CORRECT_PENALIZED,
           LOCAL_ADV, GLOBAL_ADV_RAW, ALL_CORRECT, ALL_INCORRECT, ZERO_STD, SIGNAL_GRPO, SIGNAL_COPO,
           ROLLOUT_LOGPROB_ABSDIFF, TOKEN_SURPRISAL, GLOBAL_ADV_STD, PROMPT_REWARD_MEAN, NUM_PROMPTS, NUM_ENGINES,
           ENGINE_LOGPROB_ABSDIFF, LOSS_LOCAL, LOSS_GLOBAL, CLIP_RATIO_GLOBAL, PUSH_LOCAL_SQ, PUSH_GLOBAL_SQ,
           PUSH_DOT, WEIGHTED_GLOBAL_ADV, CORRECT, HAS_ANSWER, VERIFY_FAILED, LABEL_ERROR, ADA_DRAWN, ADA_DRAWN_CORRECT,
           ADA_RESOLVED, ADA_ROUNDS, ADA_DRAWN_MAX, ADA_TOKENS, ADA_TOKENS_FIRST_ROUND, GENERATED_TOKENS,
           GENERATED_TOKENS_TOTAL, KNAPSACK_N_MAX, KNAPSACK_N_MIN, KNAPSACK_MIXED, KNAPSACK_PILOTED, KNAPSACK_SURPLUS)

# Names every process of a run agrees on (the driver sets them, Ray's workers read them).

#: Set to "1" by the driver of a CPU run (`openrlhf_ext.cpu.loopback_env`), inherited by every worker.
CPU_ENV = "OPENRLHF_COPO_CPU"
#: The dotted path of the `worker_process_setup_hook` Ray imports in each worker (`openrlhf_ext.worker_hook`).
RAY_WORKER_SETUP_HOOK = "openrlhf_copo.openrlhf_ext.worker_hook.ray_worker_setup"
#: Set to --train.seed by the driver with `--copo.seeded_rollouts`: the vLLM engine processes then give every
#: sampled response its own seed (`openrlhf_ext.runtime_patches.rollout.seeded_sampling_params`).
ROLLOUT_SEED_ENV = "OPENRLHF_COPO_ROLLOUT_SEED"
#: The run-time patches a run's workers install, as "1,2,5" (`openrlhf_ext.runtime_patches.patches_for`: the driver
#: decides from the run's estimator and flags); unset, a worker installs them all.
PATCHES_ENV = "OPENRLHF_COPO_PATCHES"
#: The metrics file's per-step count of prompts the run has drawn so far (OpenRLHF's total_consumed_prompts;
#: with dynamic filtering more than steps x --rollout.batch_size): generated samples = it x n_samples_per_prompt.
PROMPTS_CONSUMED = "prompts_consumed"


def answer_key(answer: Optional[str], canonical: Optional[str], response: str) -> str:
    """The string whose hash is a response's ANSWER_ID.

    - an answer math-verify could read: its canonical form (equal for equivalent answers);
    - an answer it could not read (or that timed out): the answer's text without white space;
    - no extractable answer: the response itself, white space aside, so that G rambling responses count
      as G different answers (high entropy, local optimization), as in the released code.
    """
    if answer is None:
        return NO_ANSWER_PREFIX + "".join(response.split())
    if canonical is not None:
        return canonical
    return "raw:" + "".join(answer.split())


def info_tensor(values):
    """One value per response as a 1-D tensor, from any form OpenRLHF keeps it in: a reward's `extra_logs` or an
    experience's `info` (a tensor of any shape), the same after OpenRLHF's collate (a list of 0-d tensors), or plain
    numbers. The one adapter for every reader of these keys; integer ids stay int64."""
    import torch  # here, not at the top: the reward's verifier workers import this module without torch

    if isinstance(values, torch.Tensor):
        return values.reshape(-1)
    if isinstance(values, (list, tuple)):
        return torch.stack([torch.as_tensor(v).reshape(()) for v in values]) if values else torch.empty(0)
    return torch.as_tensor(values).reshape(-1)


def _item(values, i: int):
    return info_tensor(values)[i].item()


def sample_outcome(values: Mapping, i: int = 0, reward=None) -> Tuple[Optional[int], bool]:
    """(answer id, or None when the response has no answer; correct) of response ``i``, from a reward
    function's `extra_logs` or an experience's `info`. Without CORRECT, a positive ``reward`` counts as correct."""
    has_answer = bool(_item(values[HAS_ANSWER], i)) if HAS_ANSWER in values else True
    answer_id = int(_item(values[ANSWER_ID], i)) if has_answer else None
    return answer_id, sample_correct(values, i, reward)


def sample_correct(values: Mapping, i: int = 0, reward=None) -> bool:
    """Whether response ``i`` is correct: the reward function's CORRECT, else a positive ``reward``."""
    return bool(_item(values[CORRECT], i)) if CORRECT in values else float(reward) > 0
