"""OpenRLHF reward function with the paper's format reward for base models: 0 (no answer),
0.1 (an answer in the required form, but wrong), 1 (correct). `copo_correct` stays 0/1, so
zero control and the accuracy metrics still mean "correct". See math_reward.py."""

from openrlhf_copo.rewards.math_reward import score_responses

#: The least and greatest reward `reward_func` returns (`contract.REWARD_RANGE`, a literal: the preflight reads the
#: source): math_reward.FORMAT_REWARD's.
REWARD_RANGE = (0.0, 1.0)


def reward_func(queries, prompts, labels, **kwargs):
    return score_responses(queries, prompts, labels, format_reward=True)
