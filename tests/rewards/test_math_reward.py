"""The reward file OpenRLHF loads by path: correctness, equivalence-clustered ids, no hangs, works in threads / Ray."""

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest
import torch

import openrlhf_copo.rewards as rewards_pkg
from openrlhf_copo.rewards.verifier import VerifierPool, get_pool
from tests_support import load_by_path

REWARD_FILE = Path(rewards_pkg.__file__).parent / "math_reward.py"
FORMAT_FILE = Path(rewards_pkg.__file__).parent / "math_format_reward.py"
PROMPT = "<|im_start|>user\nWhat is 1/2? Put the final answer in \\boxed{}.<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def reward_func():
    return load_by_path(REWARD_FILE)


def score(reward_func, response, label="\\frac{1}{2}"):
    out = reward_func([PROMPT + response], [PROMPT], [label])
    return out["rewards"].item(), {k: v.item() for k, v in out["extra_logs"].items()}


def test_output_layout_matches_openrlhf(reward_func):
    out = reward_func([PROMPT + "\\boxed{0.5}"], [PROMPT], ["1/2"])
    assert set(out) == {"rewards", "scores", "extra_logs"}
    assert out["rewards"].dtype == torch.float32 and out["rewards"].tolist() == [1.0]
    ids = out["extra_logs"]["copo_answer_id"]
    assert ids.dtype == torch.int64
    # OpenRLHF turns each extra log into info[key] = torch.tensor([value.flatten()[0].item()])
    assert torch.tensor([ids.flatten()[0].item()]).item() == ids.item()


def test_equivalent_answers_share_one_id(reward_func):
    forms = ["\\boxed{\\frac{1}{2}}", "\\boxed{0.5}", "\\boxed{1/2}", "Answer: $\\dfrac{1}{2}$", "\\boxed{0.50}"]
    results = [score(reward_func, f) for f in forms]
    assert [r for r, _ in results] == [1.0] * len(forms)
    assert len({logs["copo_answer_id"] for _, logs in results}) == 1


def test_different_answers_differ_and_wrong_scores_zero(reward_func):
    r3, l3 = score(reward_func, "\\boxed{3}")
    r_sq8, l_sq8 = score(reward_func, "\\boxed{\\sqrt{8}}")
    r_2sq2, l_2sq2 = score(reward_func, "\\boxed{2\\sqrt{2}}")
    assert (r3, r_sq8, r_2sq2) == (0.0, 0.0, 0.0)
    assert l_sq8["copo_answer_id"] == l_2sq2["copo_answer_id"] != l3["copo_answer_id"]
    assert l3["copo_correct"] == 0.0 and l3["copo_has_answer"] == 1.0


def test_responses_without_answer_are_each_their_own_answer(reward_func):
    a = score(reward_func, "I am not sure.")
    b = score(reward_func, "Let me think more...")
    again = score(reward_func, "I am not sure.")
    assert a[0] == b[0] == 0.0 and a[1]["copo_has_answer"] == 0.0
    assert a[1]["copo_answer_id"] != b[1]["copo_answer_id"]
    assert a[1]["copo_answer_id"] == again[1]["copo_answer_id"]  # deterministic


def test_format_reward():
    fmt = load_by_path(FORMAT_FILE)
    got = [fmt([PROMPT + r], [PROMPT], ["1/2"])["rewards"].item() for r in ("no idea", "\\boxed{3}", "\\boxed{0.5}")]
    assert got == pytest.approx([0.0, 0.1, 1.0])
    # correctness stays 0/1 for zero control and accuracy metrics
    assert fmt([PROMPT + "\\boxed{3}"], [PROMPT], ["1/2"])["extra_logs"]["copo_correct"].item() == 0.0


def test_unparseable_label_scores_zero_and_is_flagged(reward_func):
    r, logs = score(reward_func, "\\boxed{2}", label="\\frac{")
    assert r == 0.0 and logs["copo_label_error"] == 1.0


def test_batch_call(reward_func):
    out = reward_func([PROMPT + "\\boxed{0.5}", PROMPT + "\\boxed{2}"], [PROMPT] * 2, ["1/2", "2"])
    assert out["rewards"].tolist() == [1.0, 1.0]
    assert out["extra_logs"]["copo_answer_id"].shape == (2,)


def test_works_from_threads_and_asyncio_to_thread(reward_func):
    """OpenRLHF calls reward_func via asyncio.to_thread: math-verify's signal timeouts fail there."""

    async def many():
        calls = [asyncio.to_thread(reward_func, [PROMPT + f"\\boxed{{{i}/2}}"], [PROMPT], ["1/2"]) for i in range(8)]
        return await asyncio.gather(*calls)

    outs = asyncio.run(many())
    assert [o["rewards"].item() for o in outs] == [0.0, 1.0] + [0.0] * 6
    results = []
    threads = [threading.Thread(target=lambda: results.append(score(reward_func, "\\boxed{0.5}")[0])) for _ in range(4)]
    [t.start() for t in threads]
    [t.join(60) for t in threads]
    assert results == [1.0] * 4


@pytest.fixture
def short_deadline(reward_func):
    """The reward file's own pool, warm, with a 2 s deadline instead of the default 10 s for one test. Each input below
    runs into the deadline (it is flagged copo_verify_failed), so at 10 s every one of them spent 8 s of a core; the
    deadline is what is tested, not its length."""
    pool = get_pool()
    pool.warm_up()
    default, pool.timeout = pool.timeout, 2.0
    yield pool.timeout
    pool.timeout = default


def test_pathological_answer_is_bounded(reward_func, short_deadline):
    t = time.perf_counter()
    r, logs = score(reward_func, "\\boxed{9^{9^{9^{9^{9^{9}}}}}}", label="3")
    assert r == 0.0 and isinstance(logs["copo_answer_id"], int) and logs["copo_verify_failed"] == 1.0
    assert time.perf_counter() - t < 5 * short_deadline


@pytest.mark.parametrize("answer_line", [
    "Answer: " + "\\frac{1}{" * 3000 + "2" + "}" * 3000,  # no length cut any more: the deadline bounds it
    "Answer: " + "(1+" * 20000 + "1" + ")" * 20000,
    "Answer: " + "x " * 50000,
], ids=["nested-fractions", "nested-parentheses", "100k-characters"])
def test_a_huge_final_line_is_bounded(reward_func, short_deadline, answer_line):
    t = time.perf_counter()
    r, logs = score(reward_func, answer_line, label="3")
    assert r == 0.0 and isinstance(logs["copo_answer_id"], int) and logs["copo_verify_failed"] == 1.0
    assert time.perf_counter() - t < 5 * short_deadline


def test_hung_worker_is_killed_at_the_deadline_and_replaced():
    pool = VerifierPool(workers=1, timeout=1.0)
    try:
        pool.warm_up()
        t = time.perf_counter()
        resp, status = pool._request({"op": "sleep", "seconds": 60, "pred": "1", "gold": "1"})
        assert resp is None and status == "timeout"
        assert time.perf_counter() - t < 5
        assert pool.restarts == 1
        assert pool.verify("\\sqrt{4}", "2").correct  # a fresh worker took over
    finally:
        pool.close()


def test_killed_worker_gives_reward_zero_not_a_hang():
    pool = VerifierPool(workers=1, timeout=5.0)
    try:
        pool.warm_up()
        worker = pool._all[0]
        os.kill(worker.proc.pid, 9)
        worker.proc.wait(5)
        verdict = pool.verify("\\sqrt{9}", "3")  # not a plain number: it must reach the dead worker
        assert verdict.status == "error" and not verdict.correct
        assert pool.verify("\\sqrt{9}", "3").correct  # a failure is not cached; a fresh worker answers
    finally:
        pool.close()


def test_the_last_number_reward_option(reward_func):
    """math_last_number_reward.py: the final-number rule as a last resort; same ids as the strict file."""
    last = load_by_path(Path(rewards_pkg.__file__).parent / "math_last_number_reward.py")
    prompt = "<|im_start|>user\nWhat is 5 + 7?<|im_end|>\n<|im_start|>assistant\n"
    bare = [prompt + "5 + 7 = 12<|im_end|>"]
    boxed = [prompt + "\\boxed{12}<|im_end|>"]
    assert last(bare, [prompt], ["12"])["rewards"].tolist() == [1.0]
    assert reward_func(bare, [prompt], ["12"])["rewards"].tolist() == [0.0]  # strict: no answer in that form
    assert last(bare, [prompt], ["12"])["extra_logs"]["copo_answer_id"].item() == \
        reward_func(boxed, [prompt], ["12"])["extra_logs"]["copo_answer_id"].item()
    assert last([prompt + "5 + 7 = 13<|im_end|>"], [prompt], ["12"])["rewards"].tolist() == [0.0]


# --- The classes the field's own test data found (issue 15), in our own words, through the real reward file ----

def verdicts(reward_func, responses, label):
    """(reward, answer id, verify failed) of each response against one label, as one OpenRLHF batch."""
    out = reward_func([r + "<|im_end|>" for r in responses], [""] * len(responses), [label] * len(responses))
    logs = out["extra_logs"]
    return list(zip(out["rewards"].tolist(), logs["copo_answer_id"].tolist(), logs["copo_verify_failed"].tolist()))


@pytest.mark.parametrize("response, label, reward", [
    # the last final-answer statement wins, whatever its form
    ("Each row has $\\boxed{42}$ marbles... but one is missing, so 41.\nAnswer: 41", "42", 0.0),
    ("Each row has $\\boxed{42}$ marbles... but one is missing, so 41.\nAnswer: 41", "41", 1.0),
    ("There are $\\boxed{7}$ per row, 6 rows.\nAnswer: 42", "42", 1.0),
    ("Sub-step: $\\boxed{255}$.\nFinal Answer: The final answer is $10,455$. I hope it is correct.", "10455", 1.0),
    ("Final Answer: The final answer is 7.78. I hope it is correct.", "7.78", 1.0),
    ("Answer: 12\nHmm, that is off by one. The answer is \\boxed{13}.", "13", 1.0),
    # several boxes of one statement are one answer, read as math-verify reads them (a set)
    ("The solutions are \\boxed{1}, \\boxed{2}, and \\boxed{3}.", "\\{1,2,3\\}", 1.0),
    ("The roots: $\\boxed{-2}$ and $\\boxed{5}$", "-2, 5", 1.0),
    ("First \\boxed{3}. Wait, that breaks the constraint, so it is \\boxed{4}.", "\\{3, 4\\}", 0.0),
    # a long final line is still the answer
    ("Answer: " + " + ".join(["1"] * 400), "400", 1.0),
    # thousands written with a space, a thin space or a braced comma; a leading-zero comma is a decimal
    ("Answer: 1 000", "1000", 1.0),
    ("\\boxed{1\\,000}", "1000", 1.0),
    ("\\boxed{1{,}000}", "1000", 1.0),
    ("\\boxed{0.111}", "0,111", 1.0),
    ("\\boxed{111}", "0,111", 0.0),
    # an equation or chain is its final value; a named value compares by its value
    ("\\boxed{6 \\times 7 = 42}", "42", 1.0),
    ("\\boxed{5 \\times 8 = 40}", "42", 0.0),
    ("\\boxed{x = 5+5+1 = 7 = 11}", "7", 0.0),
    ("\\boxed{(3,2)}", "(p,q)=(3,2)", 1.0),
    ("\\boxed{1}", "|AB|=1", 1.0),
    ("\\boxed{\\text{odd}}", "odd", 1.0),
    # clock times are not 12/0: compared as written
    ("\\boxed{12:00}", "12:00", 1.0),
    ("\\boxed{1:00}", "12:00", 0.0),
])
def test_the_final_answer_as_written(reward_func, response, label, reward):
    [(got, _, failed)] = verdicts(reward_func, [response], label)
    assert (got, failed) == (reward, 0.0)


@pytest.mark.parametrize("label, right, wrong", [
    ("42", ["\\boxed{6 \\times 7 = 42}", "Answer: 42", "\\boxed{x = 40 + 2 = 42}"], ["\\boxed{5 \\times 8 = 40}"]),
    ("11", ["\\boxed{x = 5+5+1 = 11}"], ["\\boxed{x = 5+5+1 = 7 = 12}", "\\boxed{z = 3+3 = 2}"]),
    ("12:00", ["\\boxed{12:00}"], ["\\boxed{1:00}", "\\boxed{3:00}", "\\boxed{12:30}"]),
    ("(3,2)", ["\\boxed{(p,q)=(3,2)}", "\\boxed{(3, 2)}"], ["\\boxed{(2,3)}", "\\boxed{(p,q)=(3,3)}"]),
    ("(1,\\frac{9}{2})", ["\\boxed{(1,4.5)}", "\\boxed{(1, \\frac92)}"], ["\\boxed{(1,4.6)}", "\\boxed{[1,4.5]}"]),
    ("0.5", ["\\boxed{\\frac{1}{2}}", "Answer: 0.5"], ["\\boxed{50}", "\\boxed{0.05}"]),
])
def test_ids_never_merge_right_with_wrong(reward_func, label, right, wrong):
    """Right answers share one id; no wrong answer shares it (a merge would make a split group look consistent)."""
    scored = verdicts(reward_func, right + wrong, label)
    assert [r for r, _, _ in scored] == [1.0] * len(right) + [0.0] * len(wrong)
    right_ids = {i for _, i, _ in scored[: len(right)]}
    assert len(right_ids) == 1
    assert not right_ids & {i for _, i, _ in scored[len(right):]}
    assert len({i for _, i, _ in scored[len(right):]}) == len(set(wrong))  # distinct wrong answers stay distinct


def test_a_percentage_has_an_id_of_its_own(reward_func):
    """math-verify calls 50% equal to 50 and to 0.5, which are not equal to each other: 50% can share an id with
    neither, or a group split between 50% and 0.5 would look consistent against the label 50."""
    for label, rewards in (("50", [1.0, 1.0, 0.0]), ("0.5", [1.0, 0.0, 1.0])):
        scored = verdicts(reward_func, ["\\boxed{50\\%}", "\\boxed{50}", "\\boxed{\\frac12}"], label)
        assert [r for r, _, _ in scored] == rewards
        assert len({i for _, i, _ in scored}) == 3
