"""A fast proxy of the learning-curve benchmark: a simulated policy trained with the project's own estimators.

    .venv/bin/python benchmarks/sim_policy.py                       # the real benchmark's setting, 200 seeds
    .venv/bin/python benchmarks/sim_policy.py --sweep               # the screening grid (issue 31), ~1-2 min

Why: a real run of `learning_curve.py` takes 12-17 minutes on 2 cores, so each hypothesis of why COPO loses there
gets five seeds at best. This proxy runs a seed in milliseconds. It is a screen, not evidence: it counts only where
it first reproduces the real benchmark's direction at the real setting (COPO below GRPO at 6 prompts x G 4, 12
steps), and every conclusion drawn from it must be confirmed by real runs.

The simulated task (fixed before any result was looked at; see docs/benchmarks.md for what it leaves out):
- a prompt q is a feature vector x_q (d dims, standard normal); its correct answer is argmax_k (W* x_q)_k among K
  answers, for a hidden W*;
- the policy (shared parameters, so learning on one prompt moves the others, held-out ones included) first picks
  a *mode*: answer, or one of M rambles (logits [a . x_q + a0, c_1 .. c_M]); a ramble is cut at the length limit
  with no final answer (reward 0, an answer key of its own, as `rewards/answers.py` gives every unanswered response);
  an answer is k ~ softmax(W x_q), reward 1 if k is the correct answer. Answers are `ANSWER_TOKENS` long, rambles
  `RAMBLE_TOKENS` (the 135M model's arithmetic answers and its truncated responses);
- the start: W = beta W* + noise and a0 such that about 30% of sampled responses ramble and greedy held-out
  accuracy is about 0.5 (the real benchmark's step 0: 0.506 greedy, 0.26-0.32 truncated);
- training: per step, `prompts` new prompts x G samples; advantages from `openrlhf_copo.core.copo_advantages`
  (any registered mode; GRPO is mode ``grpo``); the loss is -sum_i A_i log pi(y_i), where a response's log-prob is
  its tokens' sum, so under token-mean aggregation (OpenRLHF's default) response i weighs A_i / (tokens in the
  step) per token, i.e. A_i x len_i / sum(len) as a whole (a ramble's every token pushed); under sequence-mean
  (seq-mean-token-mean), A_i / n. One Adam step per rollout batch with the gradient clipped to norm 1 (on-policy:
  PPO's ratio is 1 and its clip inactive), as in the real runs (train batch = rollout batch);
- evaluation: greedy (argmax mode, argmax answer) on `test_prompts` held-out prompts, exact expectation, no noise.

Each method of a seed sees the same prompts, the same start and the same first batch (paired, as the real
benchmark). Output: per setting, the final held-out greedy accuracy per method (mean +- SE over seeds) and COPO
minus each method, paired by seed, with a 95% interval.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Dict, List

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from openrlhf_copo.core import copo_advantages  # noqa: E402

ANSWER_TOKENS = 12
RAMBLE_TOKENS = 64


@dataclass(frozen=True)
class Setting:
    """One simulated benchmark setting; the defaults are the real benchmark's (learning_curve.py)."""

    prompts: int = 6  # prompts per step
    G: int = 4  # samples per prompt
    steps: int = 12
    lr: float = 0.1  # Adam's; the proxy's own scale: GRPO's best of 0.03, 0.1, 0.3 at the real setting
    aggregation: str = "token"  # "token" (token-mean, OpenRLHF's default) or "sequence" (seq-mean-token-mean)
    gamma: float = 20.0
    rho: float = 1.5
    d: int = 16  # feature dims
    K: int = 10  # answers
    M: int = 1  # ramble modes
    ramble_spread: float = 1.5  # std over prompts of the answer-vs-ramble logit at the start
    beta: float = 1.5  # how much of W* the start knows
    answer_logodds: float = 0.85  # log-odds of answering over rambling at the start: 30% of samples ramble
    test_prompts: int = 480


class SimPolicy(torch.nn.Module):
    def __init__(self, s: Setting, truth: torch.Tensor, gen: torch.Generator):
        super().__init__()
        self.W = torch.nn.Parameter(s.beta * truth + torch.randn(s.K, s.d, generator=gen) * 0.5)
        self.a = torch.nn.Parameter(torch.randn(s.d, generator=gen) * s.ramble_spread / math.sqrt(s.d))
        self.a0 = torch.nn.Parameter(torch.tensor(s.answer_logodds + math.log(s.M)))  # vs M rambles at logit 0
        self.c = torch.nn.Parameter(torch.zeros(s.M))

    def log_probs(self, x: torch.Tensor):
        """log pi(mode | x) [P, 1 + M] (mode 0 = answer) and log pi(answer | x, answering) [P, K]."""
        mode_logits = torch.cat([(x @ self.a + self.a0).unsqueeze(1), self.c.expand(x.shape[0], -1)], dim=1)
        return mode_logits.log_softmax(-1), (x @ self.W.T).log_softmax(-1)

    @torch.no_grad()
    def greedy_accuracy(self, x: torch.Tensor, correct: torch.Tensor) -> float:
        mode, answer = self.log_probs(x)
        return float(((mode.argmax(1) == 0) & (answer.argmax(1) == correct)).float().mean())


def run(s: Setting, method: str, seed: int) -> Dict[str, float]:
    """One simulated run; the task, the start, the prompts and the first batch depend on ``seed`` only."""
    gen = torch.Generator().manual_seed(seed)
    truth = torch.randn(s.K, s.d, generator=gen)
    x_test = torch.randn(s.test_prompts, s.d, generator=gen)
    x_train = torch.randn(s.steps * s.prompts, s.d, generator=gen)
    policy = SimPolicy(s, truth, gen)
    c_test, c_train = (x_test @ truth.T).argmax(1), (x_train @ truth.T).argmax(1)
    opt = torch.optim.Adam(policy.parameters(), lr=s.lr)
    before = policy.greedy_accuracy(x_test, c_test)
    sample_gen = torch.Generator().manual_seed(10_000 + seed)  # the draws: the same for every method of a seed
    ramble_share, step_rewards = [], []
    for step in range(s.steps):
        x = x_train[step * s.prompts:(step + 1) * s.prompts]
        target = c_train[step * s.prompts:(step + 1) * s.prompts]
        mode_lp, ans_lp = policy.log_probs(x)
        with torch.no_grad():
            u = torch.rand(s.prompts, s.G, 2, generator=sample_gen)  # inverse-CDF draws: one uniform per choice
            mode = torch.searchsorted(mode_lp.exp().cumsum(1), u[..., 0].contiguous()).clamp_max(s.M)
            answer = torch.searchsorted(ans_lp.exp().cumsum(1), u[..., 1].contiguous()).clamp_max(s.K - 1)
        answered = mode == 0
        rewards = (answered & (answer == target.unsqueeze(1))).float()
        # answer keys: the answer, or a key of its own for every ramble (no final answer)
        ids = torch.where(answered, answer, s.K + torch.arange(s.prompts * s.G).reshape(s.prompts, s.G))
        adv = copo_advantages(rewards, ids, mode=method, gamma=s.gamma, rho=s.rho)
        a = adv.weighted_local + adv.weighted_global  # at ratio 1 the two clipped terms add linearly
        weight = response_weights(torch.where(answered, float(ANSWER_TOKENS), float(RAMBLE_TOKENS)), s.aggregation)
        lp = mode_lp.gather(1, mode) + torch.where(answered, ans_lp.gather(1, answer), torch.zeros_like(weight))
        loss = -(a * weight * lp).sum()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        opt.step()
        ramble_share.append(float((~answered).float().mean()))
        step_rewards.append(rewards)
    return {"before": before, "after": policy.greedy_accuracy(x_test, c_test),
            "ramble_share": sum(ramble_share) / len(ramble_share), "rewards": step_rewards}


def response_weights(lengths: torch.Tensor, aggregation: str) -> torch.Tensor:
    """Each response's weight in the loss, as a whole: under token-mean every token of the step weighs
    1 / (tokens in the step), so a response weighs its length over the step's; under sequence-mean 1 / n."""
    if aggregation == "token":
        return lengths / lengths.sum()
    if aggregation == "sequence":
        return torch.full_like(lengths, 1 / lengths.numel())
    raise ValueError(f"aggregation must be 'token' or 'sequence', got {aggregation!r}")


T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def mean_ci(values: List[float]):
    n = len(values)
    m = sum(values) / n
    se = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1) / n) if n > 1 else float("nan")
    half = T975.get(n - 1, 1.96) * se
    return m, se, (m - half, m + half)


def compare(s: Setting, methods: List[str], seeds: int, reference: str = "copo") -> dict:
    finals = {m: [run(s, m, seed)["after"] for seed in range(seeds)] for m in methods}
    before = [run(s, reference, seed)["before"] for seed in range(seeds)]
    out = {"setting": asdict(s), "seeds": seeds, "before": mean_ci(before)[:2],
           "final": {m: mean_ci(v)[:2] for m, v in finals.items()}, "versus": {}}
    for m in methods:
        if m != reference and reference in finals:
            diff = [a - b for a, b in zip(finals[reference], finals[m])]
            mean, se, ci = mean_ci(diff)
            out["versus"][m] = {"mean": mean, "se": se, "ci95": ci}
    return out


def line(result: dict) -> str:
    s = result["setting"]
    finals = "  ".join(f"{m} {v[0]:.3f}" for m, v in result["final"].items())
    versus = "  ".join(f"copo-{m} {v['mean']:+.3f} [{v['ci95'][0]:+.3f}, {v['ci95'][1]:+.3f}]"
                       for m, v in result["versus"].items())
    return (f"B {s['prompts']:>3} G {s['G']:>2} steps {s['steps']:>3} lr {s['lr']:<6g} agg {s['aggregation']:<8} "
            f"gamma {s['gamma']:g} rho {s['rho']:g} | before {result['before'][0]:.3f} | {finals} | {versus}")


#: The screening grid: one factor changed at a time from the real setting (issue 31's hypotheses 1, 3, 4, 5).
SWEEP = {
    "real setting": {},
    "G 6": {"G": 6},
    "G 8": {"G": 8},
    "released gamma 5, rho 1": {"gamma": 5.0, "rho": 1.0},
    "24 prompts x G 4 (same samples: 3 steps)": {"prompts": 24, "steps": 3},
    "24 prompts x G 4, 12 steps": {"prompts": 24},
    "sequence-mean": {"aggregation": "sequence"},
    "lr / 3": {"lr": 0.1 / 3},
    "lr / 10, 10x steps": {"lr": 0.01, "steps": 120},
    "8 ramble modes": {"M": 8},
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--methods", nargs="+", default=["copo", "grpo", "go_only", "go_selective", "copo_selective"])
    p.add_argument("--seeds", type=int, default=200)
    p.add_argument("--sweep", action="store_true", help="the screening grid (SWEEP) instead of one setting")
    for f, v in asdict(Setting()).items():
        p.add_argument(f"--{f}", type=type(v), default=v)
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    base = Setting(**{f: getattr(args, f) for f in asdict(Setting())})
    settings = {name: replace(base, **change) for name, change in SWEEP.items()} if args.sweep else {"": base}
    results = {}
    for name, s in settings.items():
        results[name] = compare(s, args.methods, args.seeds)
        print(f"{name:<42} {line(results[name])}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
