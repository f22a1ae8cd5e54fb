"""Rule-based math rewards with answer ids for COPO's consistency entropy.

Use `openrlhf_copo/rewards/math_reward.py` (0/1 correctness, the paper's reward) or
`math_format_reward.py` (0 / 0.1 / 1, the paper's reward for base models) as OpenRLHF's
`--reward.remote_url`.
"""
