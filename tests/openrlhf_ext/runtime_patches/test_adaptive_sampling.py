"""Patch 11 (`runtime_patches/adaptive_sampling.py`): which prompts get another round, the G kept per prompt with
their pool's statistics, what a pool holds while the rounds run, and the first step's check, on OpenRLHF's own
Experience objects and its own `SamplesGenerator._process_response_into_experience` (the rounds through vLLM:
tests/e2e/test_reinforce_ada_cpu.py)."""

import hashlib
import itertools
import random
import types
import weakref
from collections import defaultdict

import pytest
import torch
from openrlhf.trainer.ppo_utils.experience import Experience
from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

from openrlhf_copo.contract import (ADA_DRAWN, ADA_DRAWN_CORRECT, ADA_DRAWN_MAX, ADA_RESOLVED, ADA_ROUNDS, ADA_TOKENS,
                                    ADA_TOKENS_FIRST_ROUND)
from openrlhf_copo.core import ada_random_keep, ada_resolved, ada_select, mode_info
from openrlhf_copo.openrlhf_ext.config import CopoConfigError
from openrlhf_copo.openrlhf_ext.failure import failure_line
from openrlhf_copo.openrlhf_ext.runtime_patches.adaptive_sampling import (Pool, first_draw_indices, keep_groups,
                                                                          open_prompts, pools_by_prompt, resample)


def response(prompt: str, reward: float, length: int = 5) -> Experience:
    return Experience(prompts=[prompt], labels=["1"], images=[None], rewards=torch.tensor([reward]),
                      response_length=torch.tensor([length]), info={})


def settings(**kw):
    return types.SimpleNamespace(**{"ada_exit": "balanced", "ada_round_size": 8, "ada_budget": 12,
                                    "ada_threshold": 0.7, "ada_draw_factor": 4, **kw})


def pool_of(responses, G: int = 4, threshold: float = 0.7) -> Pool:
    pool = Pool(responses[0], G, threshold)
    for e in responses:
        pool.add(e)
    return pool


def test_first_round_groups_must_each_hold_one_prompt():
    first = [response("a", 1.0)] * 4 + [response("b", 0.0)] * 4
    pools = pools_by_prompt(first, 4, 0.7)
    assert [(p.prompt, p.drawn, p.correct) for p in pools] == [("a", 4, 4), ("b", 4, 0)]
    with pytest.raises(RuntimeError, match="group 1 holds responses to different prompts"):
        pools_by_prompt([response("a", 1.0)] * 5 + [response("b", 0.0)] * 3, 4, 0.7)
    with pytest.raises(RuntimeError, match="not a multiple of G = 4"):
        pools_by_prompt([response("a", 1.0)] * 6, 4, 0.7)


def test_unresolved_prompts_get_rounds_until_the_budget():
    pools = [pool_of([response("mixed", r) for r in (1, 0, 1, 0)]),  # resolved (balanced): no more rounds
             pool_of([response("hard", 0.0)] * 4),  # all wrong: 8 more, then the last 0 of its budget of 12
             pool_of([response("easy", 1.0)] * 11),  # all right, one short of the budget: a round of 1
             pool_of([response("hard", 0.5)] * 12)]  # reward 0.5 is not above the threshold 0.7: wrong, and at the budget
    assert open_prompts(pools, 4, settings()) == {1: 8, 2: 1}
    assert open_prompts(pools, 4, settings(ada_exit="positive_focused")) == {1: 8}  # all right: resolved
    for _ in range(8):
        pools[1].add(response("hard", 0.0))
    assert open_prompts(pools, 4, settings(ada_exit="positive_focused")) == {}  # never resolves within the budget


def test_kept_groups_carry_their_pool_and_the_step_cost():
    drawn_p = [response("p", r, length=3) for r in (0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0)]  # resolved in round 2
    drawn_q = [response("q", 0.0, length=2) for _ in range(12)]  # never resolved
    pools = [pool_of(drawn_p), pool_of(drawn_q)]
    kept = keep_groups(pools, 4, settings(), rounds=2, first_round_tokens=4 * 3 + 4 * 2, mode="reinforce_ada")
    assert [e.rewards.item() for e in kept] == [0, 0, 1, 1, 0, 0, 0, 0]
    assert all(a is b for a, b in zip(kept, [drawn_p[i] for i in (0, 1, 5, 8)] + drawn_q[:4]))  # in draw order
    assert [e.info[ADA_DRAWN].item() for e in kept] == [12] * 8
    assert [e.info[ADA_DRAWN_CORRECT].item() for e in kept] == [2] * 4 + [0] * 4
    assert [e.info[ADA_RESOLVED].item() for e in kept] == [1] * 4 + [0] * 4
    step = {k: kept[0].info[k].item() for k in (ADA_ROUNDS, ADA_DRAWN_MAX, ADA_TOKENS, ADA_TOKENS_FIRST_ROUND)}
    assert step == {ADA_ROUNDS: 2, ADA_DRAWN_MAX: 12, ADA_TOKENS: 12 * 3 + 12 * 2, ADA_TOKENS_FIRST_ROUND: 4 * 3 + 4 * 2}
    assert all(e.info[ADA_TOKENS].item() == 60 for e in kept)


@pytest.mark.parametrize("G", [2, 3, 4, 6])
def test_a_pool_keeps_at_most_G_and_selects_what_the_whole_pool_would(G):
    """Every correct / incorrect sequence of up to 9 draws: after each draw the pool holds at most G responses, and its
    G kept are those `ada_select` takes from the whole pool, by identity."""
    for n in range(G, 10):
        for flags in itertools.product((0, 1), repeat=n):
            drawn = [response("p", float(c)) for c in flags]
            pool = Pool(drawn[0], G, 0.7)
            for e in drawn:
                pool.add(e)
                assert len(pool.kept) <= G, flags
            assert (pool.drawn, pool.correct) == (n, sum(flags))
            expected = [drawn[i] for i in ada_select(flags, G)]
            assert all(a is b for a, b in zip(pool.select(), expected)) and len(pool.select()) == G, flags


class Engines:
    """Stands in for the vLLM engines behind OpenRLHF's `_dispatch_prompts_to_vllm`: each request's responses as the
    rollout executor returns them (prompt and response tokens, the reward scored in the engine), each prompt's reward
    drawn at its success rate by a seeded generator (or, for a prompt in ``scripted``, read from its list in draw
    order), and each response's first token its serial number, so that an Experience made of it says which draw it
    is. Every draw is recorded per prompt, in draw order."""

    def __init__(self, rates: dict, seed: int = 0, reward=float, scripted: dict = None):
        self.rates, self.rng, self.reward, self.scripted = rates, random.Random(seed), reward, scripted or {}
        self.drawn = defaultdict(list)  # prompt -> [(serial, reward, response tokens)]
        self.serial = 0
        self.calls = []  # what each dispatch call asked for: {prompt: responses}

    def respond(self, prompt: str, label: str, n: int) -> list:
        out = []
        for _ in range(n):
            self.serial += 1
            reward = (self.scripted[prompt][len(self.drawn[prompt])] if prompt in self.scripted
                      else self.reward(self.rng.random() < self.rates[prompt]))
            length = 1 + self.serial % 4
            self.drawn[prompt].append((self.serial, reward, length))
            out.append({"prompt": prompt, "label": label,
                        "observation_tokens": [5, 6, 7, self.serial] + [9] * (length - 1),
                        "action_ranges": [(3, 3 + length)], "reward": reward, "scores": reward,
                        "rollout_log_probs": None, "truncated": False, "extra_logs": {}})
        return out


#: The --train.seed of `generator_for`'s runs (the random keep's seeds read it).
RUN_SEED = 3


def generator_for(engines: Engines, G: int, monkeypatch, **copo) -> SamplesGenerator:
    """A real `SamplesGenerator` whose dispatch asks ``engines`` (its refs are the responses: `ray.get` gives them)."""
    import ray

    args = types.SimpleNamespace(rollout=types.SimpleNamespace(n_samples_per_prompt=G),
                                 train=types.SimpleNamespace(seed=RUN_SEED),
                                 copo=settings(**{"ada_budget": 32, **copo}))
    generator = SamplesGenerator(types.SimpleNamespace(args=args), None, None, None, [])

    def dispatch(prompts, labels, images=None, **kwargs):
        engines.calls.append(dict.fromkeys(prompts, kwargs["n_samples_per_prompt"]))
        return [engines.respond(p, label, kwargs["n_samples_per_prompt"]) for p, label in zip(prompts, labels)]

    generator._dispatch_prompts_to_vllm = dispatch
    monkeypatch.setattr(ray, "get", lambda refs: refs)
    return generator


def first_round(generator, engines: Engines, prompts, G: int) -> list:
    return [generator._process_response_into_experience(r, max_len=2048) for p in prompts
            for r in engines.respond(p, "1", G)]


def step(generator, engines: Engines, prompts, G: int, mode: str = "reinforce_ada") -> list:
    """One training rollout of ``mode``: the first round of G, then `resample`'s rounds; the G kept per prompt."""
    first = first_round(generator, engines, prompts, G)
    return resample(generator, first, {"n_samples_per_prompt": G, "max_len": 2048}, mode_info(mode))


#: Success rates from never to always, for prompts that resolve in each round, at the budget, or never.
RATES = [0.0, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.65, 0.8, 0.9, 0.95, 0.98, 1.0]


@pytest.mark.parametrize("G, exit", [(4, "balanced"), (6, "balanced"), (6, "positive_focused"), (8, "balanced")])
def test_resampling_keeps_the_groups_that_keeping_every_response_would(G, exit, monkeypatch):
    """A seeded step of 39 prompts through `resample`, rounds of 8 up to 32: the G kept per prompt are, draw for draw,
    those `ada_select` takes from every response drawn for it, with the whole pool's statistics and the step's cost."""
    prompts = [f"q{i}" for i in range(3 * len(RATES))]
    engines = Engines(dict(zip(prompts, RATES * 3)), seed=G)
    generator = generator_for(engines, G, monkeypatch, ada_exit=exit)
    kept = step(generator, engines, prompts, G)

    expected, drawn_at_most, all_tokens = [], 0, 0
    for p in prompts:
        draws = engines.drawn[p]
        correct = [reward > 0.7 for _, reward, _ in draws]
        assert ada_resolved(sum(correct), len(correct) - sum(correct), G, exit) or len(draws) == 32
        for i in ada_select(correct, G):
            expected.append((draws[i][0], draws[i][1], len(draws), sum(correct)))
        drawn_at_most, all_tokens = max(drawn_at_most, len(draws)), all_tokens + sum(n for *_, n in draws)
    got = [(int(e.sequences[0, 3]), e.rewards.item(), e.info[ADA_DRAWN].item(), e.info[ADA_DRAWN_CORRECT].item())
           for e in kept]
    assert got == expected
    assert {len(engines.drawn[p]) for p in prompts} >= {G, 32}  # some resolved at once, some drew the whole budget
    assert all(e.info[ADA_DRAWN_MAX].item() == drawn_at_most == 32 and e.info[ADA_TOKENS].item() == all_tokens
               for e in kept)
    assert kept[0].info[ADA_ROUNDS].item() == 1 + len(engines.calls) == 1 + -(-(32 - G) // 8)
    assert kept[0].info[ADA_TOKENS_FIRST_ROUND].item() == sum(n for p in prompts for *_, n in engines.drawn[p][:G])


def test_at_G_6_the_exit_is_checked_after_6_14_22_30_and_32_draws(monkeypatch):
    """docs/paper.md's round schedule at G = 6 (rounds of 8 up to 32: 6 + 8 + 8 + 8 + 2): a prompt whose balanced
    exit rule (3 correct and 3 incorrect) is met at draw k leaves with the pool of the first check at or after k; the
    official code's checks are after 8, 16, 24 and 32. Under positive_focused an all-correct first round of 6 leaves
    at once with its 6 correct kept and a pool rate of 1 (advantage 0), whatever draws 7 and 8 would have been."""
    G, checks = 6, (6, 14, 22, 30, 32)
    met_at = {f"k{k}": k for k in range(6, 33)}  # 3 correct, more correct, then the third incorrect at draw k
    scripted = {p: [1.0] * (k - 3) + [0.0] * (40 - k + 3) for p, k in met_at.items()}
    engines = Engines({}, scripted=scripted)
    step(generator_for(engines, G, monkeypatch), engines, list(met_at), G)
    left_with = {p: min(c for c in checks if c >= k) for p, k in met_at.items()}  # k6: 6, k7: 14, ..., k31: 32
    assert {p: len(engines.drawn[p]) for p in met_at} == left_with

    engines = Engines({}, scripted={"easy": [1.0] * 6 + [0.0, 0.0]})
    kept = step(generator_for(engines, G, monkeypatch, ada_exit="positive_focused"), engines, ["easy"], G)
    assert len(engines.drawn["easy"]) == 6 and [e.rewards.item() for e in kept] == [1.0] * 6
    assert kept[0].info[ADA_DRAWN].item() == kept[0].info[ADA_DRAWN_CORRECT].item() == 6


@pytest.mark.parametrize("mode, dispatches", [("reinforce_ada", 4), ("reinforce_ada_uniform", 1)])
def test_a_step_holds_at_most_G_responses_per_prompt_while_it_samples(monkeypatch, mode, dispatches):
    """Every Experience made during a step (the first round's and each later round's) is watched: when each round is
    dispatched, at most G per prompt are alive, not every response drawn so far (the whole budget per prompt kept
    until selection grows a step's memory with the budget: issue 68). Reinforce-Ada: rounds of 8 up to 32, 4 + 8 + 8 +
    8 + 4; its selection control: one round of 12 after the first 4."""
    G, prompts = 4, [f"q{i}" for i in range(len(RATES))]
    engines = Engines(dict(zip(prompts, RATES)), seed=1)
    generator = generator_for(engines, G, monkeypatch)
    made, watched = SamplesGenerator._process_response_into_experience, []  # weak references (Experience: unhashable)

    def process(response, **kwargs):
        experience = made(generator, response, **kwargs)
        watched.append(weakref.ref(experience))
        return experience

    def alive() -> int:  # freed by reference counting once nothing holds them (no gc.collect: over 1 s a call here)
        return sum(ref() is not None for ref in watched)

    generator._process_response_into_experience = process
    dispatch, at_dispatch = generator._dispatch_prompts_to_vllm, []

    def watched_dispatch(*args, **kwargs):
        at_dispatch.append(alive())
        return dispatch(*args, **kwargs)

    generator._dispatch_prompts_to_vllm = watched_dispatch
    kept = step(generator, engines, prompts, G, mode)
    drawn = sum(len(v) for v in engines.drawn.values())
    assert len(at_dispatch) == dispatches and drawn > 3 * G * len(prompts)
    assert max(at_dispatch) <= G * len(prompts), at_dispatch
    assert alive() == len(kept) == G * len(prompts)


def test_a_first_step_with_no_correct_response_stops_the_run_in_one_line(monkeypatch):
    """--copo.ada_threshold 5 with 0/1 rewards: nothing counts as correct, every prompt draws the whole budget and would
    train on its reward with no baseline. The first step stops the run, in one line naming the flag; a later step of
    the same generator goes on (a hard batch then, not a setting), and so does a first step where one response
    counted."""
    G, prompts = 4, ["easy", "coin"]
    engines = Engines({"easy": 1.0, "coin": 0.5}, seed=3)
    generator = generator_for(engines, G, monkeypatch, ada_threshold=5.0, ada_budget=12)
    with pytest.raises(CopoConfigError) as stopped:
        step(generator, engines, prompts, G)
    assert [len(engines.drawn[p]) for p in prompts] == [12, 12]
    message = str(stopped.value)
    assert message == ("reinforce_ada: no response of the first step had a reward above --copo.ada_threshold 5 "
                       "(greatest: 1): every prompt drew its whole --copo.ada_budget 12 and would train on its reward "
                       "with no baseline; set the threshold within the reward's range (REWARD_RANGE in the reward file "
                       "checks it at start)")
    assert failure_line(stopped.value, None) == f"training stopped: CopoConfigError: {message}"  # whole, in one line
    assert len(step(generator, engines, prompts, G)) == 2 * G

    engines = Engines({"easy": 1.0, "coin": 0.5}, seed=3)
    generator = generator_for(engines, G, monkeypatch, ada_threshold=0.7, ada_budget=12)
    assert len(step(generator, engines, prompts, G)) == 2 * G

    # the selection control draws its 4G whatever they are: the same stop, without a budget to blame
    engines = Engines({"easy": 1.0, "coin": 0.5}, seed=3)
    generator = generator_for(engines, G, monkeypatch, ada_threshold=5.0)
    with pytest.raises(CopoConfigError) as stopped:
        step(generator, engines, prompts, G, "reinforce_ada_uniform")
    assert [len(engines.drawn[p]) for p in prompts] == [16, 16]
    assert str(stopped.value) == (
        "reinforce_ada_uniform: no response of the first step had a reward above --copo.ada_threshold 5 (greatest: 1): "
        "every prompt would train on its reward with no baseline; set the threshold within the reward's range "
        "(REWARD_RANGE in the reward file checks it at start)")


def keep_of(prompt: str, draw: int, pool_size: int, G: int) -> list:
    """The draws a pool of ``prompt`` keeps under the selection control, read from the documented seed: sha256 of
    "keep:<run seed>:<draw index>:" and the first 8 bytes of the prompt's sha256, its first 8 bytes little-endian."""
    digest = hashlib.sha256(f"keep:{RUN_SEED}:{draw}:".encode() + hashlib.sha256(prompt.encode()).digest()[:8])
    return ada_random_keep(pool_size, G, int.from_bytes(digest.digest()[:8], "little"))


def test_the_selection_control_draws_4g_in_one_round_and_keeps_its_seeded_random_g(monkeypatch):
    """Reinforce-Ada's selection control (`reinforce_ada_uniform`) through `resample`: 13 prompts from never to always
    solved, G = 4. Each draws 16 (4G: the normal rollout's 4, then ONE round of 12 for every prompt, resolved or not),
    keeps the 4 at the draw indices its seed picks (`keep_of`: the run's seed and the prompt's draw index, 0 at its
    first visit and 16 at its second), in draw order, with the statistics of its whole pool of 16. A second run of the
    same seed keeps the same draws; the balanced keep would have kept others in some pools."""
    G, prompts = 4, [f"q{i}" for i in range(len(RATES))]
    engines = Engines(dict(zip(prompts, RATES)), seed=5)
    generator = generator_for(engines, G, monkeypatch)
    kept = step(generator, engines, prompts, G, "reinforce_ada_uniform")
    assert engines.calls == [dict.fromkeys(prompts, 12)] and {len(engines.drawn[p]) for p in prompts} == {16}

    expected, balanced_differs = [], 0
    for p in prompts:
        draws = engines.drawn[p]
        for i in keep_of(p, 0, 16, G):
            expected.append((draws[i][0], draws[i][1], 16, sum(r > 0.7 for _, r, _ in draws)))
        correct = [r > 0.7 for _, r, _ in draws]
        balanced_differs += sorted(keep_of(p, 0, 16, G)) != ada_select(correct, G)
    got = [(int(e.sequences[0, 3]), e.rewards.item(), e.info[ADA_DRAWN].item(), e.info[ADA_DRAWN_CORRECT].item())
           for e in kept]
    assert got == expected
    assert balanced_differs > 0
    assert all(e.info[ADA_ROUNDS].item() == 2 and e.info[ADA_DRAWN_MAX].item() == 16 for e in kept)
    assert kept[0].info[ADA_TOKENS].item() == sum(n for p in prompts for *_, n in engines.drawn[p])
    assert kept[0].info[ADA_TOKENS_FIRST_ROUND].item() == sum(n for p in prompts for *_, n in engines.drawn[p][:G])
    assert [e.info[ADA_RESOLVED].item() for e in kept[::G]] == [  # whether Reinforce-Ada's balanced exit was met
        float(ada_resolved(sum(r > 0.7 for _, r, _ in engines.drawn[p]), 16 - sum(r > 0.7 for _, r, _ in
                                                                              engines.drawn[p]), G)) for p in prompts]

    # the same seed and draws: the same keep; the prompts' second visit: their draws 16 to 31, another keep
    again = Engines(dict(zip(prompts, RATES)), seed=5)
    assert [int(e.sequences[0, 3]) for e in step(generator_for(again, G, monkeypatch), again, prompts, G,
                                                  "reinforce_ada_uniform")] == [g[0] for g in got]
    second = step(generator, engines, prompts, G, "reinforce_ada_uniform")
    assert [int(e.sequences[0, 3]) for e in second] == [
        engines.drawn[p][16 + i][0] for p in prompts for i in keep_of(p, 16, 16, G)]

    # --copo.ada_draw_factor 2: 8 drawn, one round of 4
    engines = Engines(dict(zip(prompts, RATES)), seed=5)
    kept = step(generator_for(engines, G, monkeypatch, ada_draw_factor=2), engines, prompts, G,
                "reinforce_ada_uniform")
    assert engines.calls == [dict.fromkeys(prompts, 4)] and kept[0].info[ADA_DRAWN].item() == 8
    assert [int(e.sequences[0, 3]) for e in kept] == [engines.drawn[p][i][0] for p in prompts
                                                      for i in keep_of(p, 0, 8, G)]


def test_the_keeps_draw_index_is_the_runs_count_before_the_step():
    """Under --copo.seeded_rollouts the run's `DrawCounter` has counted the first round already: prompt a, drawn 16
    times at an earlier visit, has 16 + 4; b, twice in this batch, 4 + 4. So the pools start at draws 16, 0 and 4
    (b's second group after its first's 4). Without seeded rollouts the generator counts each pool's 16 itself."""
    from openrlhf_copo.openrlhf_ext.runtime_patches.rollout import DrawCounter, prompt_key

    seeded = types.SimpleNamespace(_copo_draw_counter=DrawCounter({prompt_key("a"): 20, prompt_key("b"): 8}))
    assert first_draw_indices(seeded, ["a", "b", "b"], 4, 16) == [16, 0, 4]
    own = types.SimpleNamespace()
    assert first_draw_indices(own, ["a", "b", "b"], 4, 16) == [0, 0, 4]
    assert first_draw_indices(own, ["b", "a"], 4, 16) == [32, 16]
