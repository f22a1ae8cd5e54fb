"""openrlhf_copo.rewards.answers: extraction forms, stable ids."""

import subprocess
import sys

import pytest
import torch

from openrlhf_copo.rewards.answers import extract_answer, response_text, stable_id


@pytest.mark.parametrize(
    "response, expected",
    [
        ("... so the result is \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
        ("first \\boxed{3} then \\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # the last box, nested braces
        ("\\fbox{42}", "42"),
        ("\\boxed 7 is it", "7"),
        ("Step 1 ...\nAnswer: $\\frac{3}{4}$", "\\frac{3}{4}"),  # the DAPO-Math prompt's form
        ("Answer: 12\nwait, recheck\nAnswer: 13.", "13"),
        ("**Final Answer:** \\boxed{5}", "5"),
        ("So the answer is 1/2", "1/2"),
        ("I cannot solve this.", None),
        ("\\boxed{}", None),
        ("\\boxed{unbalanced", None),
        ("", None),
        ("\\boxed{" + "1" * 600 + "}", None),  # not a final answer
    ],
)
def test_extract_answer(response, expected):
    assert extract_answer(response) == expected


def test_extraction_is_linear_on_pathological_text():
    import time

    text = "\\boxed{" * 20000 + "Answer: " * 20000
    t = time.perf_counter()
    extract_answer(text)
    assert time.perf_counter() - t < 5.0


def test_response_text_strips_the_prompt():
    prompt = "<|im_start|>user\nPut the answer in \\boxed{}.<|im_end|>\n<|im_start|>assistant\n"
    assert response_text(prompt + "x = \\boxed{2}", prompt) == "x = \\boxed{2}"
    # the instruction's empty \boxed{} in the prompt must not count as an answer
    assert extract_answer(response_text(prompt + "no idea", prompt)) is None
    # a decoded query that differs from the prompt at its start still anchors on the prompt's tail
    assert response_text("<s>" + prompt + "R", prompt) == "R"


def test_stable_id_is_pinned_and_fits_int64():
    # BLAKE2b-64 of the canonical form, top bit cleared: the same on every machine.
    assert stable_id("num:0.5") == 5728324829890933339
    assert torch.tensor([stable_id("num:0.5")]).item() == 5728324829890933339
    assert torch.tensor([stable_id("x")]).dtype == torch.int64
    assert all(0 <= stable_id(s) < 2**63 for s in ["", "a", "num:1", "noanswer:" + "z" * 1000])


def test_stable_id_is_the_same_in_another_process():
    code = "from openrlhf_copo.rewards.answers import stable_id; print(stable_id('expr:Symbol(\\'x\\')'))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "123"})
    assert int(other.stdout) == stable_id("expr:Symbol('x')")
