"""The reward against math-verify itself as the judge, on a few hundred generated answer / label pairs.

Each label is a value of one class (integers, decimals, fractions, radicals, pi, percentages, intervals, sets,
tuples, equations, text, answers over several boxes); each answer is an equivalent form, a near miss or a wrong
value, written into a response the way models write them (a box, "Answer:", Minerva's sentence, several boxes,
an intermediate box before the final statement). Checked through the real reward file:

- extraction: the reward reads the answer that was written last;
- verdict: the reward's is math-verify's own `verify(parse(label), parse(answer))` on that answer's value
  (`answer_value` of both: docs/rewards.md's extraction and value rules);
- ids: no id holds two verdicts against one label (a merge of right with wrong moves COPO's weights).
"""

import collections
import random

import pytest

from openrlhf_copo.rewards.answers import answer_value, extract_answer
from tests_support import REWARD_FILE, load_by_path


def _classes(rng: random.Random):
    """(label, [answers]) per class: equivalent forms first, then near misses and wrong values."""
    n, m = rng.randint(2, 60), rng.randint(2, 9)
    p, q = rng.randint(1, 20), rng.choice([3, 4, 6, 7, 8, 9])
    s = rng.choice([2, 3, 5, 6, 7])
    a, b = sorted(rng.sample(range(-9, 10), 2))
    yield str(n * 1000 + m), [f"{n},{m:03d}", f"{n}\\,{m:03d}", f"{n} {m:03d}", f"{n}{{,}}{m:03d}", f"{n * 1000 + m}.0",
                              str(n * 1000 + m + 1), str(n + m)]
    yield f"\\frac{{{p}}}{{{q}}}", [f"{p}/{q}", f"\\dfrac{{{2 * p}}}{{{2 * q}}}", f"{p / q:.6f}", f"{p / q:.3f}",
                                   f"\\frac{{{q}}}{{{p}}}", f"x = \\frac{{{p}}}{{{q}}}", f"{p + 1}/{q}"]
    yield f"{m}\\sqrt{{{s}}}", [f"\\sqrt{{{m * m * s}}}", f"{m} \\sqrt {s}", f"\\sqrt{{{s}}} \\cdot {m}",
                               f"{m}\\sqrt{{{s + 1}}}", f"{m * m * s}", f"{(m * m * s) ** 0.5:.4f}"]
    yield f"{m}\\pi", [f"\\pi {m}", f"{2 * m}\\pi/2", f"{m}\\cdot\\pi", f"{m + 1}\\pi", f"{m}", f"{m * 3.14159:.5f}"]
    yield f"{n}\\%", [f"{n}%", f"{n} \\%", f"{n}", f"{n / 100}", f"{n + 1}\\%"]
    yield f"[{a}, {b})", [f"[{a},{b})", f"\\left[{a}, {b}\\right)", f"({a}, {b})", f"[{a}, {b}]", f"[{a}, {b + 1})"]
    yield f"\\{{{a}, {b}\\}}", [f"\\{{{b}, {a}\\}}", f"\\{{{a},{b}\\}}", f"\\{{{a}, {b}, {b + 1}\\}}", f"\\{{{a}\\}}"]
    yield f"({a}, {b})", [f"({a},{b})", f"(x, y) = ({a}, {b})", f"({b}, {a})", f"({a}, {b}, 0)"]
    yield f"({a}, {p / 2})", [f"({a}, \\frac{{{p}}}{{2}})", f"({a},{p / 2})", f"({a}, {p / 2 + 0.5})"]
    yield f"y = {m}x + {n}", [f"y={m}x+{n}", f"y = {n} + {m}x", f"{m}x + {n}", f"y = {m}x - {n}", f"y = {n}x + {m}"]
    yield f"x = {n}", [f"{n}", f"x={n}", f"{n}.0", f"x = {n + 1}", f"{m} \\times {n} = {m * n}"]
    yield str(m * n), [f"{m} \\times {n} = {m * n}", f"{m}\\cdot {n} = {m * n}", f"{m} \\times {n + 1} = {m * (n + 1)}",
                       f"k = {m} + {m * n - m} = {m * n}", f"k = {m} + {m * n - m} = {m * n - 1}"]
    yield "\\text{odd}", ["odd", "\\text{odd}", "\\text{even}", "\\textbf{odd}"]
    yield "\\{-3, 2\\}", ["-3, 2", "2, -3", "-3, 3", "-3"]


def _responses(rng: random.Random, answer: str):
    """(response, what it states last) for one answer: the forms a model writes, with distractors before."""
    decoy = f"\\boxed{{{rng.randint(100, 999)}}}"
    pieces = [x.strip() for x in answer.split(",")] if answer in ("-3, 2", "2, -3", "-3, 3") else None
    forms = [
        (f"We simplify step by step. So the result is $\\boxed{{{answer}}}$.", answer),
        (f"Checking the cases.\nAnswer: ${answer}$", answer),
        (f"Partial result {decoy} for the first part.\nFinal Answer: The final answer is ${answer}$. I hope it is correct.",
         answer),
        (f"An intermediate {decoy} on the way. The final answer is \\boxed{{{answer}}}", answer),
    ]
    if pieces:
        forms.append((", ".join(f"\\boxed{{{x}}}" for x in pieces[:-1]) + f" and \\boxed{{{pieces[-1]}}}",
                      ", ".join(pieces)))
    return forms


@pytest.fixture(scope="module")
def scored():
    """Every (label, response, what it states) with the real reward file's output."""
    rng = random.Random(15)
    cases = []
    for _ in range(3):
        for label, answers in _classes(rng):
            for answer in answers:
                for response, stated in _responses(rng, answer):
                    cases.append((label, response, stated))
    reward_func = load_by_path(REWARD_FILE)
    out = reward_func([r + "<|im_end|>" for _, r, _ in cases], [""] * len(cases), [lab for lab, _, _ in cases])
    logs = out["extra_logs"]
    return [(lab, resp, stated, reward, int(aid), failed) for (lab, resp, stated), reward, aid, failed in
            zip(cases, out["rewards"].tolist(), logs["copo_answer_id"].tolist(), logs["copo_verify_failed"].tolist())]


def _math_verify(label: str, answer: str) -> bool:
    from math_verify import parse, verify

    gold = parse("\\boxed{" + answer_value(label) + "}", parsing_timeout=None)
    pred = parse("\\boxed{" + answer_value(answer) + "}", parsing_timeout=None)
    return bool(verify(gold, pred, timeout_seconds=None))


def test_there_are_a_few_hundred_pairs_of_every_kind(scored):
    assert len(scored) >= 600
    assert 0.25 < sum(r for *_, r, _, _ in scored) / len(scored) < 0.75  # right and wrong answers both


def test_the_answer_stated_last_is_read(scored):
    for label, response, stated, *_ in scored:
        assert extract_answer(response) == stated, response


def test_every_verdict_is_math_verifys_on_the_answer(scored):
    wrong = [(label, stated, reward) for label, _, stated, reward, _, failed in scored
             if not failed and bool(reward) != _math_verify(label, stated)]
    assert not wrong, wrong[:10]
    assert not any(failed for *_, failed in scored)


def test_no_id_holds_a_right_and_a_wrong_answer(scored):
    verdicts_of = collections.defaultdict(set)
    for label, _, _, reward, answer_id, _ in scored:
        verdicts_of[(label, answer_id)].add(reward)
    merged = [key for key, v in verdicts_of.items() if len(v) > 1]
    assert not merged, merged[:10]
    # and equivalence still clusters: fewer ids than distinct answer strings
    ids = {(label, aid) for label, _, _, _, aid, _ in scored}
    assert len(ids) < len({(label, stated) for label, _, stated, *_ in scored})
