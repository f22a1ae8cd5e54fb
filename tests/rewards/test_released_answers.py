"""The released code's answer strings (`copo_answer_string_id`): each expected string worked out by hand from the rules
of hijih/copo-code's verl/utils/reward_score/multi-reward.py (see openrlhf_copo/rewards/released_answers.py)."""

import pytest
import torch

from openrlhf_copo import contract
from openrlhf_copo.rewards.math_reward import score_responses
from openrlhf_copo.rewards.released_answers import released_answer_string, released_found_answer


@pytest.mark.parametrize("response, correct, expected", [
    # "answer is": the text after it; \frac{a}{b} -> (a)/(b); a wrong answer loses its parentheses and backslashes
    ("The answer is \\frac{1}{2}", True, "(1)/(2)"),
    ("The answer is \\frac{1}{2}", False, "1/2"),
    ("Answer: \\sqrt{2}", True, "\\sqrt{2"),  # closing braces go, opening ones stay
    ("Answer: \\sqrt{2}", False, "sqrt{2"),
    # the last \boxed{}; unit words go as substrings, then \text{ } is unwrapped and white space removed
    ("So it is \\boxed{3 \\text{ cm}}", True, "3"),
    ("\\boxed{5 \\text{m}}", True, "5"),  # \text{m} -> \text{} -> removed
    # commas and white space go; a wrong answer then loses its parentheses
    ("Answer: (2, 3)", True, "(23)"),
    ("Answer: (2, 3)", False, "23"),
    # "Answer:" beats a \boxed{} before it; a \boxed{} after it, in its text, is read
    ("First \\boxed{4}.\nAnswer: 5", True, "5"),
    ("Answer: 5, as the check \\boxed{4} shows", True, "4"),
    # the first \text{Answer: } takes everything after it, a later "Answer:" too
    ("\\text{Answer: } 12. Answer: 13", True, "12.answer:13"),
    # lower case; true / false as 1 / 0 when wrong
    ("The answer is \\text{Yes}", True, "yes"),
    ("Answer: ABC", True, "abc"),
    ("Answer: True", True, "true"),
    ("Answer: True", False, "1"),
    # of the substitutions only \text{m} -> \text{} takes effect: "a " stays
    ("Answer: a 5 \\text{m}", True, "a5"),
    # no answer: the response's own text, cleaned ("hours" removed), or its tail after its last $
    ("We need more hours to think", False, "weneedmoretothink"),
    ("So we get $x = 5$. Then", False, ".then"),
    # a marker with nothing after it: the whole response, without the LaTeX clean-up (white space stays)
    ("Let me think. The answer is", False, "let me think. the answer is"),
])
def test_released_answer_string(response, correct, expected):
    assert released_answer_string(response, correct) == expected


def test_responses_without_an_answer_are_read_as_the_released_code_reads_them():
    assert released_found_answer("Answer: 5") and released_found_answer("\\boxed{5}")
    # the released code gives both "." (one answer), and so does the string bucket (to reproduce their entropy)
    a, b = "So $x$.", "Thus $y$."
    assert released_answer_string(a, False) == released_answer_string(b, False) == "."
    assert not released_found_answer(a) and not released_found_answer(b)
    assert not released_found_answer("Let me think. The answer is") and not released_found_answer("\\boxed{}")


def test_score_responses_returns_string_ids():
    responses = ["\\boxed{1/2}", "Answer: 1 / 2", "\\boxed{2/4}", "So $x$.", "Thus $y$."]
    out = score_responses(responses, [""] * len(responses), ["\\frac{1}{2}"] * len(responses))
    logs = out["extra_logs"]
    assert logs[contract.ANSWER_STRING_ID].dtype == torch.int64 and logs[contract.ANSWER_ID].dtype == torch.int64
    strings, values = logs[contract.ANSWER_STRING_ID].tolist(), logs[contract.ANSWER_ID].tolist()
    assert out["rewards"].tolist() == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert values[0] == values[1] == values[2]  # equivalent answers: one value
    assert strings[0] == strings[1] != strings[2]  # "1/2" twice, then "2/4"
    assert strings[3] == strings[4] and len(set(strings)) == 3  # no answer: both "." there, one answer
    assert values[3] != values[4]  # the equivalence buckets keep them apart
