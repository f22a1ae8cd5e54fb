"""openrlhf_copo.rewards.answers: extraction forms, stable ids."""

import subprocess
import sys

import pytest
import torch

import json

from openrlhf_copo.rewards.answers import (STOP_TOKENS_ENV, answer_value, extract_answer, model_text, response_text, stable_id,
                                           tokenizer_stop_tokens)


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
        ("\\boxed{" + "1" * 600 + "}", "1" * 600),  # no length cut: the verifier's deadline bounds the work
    ],
)
def test_extract_answer(response, expected):
    assert extract_answer(response) == expected


# What OpenRLHF really hands the reward: decode(..., skip_special_tokens=False) keeps the stop token that
# vLLM sampled. Each template's end-of-turn token, with other numbers and answer forms.
@pytest.mark.parametrize(
    "response, expected",
    [
        ("Step 1: 3 - 10 = -7.\nAnswer: -7<|endoftext|>", "-7"),  # Qwen2.5 / SmolLM2 end of text
        ("Adding them, the answer is 12.<|eot_id|>", "12"),  # Llama 3
        ("So \\boxed{\\frac{3}{4}}<|im_end|>", "\\frac{3}{4}"),  # ChatML (Qwen2.5, SmolLM2)
        ("Answer: 1,000</s>", "1,000"),  # Mistral / Llama 2
        ("Answer: 0.25<end_of_turn>", "0.25"),  # Gemma
        ("Answer: 19<\uff5cend\u2581of\u2581sentence\uff5c>", "19"),  # DeepSeek
        ("Answer: 8<|end|>", "8"),  # Phi-3
        ("Answer: 5<|eom_id|>", "5"),
        # what comes after the end of the turn is not the model's answer
        ("\\boxed{3}<|im_end|>\n<|im_start|>user\nNow \\boxed{9}", "3"),
        ("Answer: 4<|eot_id|><|start_header_id|>assistant<|end_header_id|>Answer: 6", "4"),
        # other special tokens are dropped, not cut at: gpt-oss puts its final channel after them
        ("<|channel|>analysis<|message|>think<|end|>", None),
        ("<|channel|>final<|message|>Answer: 5<|return|>", "5"),
        # markdown emphasis around the answer or the word
        ("Answer: **42**", "42"),
        ("**Answer:** 12", "12"),
        ("**Final Answer**: $\\frac{1}{2}$.", "\\frac{1}{2}"),
        ("Answer: *-3*<|im_end|>", "-3"),
        ("__Answer:__ $$17$$", "17"),
        # "Answer:" anywhere, not only at the start of a line; the last one wins
        ("Compute: 6*7. Answer: 42", "42"),
        ("First try. Answer: 10. Check: wrong. Final answer: 11", "11"),
        ("Answer: 6*7", "6*7"),  # emphasis is stripped at the ends only
        ("I answered: 5", None),  # "answered" is not "answer:"
        ("Answer: \\(x = 3\\)", "x = 3"),
    ],
)
def test_extract_answer_from_decoded_openrlhf_text(response, expected):
    assert extract_answer(response) == expected


def test_model_text_is_the_same_with_and_without_special_tokens():
    """OpenRLHF's reward input (special tokens kept) and vLLM's text (skipped) read the same."""
    body = "We get 7.\nAnswer: 7"
    assert model_text(body + "<|im_end|>") == model_text(body) == body
    assert model_text("<|channel|>final<|message|>" + body + "<|return|>") == "final" + body


def test_a_tokenizers_own_stop_token_from_the_environment(monkeypatch):
    """Beyond the built-in templates, the driver passes the actor tokenizer's EOS tokens (COPO_STOP_TOKENS)."""
    text = "Answer: 5<|my_stop|>Answer: 6"
    monkeypatch.delenv(STOP_TOKENS_ENV, raising=False)
    assert extract_answer(text) == "6"  # an unknown special token is only dropped
    monkeypatch.setenv(STOP_TOKENS_ENV, json.dumps(["<|my_stop|>", "[END]"]))
    assert extract_answer(text) == "5"
    assert extract_answer("Answer: 2[END]Answer: 3") == "2"
    monkeypatch.setenv(STOP_TOKENS_ENV, "not json")  # a bad variable costs nothing: the built-ins still apply
    assert extract_answer("Answer: 2<|im_end|>Answer: 3") == "2"


def test_tokenizer_stop_tokens_of_the_demo_model():
    from openrlhf_copo.cpu_demo.models import smollm2_instruct

    assert "<|im_end|>" in tokenizer_stop_tokens(smollm2_instruct())


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


@pytest.mark.parametrize("response, expected", [
    ("3 + 4 = 7<|im_end|>", "7"),
    ("so 6 times 7 is 42.", "42"),
    ("The total is 1,000 apples", "1,000"),
    ("half of it: 3/4 of the cake", "3/4"),
    ("-5 degrees, then -12", "-12"),
    ("nothing numeric", None),
    ("Answer: 5, not 9", "5, not 9"),  # a stated answer still wins over the last number
    ("\\boxed{8} and 9 more", "8"),
])
def test_the_final_number_rule(response, expected):
    assert extract_answer(response, last_number=True) == expected


def test_the_final_number_rule_is_off_by_default():
    assert extract_answer("so 6 times 7 is 42.") is None


@pytest.mark.parametrize("text, value", [
    ("6 \\times 7 = 42", "42"), ("x = 5+5+1 = 7 = 11", "11"), ("z = 3+3 = 2", "2"), ("(p,q)=(3,2)", "(3,2)"),
    ("|AB| = 1", "1"), ("f(2) = 5", "5"), ("a_{10} = 3", "3"), ("x = \\frac{1}{2}", "\\frac{1}{2}"),
    # equations that are the answer stay equations
    ("x^2 + y^2 = 1", "x^2 + y^2 = 1"), ("2x = 6", "2x = 6"), ("y = 2x + 1", "y = 2x + 1"), ("x \\le 3", "x \\le 3"),
    ("x \\neq 3", "x \\neq 3"), ("x >= 3", "x >= 3"), ("P(X=3) = 0.2", "0.2"),
    ("\\text{odd}", "odd"), ("\\textbf{(C)}", "(C)"), ("$\\text{Evelyn}$", "Evelyn"),
    ("1 000", "1000"), ("1\\,000", "1000"), ("1{,}000", "1000"), ("-12~345.5", "-12345.5"), ("1,000,000", "1000000"),
    ("0,111", "0,111"), ("1,5", "1,5"), ("1 2", "1 2"), ("$(1, \\frac{9}{2})$", "(1, \\frac{9}{2})"), ("12:00", "12:00"),
])
def test_answer_value(text, value):
    assert answer_value(text) == value


@pytest.mark.parametrize("response, expected", [
    # the statement that starts last wins, whatever its form
    ("so $\\boxed{42}$, minus one: 41.\nAnswer: 41", "41"),
    ("\\boxed{255} ... Final Answer: The final answer is $10,455$. I hope it is correct.", "10,455"),
    ("Final Answer: The final answer is 7.78. I hope it is correct.", "7.78"),
    ("Answer: 12. Recheck: the answer is \\boxed{13}", "13"),
    ("My final answer is: 9", "9"),
    # joined boxes and math pieces; not across a sentence
    ("\\boxed{1}, \\boxed{2}, and \\boxed{3}", "1, 2, 3"), ("$\\boxed{-2}$ or $\\boxed{5}$", "-2, 5"),
    ("\\boxed{3}. Then we see \\boxed{4}", "4"), ("Answer: $2$ and $3$", "2, 3"),
    ("Answer:\n$$\n\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}\n$$", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"),
    # an empty statement yields to the one before it
    ("\\boxed{8}, and I put it in \\boxed{}", "8"), ("The answer is 4.\nAnswer:", "4"),
])
def test_the_last_final_answer_statement(response, expected):
    assert extract_answer(response) == expected
