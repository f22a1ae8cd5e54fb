"""Patch 4 (`openrlhf_ext/runtime_patches/metrics_file.py`): the rows of `--copo.metrics_file`."""

import json
import math

import torch

from openrlhf_copo.openrlhf_ext.runtime_patches.metrics_file import append_metrics


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
