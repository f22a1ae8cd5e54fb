"""Patch 11 under mode `knapsack` (`runtime_patches/knapsack.py`): the pilot, each prompt's success rate from its
history or its pilot, the allocation drawn through OpenRLHF's dispatch, every response kept with its group's size,
on OpenRLHF's own Experience objects and `SamplesGenerator._process_response_into_experience` (through vLLM:
tests/e2e/test_knapsack_cpu.py)."""

import types
from collections import defaultdict

import pytest
import torch
from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

from openrlhf_copo.contract import (GROUP_SIZE, KNAPSACK_MIXED, KNAPSACK_N_MAX, KNAPSACK_N_MIN, KNAPSACK_PILOTED,
                                    KNAPSACK_SURPLUS)
from openrlhf_copo.core import KNAPSACK_WINDOW
from openrlhf_copo.openrlhf_ext.runtime_patches.knapsack import History, generate


class ScriptedEngines:
    """Stands in for the vLLM engines behind OpenRLHF's dispatch: each prompt's rewards read from its script in draw
    order (with, where ``correct`` scripts it, a `copo_correct` of the reward file's), each response's first token its
    serial number. Every dispatch call is recorded as {prompt: responses asked}."""

    def __init__(self, scripts: dict, correct: dict = None):
        self.scripts, self.correct = scripts, correct or {}
        self.drawn = defaultdict(int)
        self.calls = []
        self.serial = 0

    def respond(self, prompt: str, n: int) -> list:
        out = []
        for _ in range(n):
            k, self.serial = self.drawn[prompt], self.serial + 1
            self.drawn[prompt] += 1
            logs = {"copo_correct": self.correct[prompt][k]} if prompt in self.correct else {}
            out.append({"prompt": prompt, "label": "1", "observation_tokens": [5, 6, 7, self.serial, 9],
                        "action_ranges": [(3, 5)], "reward": self.scripts[prompt][k],
                        "scores": self.scripts[prompt][k], "rollout_log_probs": None, "truncated": False,
                        "extra_logs": logs})
        return out


def generator_for(engines: ScriptedEngines, G: int, monkeypatch, knapsack_max_n: int = 128):
    """A real `SamplesGenerator` whose dispatch asks ``engines``, and the pilot's `_generate_vllm` as OpenRLHF's draws
    it: the next prompts of the iterator, n each, in runs by prompt."""
    import ray

    args = types.SimpleNamespace(rollout=types.SimpleNamespace(n_samples_per_prompt=G),
                                 copo=types.SimpleNamespace(knapsack_max_n=knapsack_max_n))
    generator = SamplesGenerator(types.SimpleNamespace(args=args), None, None, None, [])

    def dispatch(prompts, labels, images=None, **kwargs):
        engines.calls.append(dict.fromkeys(prompts, kwargs["n_samples_per_prompt"]))
        return [engines.respond(p, kwargs["n_samples_per_prompt"]) for p in prompts]

    def original(gen, iterator, num_prompts, dynamic_filtering, **kwargs):
        prompts = [next(iterator) for _ in range(num_prompts)]
        responses = [r for ref in gen._dispatch_prompts_to_vllm(prompts, ["1"] * len(prompts), **kwargs) for r in ref]
        return [gen._process_response_into_experience(r, **kwargs) for r in responses], len(prompts), False

    generator._dispatch_prompts_to_vllm = dispatch
    monkeypatch.setattr(ray, "get", lambda refs: refs)
    return generator, original


def step(generator, original, prompts, G):
    experiences, consumed, exhausted = generate(generator, original, iter(prompts), len(prompts), False,
                                                {"n_samples_per_prompt": G, "max_len": 2048})
    assert consumed == len(prompts) and not exhausted
    return experiences


def test_a_step_pilots_new_prompts_then_draws_the_allocation_and_keeps_every_response(monkeypatch, capsys):
    """3 new prompts x G = 4, a budget of 12. Pilots of 2: "easy" 1, 1 (p 1), "hard" 0, 0 (p 0), "half" 1, 0 (p 1/2).
    By hand (core.knapsack_allocation's rule): every prompt 2; "half" needs ceil(ln 0.1 / ln 0.5) = 4, 2 more; the
    other 4 of the 12 - 6 left are surplus, all to the one unsolved prompt: N = 2, 6, 4.
    Step 2, the same prompts: their rates now come from their history (the pilot's first 2 are drawn again but not
    read): "easy" 1, "hard" 0 (6 of 0), "half" 1/4 (1, 0, 0, 0): it needs ceil(ln 0.1 / ln 0.75) = 9, 7 more, and takes
    all 6 left: N = 2, 2, 8."""
    scripts = {"easy": [1.0] * 20, "hard": [0.0] * 20, "half": [1.0, 0.0, 0.0, 0.0] + [1.0] * 4 + [0.0] * 12}
    engines = ScriptedEngines(scripts)
    generator, original = generator_for(engines, 4, monkeypatch)
    prompts = ["easy", "hard", "half"]
    kept = step(generator, original, prompts, 4)
    # the pilot, then one round (one dispatch call per number asked, as Reinforce-Ada's rounds)
    assert engines.calls == [{"easy": 2, "hard": 2, "half": 2}, {"hard": 4}, {"half": 2}]
    assert [e.prompts[0] for e in kept] == ["easy"] * 2 + ["hard"] * 6 + ["half"] * 4  # in prompt order
    assert [e.info[GROUP_SIZE].item() for e in kept] == [2] * 2 + [6] * 6 + [4] * 4
    # each group in draw order: its pilot's 2 responses first
    assert [int(e.sequences[0, 3]) for e in kept] == [1, 2, 3, 4, 7, 8, 9, 10, 5, 6, 11, 12]
    metrics = {k: kept[0].info[k].item() for k in (KNAPSACK_N_MAX, KNAPSACK_N_MIN, KNAPSACK_MIXED, KNAPSACK_PILOTED,
                                                   KNAPSACK_SURPLUS)}
    assert metrics == {KNAPSACK_N_MAX: 6, KNAPSACK_N_MIN: 2, KNAPSACK_MIXED: 1, KNAPSACK_PILOTED: 3, KNAPSACK_SURPLUS: 4}
    assert all(torch.equal(e.info[KNAPSACK_SURPLUS], kept[0].info[KNAPSACK_SURPLUS]) for e in kept)
    assert ("openrlhf_copo: knapsack: 3 prompts, 12 responses; N per prompt [2, 6, 4], p [1.0, 0.0, 0.5] (3 from a "
            "pilot of 2); 1 mixed, surplus 4") in capsys.readouterr().err

    kept = step(generator, original, prompts, 4)
    assert engines.calls[3:] == [{"easy": 2, "hard": 2, "half": 2}, {"half": 6}]
    assert [e.info[GROUP_SIZE].item() for e in kept] == [2] * 4 + [8] * 8
    assert kept[0].info[KNAPSACK_PILOTED].item() == 0 and kept[0].info[KNAPSACK_SURPLUS].item() == 0
    assert "N per prompt [2, 2, 8], p [1.0, 0.0, 0.25] (0 from a pilot of 2)" in capsys.readouterr().err


def test_correct_is_the_reward_files_copo_correct_where_it_gives_one(monkeypatch):
    """A formatted but wrong answer under the 0 / 0.1 / 1 reward scores 0.1 and copo_correct 0: incorrect. Both
    prompts' pilots are then all incorrect (p 0): 12 - 4 = 8 of surplus, 4 each."""
    scripts = {"a": [0.1] * 10, "b": [0.1, 1.0] + [0.0] * 8}
    engines = ScriptedEngines(scripts, correct={"a": [0.0] * 10, "b": [0.0] * 10})
    generator, original = generator_for(engines, 6, monkeypatch)
    kept = step(generator, original, ["a", "b"], 6)
    assert [e.info[GROUP_SIZE].item() for e in kept] == [6] * 12 and kept[0].info[KNAPSACK_MIXED].item() == 0


def test_the_cap_holds_and_the_budget_is_exact(monkeypatch):
    """At --copo.knapsack_max_n 5 the unsolved prompt takes 3 of the surplus, the solved one the rest."""
    engines = ScriptedEngines({"easy": [1.0] * 10, "hard": [0.0] * 10})
    generator, original = generator_for(engines, 4, monkeypatch, knapsack_max_n=5)
    kept = step(generator, original, ["easy", "hard"], 4)
    assert [e.info[GROUP_SIZE].item() for e in kept] == [3] * 3 + [5] * 5 and len(kept) == 8


def test_the_history_keeps_each_prompts_latest_outcomes():
    history = History()
    assert history.rate("p") is None
    history.add("p", [True] * 10)
    history.add("p", [False] * 10)  # the latest 16: 6 correct, 10 incorrect
    assert history.rate("p") == pytest.approx(6 / 16) and len(history.outcomes[next(iter(history.outcomes))]) == \
        KNAPSACK_WINDOW
    assert history.rate("q") is None
