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
    in-training eval (openrlhf_ext/patches.py) and `evaluate` read a response's outcome with `sample_outcome`.

Pure Python: the reward's worker processes, the driver and the actors all import it.
"""

from __future__ import annotations

from typing import Mapping, Optional, Tuple

#: int64 id of the response's final answer; equal ids = equivalent answers (the consistency entropy's input).
ANSWER_ID = "copo_answer_id"
#: 1.0 if the final answer is equivalent to the label.
CORRECT = "copo_correct"
#: 1.0 if a final answer was extracted at all.
HAS_ANSWER = "copo_has_answer"
#: 1.0 if the check could not be made (math-verify timed out, crashed, or cannot start): reward 0 by default.
VERIFY_FAILED = "copo_verify_failed"
#: 1.0 if math-verify cannot read the label.
LABEL_ERROR = "copo_label_error"
#: What a COPO reward function returns in `extra_logs`, in this order.
REWARD_LOGS = (ANSWER_ID, CORRECT, HAS_ANSWER, VERIFY_FAILED, LABEL_ERROR)

#: w_global * A_global of each response: the advantage of the loss's second PolicyLoss term.
WEIGHTED_GLOBAL_ADV = "copo_weighted_global_adv"

#: The vLLM seed of the engine that sampled the response (OpenRLHF seeds engine i with --train.seed + i), set by
#: patch 7 in the engine's process; the advantage step turns it into the engine index and drops it.
ROLLOUT_ENGINE_SEED = "copo_rollout_engine_seed"

#: Prefix of the answer key of a response without an extractable answer (its own text follows).
NO_ANSWER_PREFIX = "noanswer:"

# Names every process of a run agrees on (the driver sets them, Ray's workers read them).

#: Set to "1" by the driver of a CPU run (`openrlhf_ext.cpu.loopback_env`), inherited by every worker.
CPU_ENV = "OPENRLHF_COPO_CPU"
#: The dotted path of the `worker_process_setup_hook` Ray imports in each worker (`openrlhf_ext.worker_hook`).
RAY_WORKER_SETUP_HOOK = "openrlhf_copo.openrlhf_ext.worker_hook.ray_worker_setup"


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
    correct = bool(_item(values[CORRECT], i)) if CORRECT in values else float(reward) > 0
    return answer_id, correct
