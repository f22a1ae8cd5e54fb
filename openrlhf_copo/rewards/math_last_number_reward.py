"""OpenRLHF reward function: 0/1 correctness, with the "final number" rule as the last resort.

A response with no `\\boxed{}`, no "Answer:" and no "the answer is" answers with the last number it writes
(lm-eval's flexible extract). For models that solve but follow no answer format (a 135M model rarely writes
`\\boxed{}`). Score such a run with the same rule: `evaluate --answer_rule last_number`. See math_reward.py.
"""

from openrlhf_copo.rewards.math_reward import score_responses

#: The least and greatest reward `reward_func` returns (`contract.REWARD_RANGE`, a literal: the preflight reads the
#: source).
REWARD_RANGE = (0.0, 1.0)


def reward_func(queries, prompts, labels, **kwargs):
    return score_responses(queries, prompts, labels, last_number=True)
