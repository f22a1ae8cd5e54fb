"""openrlhf_copo.rewards.verifier: exact answer ids, the numeric fast path against math-verify itself, the verdict
cache, and a worker that cannot start."""

import random
import time

import pytest

from openrlhf_copo.rewards import verifier
from openrlhf_copo.rewards.answers import answer_value
from openrlhf_copo.rewards.verifier import VerifierPool, fast_verdict, judge, literal_value


def canon(answer: str) -> str:
    """The canonical form math-verify's reading of ``answer`` gets in a worker (after the reward's value rule)."""
    return judge(answer_value(answer), "1")[1]


@pytest.mark.parametrize("a, b", [
    ("12345678901", "12345678902"),  # 10 significant digits used to merge these
    ("10^{20}", "10^{20}+1"),
    ("0.1234567890123", "0.1234567890124"),
    ("\\frac{1}{3}", "0.333333"),  # math-verify calls these equal (6-place rounding); they are not the same answer
    ("\\sqrt{2}", "1.41421356237310"),
    ("2^{100}", "2^{100}-1"),
])
def test_near_equal_numbers_get_different_ids(a, b):
    assert canon(a) != canon(b)


@pytest.mark.parametrize("forms, expected", [
    (["0.5", "\\frac{1}{2}", "1/2", "\\dfrac{2}{4}", "x = \\frac{1}{2}"], "num:1/2"),
    (["50\\%", "50 \\%", "50%"], "pct:1/2"),  # math-verify calls 50% equal to 50 and to 0.5: its own id
    (["3", "3.0", "x = 3", "y=3", "\\sqrt{9}", "6/2", "27^{1/3}"], "num:3"),
    (["1000", "1,000", "10^3", "10^{3}"], "num:1000"),
    (["10^{20}+1"], "num:100000000000000000001"),
    (["-7", "-\\frac{14}{2}"], "num:-7"),
])
def test_equal_values_share_one_exact_form(forms, expected):
    assert {canon(f) for f in forms} == {expected}


def test_irrational_numbers_by_their_value_and_sets_by_structure():
    assert canon("\\sqrt{8}") == canon("2\\sqrt{2}") == "num~2.82842712474619009760337744842"
    assert canon("\\frac{\\sqrt{2}}{2}") == canon("\\frac{1}{\\sqrt{2}}")
    assert canon("\\{1, 2\\}") == canon("\\{2, 1\\}") != canon("\\{1, 3\\}")
    assert canon("x^2 + x") == canon("x(x+1)")


def test_a_power_tower_is_not_computed():
    """Its id comes from its structure, decided without a clock: the same on a quiet and on a loaded machine."""
    from math_verify import parse

    tower = parse("\\boxed{9^{9^{9^{9}}}}", parsing_timeout=None)[0]
    assert verifier._exact_value(tower) is None
    t = time.perf_counter()
    form = verifier.canonical_form(tower)
    assert time.perf_counter() - t < 5
    assert form.startswith("numexpr:") and form != canon("9") and form == verifier.canonical_form(tower)


@pytest.mark.parametrize("text, value", [
    ("42", 42), ("-7", -7), ("+3", 3), ("1,000", 1000), ("12,345,678", 12345678), ("0.25", 0.25), (".5", 0.5),
    ("3/4", 0.75), ("\\frac{3}{4}", 0.75), ("-\\dfrac{1}{2}", -0.5), ("\\tfrac{5}{2}", 2.5),
    ("1,5", None), ("1,0000", None), ("x = 3", None), ("\\frac{1}{0}", None), ("3\\%", None), ("2^3", None),
])
def test_literal_value(text, value):
    got = literal_value(text)
    assert (got is None and value is None) or float(got) == value


def _literal_forms(rng: random.Random):
    n, d = rng.randint(-40, 40), rng.choice([1, 2, 3, 4, 5, 8])
    forms = [str(n), f"{n}.0", f"{n / d}", f"{n}/{d}", f"\\frac{{{n}}}{{{d}}}" if n >= 0 else f"-\\frac{{{-n}}}{{{d}}}",
             f"x = {n}", f"{n + 0.0000004:.7f}", f"{n / 3:.6f}", f"{n * 1000:,}"]
    return rng.choice(forms)


def test_the_fast_path_agrees_with_math_verify():
    """Wherever the fast path answers, math-verify (in this process) gives the same verdict and the same id."""
    rng = random.Random(0)
    answered = 0
    for _ in range(400):
        pred, gold = _literal_forms(rng), _literal_forms(rng)
        if rng.random() < 0.3:
            gold = pred.replace("x = ", "")
        fast = fast_verdict(pred, gold)
        if fast is None:
            continue
        answered += 1
        correct, form, gold_ok = judge(pred, gold)
        assert (fast.correct, fast.canon) == (correct, form), (pred, gold)
    assert answered > 250  # it does cover the common case


def test_verdicts_are_cached_per_answer_and_label():
    pool = VerifierPool(workers=1, timeout=10)
    try:
        first = pool.verify("\\sqrt{16}", "4")
        assert first.correct and first.status == "ok"
        pool.close()  # no worker left: only the cache can answer now
        pool._free = type(pool._free)()
        assert pool.verify("\\sqrt{16}", "4") == first
    finally:
        pool.close()


def test_a_worker_that_cannot_start_fails_loudly_and_fast(tmp_path, monkeypatch, caplog):
    """math-verify missing on a node: every verdict says so at once, with the node and the missing module."""
    fake = tmp_path / "math_verify.py"
    fake.write_text("raise ModuleNotFoundError(\"No module named 'math_verify'\", name='math_verify')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    pool = VerifierPool(workers=2, timeout=10)
    try:
        with caplog.at_level("ERROR", logger="openrlhf_copo.rewards"):
            v = pool.verify("\\sqrt{4}", "2")
        assert v.status == "unavailable" and not v.correct
        import socket

        assert "cannot start on node " + socket.gethostname() in pool.unavailable
        assert "No module named 'math_verify'" in pool.unavailable
        assert [r.message for r in caplog.records if "cannot start" in r.message]
        t = time.perf_counter()
        assert [pool.verify(f"\\sqrt{{{i}}}", "2").status for i in range(20)] == ["unavailable"] * 20
        assert time.perf_counter() - t < 1  # no start attempt per response
        assert fast_verdict("2", "2").correct  # plain numbers still need no worker
    finally:
        pool.close()


def test_the_reward_file_flags_every_check_when_no_worker_can_start(tmp_path, monkeypatch):
    from tests_support import REWARD_FILE, load_by_path

    (tmp_path / "math_verify.py").write_text("raise ImportError('broken install')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    verifier.reset_pool()
    try:
        reward_func = load_by_path(REWARD_FILE)
        out = reward_func(["Answer: \\sqrt{4}", "Answer: \\pi", "no answer here"], ["", "", ""], ["2", "2", "2"])
        assert out["extra_logs"]["copo_verify_failed"].tolist() == [1.0, 1.0, 0.0]
        assert out["rewards"].tolist() == [0.0, 0.0, 0.0]
    finally:
        monkeypatch.delenv("PYTHONPATH")
        verifier.reset_pool()


SYMBOLIC = [  # (answer value, label): answers only math-verify can read, each a few to a few hundred ms of sympy
    ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}"), ("2\\sqrt{3}+\\sqrt{12}", "4\\sqrt{3}"),
    ("(x+1)^3", "x^3+3x^2+3x+1"), ("\\frac{x^2-1}{x-1}", "x+1"), ("[-2, 7]", "[-2,7]"),
    ("(-\\infty, 1) \\cup (3, \\infty)", "(-\\infty,1)\\cup(3,\\infty)"), ("\\{1, 2, 3\\}", "\\{3,2,1\\}"),
    ("\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", "\\begin{pmatrix} 1 & 2 \\\\ 3 & 5 \\end{pmatrix}"),
    ("F_n = \\sum_{k=0}^{n-1} F_k", "0"), ("\\sin^2 x + \\cos^2 x", "1"), ("e^{i\\pi}", "-1"),
    ("\\frac{\\pi}{6} + \\frac{\\pi}{3}", "\\frac{\\pi}{2}"), ("\\log_2 1024", "10"), ("y = 2x + 3", "y=3+2x"),
    ("\\binom{10}{3}", "120"), ("\\sqrt[3]{27} \\cdot \\sqrt{5}", "3\\sqrt{5}"), ("x^2 + 2xy + y^2", "(x+y)^2"),
    # about 0.3-0.7 s each on a quiet core: 3 busy processes per core push them past math-verify's old inner limit
    ("\\sqrt{5+2\\sqrt{6}}", "\\sqrt{2}+\\sqrt{3}"), ("\\frac{\\sin 3x}{\\sin x}", "3 - 4\\sin^2 x"),
    ("(x+1)^{12}", "x^{12}+12x^{11}+66x^{10}+220x^9+495x^8+792x^7+924x^6+792x^5+495x^4+220x^3+66x^2+12x+1"),
]


def _verdicts(timeout: float):
    pool = VerifierPool(workers=2, timeout=timeout)
    try:
        pool.warm_up()
        return pool, [pool.verify(a, g) for a, g in SYMBOLIC]
    finally:
        pool.close()


def test_the_same_verdicts_on_a_loaded_machine_or_flagged():
    """A rollout node runs vLLM, training and the reward on the same cores. Busy processes (3 per core, started and
    stopped by pid) slow every verifier worker down; no verdict or id may change because of it: each is the quiet
    machine's, or flagged (timeout) and not cached. (math-verify's own per-call limits used to run out here and
    come back as an empty parse or a False: a different verdict, unflagged, cached for the run.)"""
    import os
    import subprocess
    import sys

    _, quiet = _verdicts(timeout=8)
    assert all(v.status == "ok" for v in quiet), quiet
    assert {v.correct for v in quiet} == {True, False}
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(3 * (os.cpu_count() or 2))]
    try:
        t = time.perf_counter()
        pool, loaded = _verdicts(timeout=8)
        elapsed = time.perf_counter() - t
    finally:
        for p in busy:
            p.kill()
            p.wait()
    changed = [(pair, q, v) for pair, q, v in zip(SYMBOLIC, quiet, loaded) if v != q and v.status == "ok"]
    assert not changed, changed
    flagged = [v for v in loaded if v.status != "ok"]
    assert all(v.status == "timeout" and not v.correct for v in flagged)
    assert len(flagged) <= len(SYMBOLIC) // 2, "the load starved the workers: the test says nothing"
    assert elapsed < 8 * len(SYMBOLIC) / 2 + 60  # bounded: every request within its deadline
    assert not any((a, g) in pool._cache for (a, g), v in zip(SYMBOLIC, loaded) if v.status != "ok")


def test_a_request_past_its_budget_is_flagged_and_the_worker_lives_on():
    """The worker's own alarm (a little under the deadline) answers 'timeout': flagged, not cached, no restart."""
    pool = VerifierPool(workers=1, timeout=2)
    try:
        assert pool.verify("\\sqrt{16}", "4").correct
        resp, status = pool._request({"op": "sleep", "seconds": 5, "pred": "1", "gold": "1", "budget": 0.5})
        assert resp == {"timeout": True} and status == "ok" and pool.restarts == 0
        assert pool.verify("\\sqrt{25}", "5").correct and pool.restarts == 0
    finally:
        pool.close()
