"""OpenRLHF reward function: 1 if the final answer is equivalent to the label, else 0 (paper eq. local_reward).

Pass this file as `--reward.remote_url path/to/openrlhf_copo/rewards/math_reward.py`.
OpenRLHF loads it by path and calls `reward_func(queries, prompts, labels)` from a thread of
the rollout actor, one response per call. Besides the reward, `extra_logs` carries what COPO
needs, one number per response:

- `copo_answer_id`: int64 id of the extracted final answer, equal for mathematically
  equivalent answers (see `openrlhf_copo.rewards.answers`); read by the advantage step;
- `copo_correct`: 1.0 if equivalent to the label (zero control and accuracy metrics);
- `copo_has_answer`, `copo_verify_failed`, `copo_label_error`: diagnostics, logged as metrics;
- `copo_answer_string_id`: int64 id of the answer *string* as the authors' released code normalizes it
  (`openrlhf_copo.rewards.released_answers`: `2/4` and `1/2` differ, and responses without an answer are
  read as there); read by the advantage step instead of `copo_answer_id` under `--copo.answer_buckets string`.

The answer is the response's last final-answer statement (`answers.extract_answer`); the answer and the
label are then compared by their values (`answers.answer_value`: `x = 3` is 3, `6 \times 7 = 42` is 42,
`1 000` is 1000), with math-verify's verdict (`verifier.judge`).

It never raises and never hangs: math-verify runs in worker processes behind a hard deadline
(`COPO_VERIFY_TIMEOUT`, default 10 s); a timed-out or crashed check scores 0 and is flagged
`copo_verify_failed`, and so is every check where no worker can start (math-verify missing on the
node); the advantage step stops the run when most of a rollout step's checks failed.
"""

from __future__ import annotations

import logging
from typing import Dict, List, Sequence

import torch

from openrlhf_copo import contract
from openrlhf_copo.rewards.answers import answer_value, extract_answer, model_text, response_text, stable_id
from openrlhf_copo.rewards.released_answers import released_answer_string
from openrlhf_copo.rewards.verifier import get_pool

logger = logging.getLogger("openrlhf_copo.rewards")

#: The paper's format reward for base models: no answer / formatted but wrong / correct.
FORMAT_REWARD = (0.0, 0.1, 1.0)
#: The least and greatest reward `reward_func` returns (`contract.REWARD_RANGE`: the preflight reads it).
REWARD_RANGE = (0.0, 1.0)


def score_responses(
    queries: Sequence[str], prompts: Sequence[str], labels: Sequence[str], format_reward: bool = False,
    last_number: bool = False,
) -> Dict[str, object]:
    """Rewards and COPO extra logs for a batch of (query, prompt, label).

    ``queries`` are what OpenRLHF passes (prompt + response, decoded with special tokens) or plain
    response texts with empty ``prompts`` (what `evaluate` passes): both read the same answer.
    ``last_number``: a response without a boxed / "Answer:" / "the answer is" answer answers with its last number."""
    pool = get_pool()
    rewards: List[float] = []
    logs: Dict[str, List] = {k: [] for k in contract.REWARD_LOGS}
    for query, prompt, label in zip(queries, prompts, labels):
        response = model_text(response_text(query or "", prompt or ""))
        answer = extract_answer(response, last_number=last_number)
        value = answer_value(answer) if answer is not None else None
        label = "" if label is None else str(label)
        verdict = pool.verify(value, answer_value(label)) if value is not None else None
        correct = bool(verdict and verdict.correct)
        failed = verdict is not None and verdict.status != "ok"
        if failed and verdict.status != "unavailable":  # that one is logged once by the pool
            logger.warning("math-verify %s on answer %.80r (label %.40r): reward 0", verdict.status, answer, label)
        label_error = verdict is not None and not verdict.gold_ok
        if label_error:
            logger.warning("label %.80r cannot be parsed by math-verify: reward 0", label)

        if format_reward:
            reward = FORMAT_REWARD[2] if correct else FORMAT_REWARD[1] if answer is not None else FORMAT_REWARD[0]
        else:
            reward = 1.0 if correct else 0.0
        rewards.append(reward)
        logs[contract.ANSWER_ID].append(stable_id(contract.answer_key(value, verdict and verdict.canon, response)))
        logs[contract.CORRECT].append(float(correct))
        logs[contract.HAS_ANSWER].append(float(answer is not None))
        logs[contract.VERIFY_FAILED].append(float(failed))
        logs[contract.LABEL_ERROR].append(float(label_error))
        logs[contract.ANSWER_STRING_ID].append(stable_id(released_answer_string(response, correct)))

    reward_t = torch.tensor(rewards, dtype=torch.float32)
    ids = (contract.ANSWER_ID, contract.ANSWER_STRING_ID)
    extra = {k: torch.tensor(v, dtype=torch.int64 if k in ids else torch.float32) for k, v in logs.items()}
    return {"rewards": reward_t, "scores": extra[contract.CORRECT].clone(), "extra_logs": extra}


def reward_func(queries, prompts, labels, **kwargs):
    """OpenRLHF entry point: 0/1 correctness."""
    return score_responses(queries, prompts, labels, format_reward=False)
