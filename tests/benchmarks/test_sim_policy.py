"""benchmarks/sim_policy.py, the fast proxy: paired like the real benchmark, and weighs responses as documented."""

from __future__ import annotations

import pytest
import torch


def test_token_mean_weighs_a_response_by_its_length_sequence_mean_equally(sim):
    lengths = torch.tensor([[12.0, 64.0], [12.0, 12.0]])  # a 64-token ramble among three 12-token answers
    assert sim.response_weights(lengths, "token").flatten().tolist() == pytest.approx([0.12, 0.64, 0.12, 0.12])
    assert sim.response_weights(lengths, "sequence").flatten().tolist() == [0.25] * 4
    with pytest.raises(ValueError):
        sim.response_weights(lengths, "seq-mean")


def test_methods_of_a_seed_share_the_start_and_the_first_batch(sim):
    s = sim.Setting(steps=2, test_prompts=32)
    runs = {m: sim.run(s, m, seed=3) for m in ("copo", "grpo", "go_only")}
    assert len({r["before"] for r in runs.values()}) == 1
    first = [r["rewards"][0] for r in runs.values()]
    assert all(torch.equal(first[0], f) for f in first[1:])
    assert sim.run(s, "copo", seed=3)["after"] == runs["copo"]["after"]  # deterministic
    assert sim.run(s, "copo", seed=4)["before"] != runs["copo"]["before"]  # another task
