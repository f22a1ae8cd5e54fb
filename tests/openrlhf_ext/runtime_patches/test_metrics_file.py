"""Patch 4 (`openrlhf_ext/runtime_patches/metrics_file.py`): the rows of `--copo.metrics_file`, and the tokens each
step's training rollout generated (through the real pipeline: tests/e2e/test_compare_cpu.py)."""

import json
import math
import types

import pytest
import torch

from openrlhf_copo.contract import GENERATED_TOKENS, GENERATED_TOKENS_TOTAL
from openrlhf_copo.openrlhf_ext.runtime_patches.metrics_file import GeneratedTokens, append_metrics


def test_a_row_keeps_the_numbers_and_the_outcome_strings(tmp_path):
    """One JSON line per call: the step, the wall time, every numeric metric (one-element tensors read out,
    non-finite values as null, booleans and other objects left out) and an evaluation's strings as they are."""
    path = tmp_path / "deeper" / "metrics.jsonl"  # its folder is made
    append_metrics(str(path), 3, {"reward": torch.tensor(0.5), "eval": 1, "nan": math.nan, "flag": True,
                                  "vector": torch.zeros(2)})
    append_metrics(str(path), 3, {"eval": 1}, text={"eval_x_greedy_outcomes": "0110"})
    first, second = [json.loads(line) for line in path.read_text().splitlines()]
    assert first.pop("time") > 0 and first == {"step": 3, "reward": 0.5, "eval": 1.0, "nan": None}
    assert second.pop("time") > 0 and second == {"step": 3, "eval": 1.0, "eval_x_greedy_outcomes": "0110"}


# --- The generated tokens of each step (`GeneratedTokens`), on OpenRLHF's own SamplesGenerator and trainer ---


def vllm_response(prompt: str, response_tokens: int, reward: float = 0.0) -> dict:
    """A response as OpenRLHF's rollout executor returns it: 4 prompt tokens, then ``response_tokens``."""
    return {"observation_tokens": list(range(4 + response_tokens)), "action_ranges": [(4, 4 + response_tokens)],
            "reward": reward, "scores": reward, "rollout_log_probs": None, "prompt": prompt, "label": "1",
            "extra_logs": {}, "truncated": False}


@pytest.fixture
def counting(monkeypatch):
    """Patch 4's counting wrappers installed on OpenRLHF's classes, which are OpenRLHF's own again after the test."""
    from openrlhf.trainer.ppo_trainer import BasePPOTrainer
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    for cls, name in ((SamplesGenerator, "generate_samples"), (SamplesGenerator, "_process_response_into_experience"),
                      (BasePPOTrainer, "init_checkpoint_states")):
        monkeypatch.setattr(cls, name, getattr(cls, name))
    return SamplesGenerator, BasePPOTrainer


def test_a_step_counts_every_response_its_draw_made_dropped_or_kept_and_no_evaluation(counting, monkeypatch):
    """A training draw (`generate_samples`) of three groups of 2 responses, the second dropped as DAPO's filter drops
    an all-equal group: all six responses' tokens count, 3 + 5 + 7 + 7 + 2 + 4 = 28, each as long as OpenRLHF's
    `response_length` (the action span: 4 prompt tokens then the response's). Responses turned into experiences
    outside a training draw (the held-out evaluation's `generate_eval_samples`) count nothing. The step's logs take
    the count, add it to the run's total and put the total into the checkpoint's client states; a run resumed from
    that checkpoint (`init_checkpoint_states`) goes on from it."""
    SamplesGenerator, BasePPOTrainer = counting
    groups = [[("a", 3), ("a", 5)], [("b", 7), ("b", 7)], [("c", 2), ("c", 4)]]

    def draw(self, **kwargs):  # what OpenRLHF's _generate_vllm does with each response, the filter after it
        kept = []
        for k, group in enumerate(groups):
            experiences = [self._process_response_into_experience(vllm_response(p, n)) for p, n in group]
            kept += [] if k == 1 else experiences
        return kept, None, 3, False

    saved = {"episode": 0, "global_step": 2, "total_consumed_prompts": 6, GeneratedTokens.CLIENT_STATE: 56}
    monkeypatch.setattr(SamplesGenerator, "generate_samples", draw)  # OpenRLHF's own, as far as the wrapper knows
    monkeypatch.setattr(BasePPOTrainer, "init_checkpoint_states", lambda self: dict(saved))  # a checkpoint's
    GeneratedTokens.install()
    GeneratedTokens.install()  # once: a second install wraps nothing twice
    assert SamplesGenerator.generate_samples.__wrapped__ is draw

    generator = SamplesGenerator.__new__(SamplesGenerator)
    kept, *_ = generator.generate_samples()
    assert [int(e.response_length) for e in kept] == [3, 5, 2, 4]
    generator._process_response_into_experience(vllm_response("held-out", 11))  # an evaluation's response
    trainer, states = types.SimpleNamespace(samples_generator=generator), {}
    assert GeneratedTokens.step_logs(trainer, states) == {GENERATED_TOKENS: 28, GENERATED_TOKENS_TOTAL: 28}
    generator.generate_samples()
    assert GeneratedTokens.step_logs(trainer, states) == {GENERATED_TOKENS: 28, GENERATED_TOKENS_TOTAL: 56}
    assert states == {GeneratedTokens.CLIENT_STATE: 56}

    resumed = types.SimpleNamespace(samples_generator=SamplesGenerator.__new__(SamplesGenerator))
    assert BasePPOTrainer.init_checkpoint_states(resumed) == saved
    resumed.samples_generator.generate_samples()
    assert GeneratedTokens.step_logs(resumed, None) == {GENERATED_TOKENS: 28, GENERATED_TOKENS_TOTAL: 84}
