"""Cost of COPO's advantage step against OpenRLHF's group_norm, measured side by side in one run.

    .venv/bin/python benchmarks/bench_advantages.py [--prompts 512] [--samples 6] [--repeats 50]

Prints the median time of each and their ratio. Both run on the same random 0/1 rewards; COPO
also computes the consistency entropy from answer ids and the batch-level global advantage.
"""

import argparse
import statistics
import time

import torch

from openrlhf_copo.core import copo_advantages


def group_norm(rewards):
    """OpenRLHF 0.11.2's group_norm, as in experience_maker.compute_advantages_and_returns."""
    return (rewards - rewards.mean(-1, keepdim=True)) / (rewards.std(-1, keepdim=True) + 1e-9)


def median_seconds(fn, repeats):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompts", type=int, default=512)
    p.add_argument("--samples", type=int, default=6)
    p.add_argument("--repeats", type=int, default=50)
    a = p.parse_args()
    g = torch.Generator().manual_seed(0)
    rewards = (torch.rand(a.prompts, a.samples, generator=g) < 0.4).float()
    ids = torch.randint(0, 4, (a.prompts, a.samples), generator=g)
    t_grpo = median_seconds(lambda: group_norm(rewards), a.repeats)
    t_copo = median_seconds(lambda: copo_advantages(rewards, ids), a.repeats)
    print(f"batch {a.prompts} prompts x {a.samples} responses, median of {a.repeats}")
    print(f"group_norm : {t_grpo * 1e3:8.3f} ms")
    print(f"copo       : {t_copo * 1e3:8.3f} ms")
    print(f"ratio copo / group_norm: {t_copo / t_grpo:.1f}x")


if __name__ == "__main__":
    main()
