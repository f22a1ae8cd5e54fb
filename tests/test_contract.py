"""openrlhf_copo.contract: the answer-key rule and the sample adapter shared by training, in-training eval and evaluate."""

import torch

from openrlhf_copo.contract import ANSWER_ID, CORRECT, HAS_ANSWER, REWARD_LOGS, answer_key, sample_outcome


def test_answer_key_rule():
    assert answer_key("0.5", "num:1/2", "... Answer: 0.5") == "num:1/2"  # read by math-verify: by value
    assert answer_key("\\weird {x", None, "...") == "raw:\\weird{x"  # unreadable: by its text
    # no answer: the response itself, white space aside (decoders differ there)
    assert answer_key(None, None, "I am  not\nsure") == answer_key(None, None, "I am not sure") == "noanswer:Iamnotsure"
    assert answer_key(None, None, "a") != answer_key(None, None, "b")


def test_sample_outcome_from_reward_logs_and_experience_info():
    logs = {ANSWER_ID: torch.tensor([11, 22], dtype=torch.int64), CORRECT: torch.tensor([1.0, 0.0]),
            HAS_ANSWER: torch.tensor([1.0, 0.0])}
    assert sample_outcome(logs, 0) == (11, True)
    assert sample_outcome(logs, 1) == (None, False)  # no answer: no vote in maj@k
    # an experience's info after OpenRLHF's collate: a list of 0-d tensors; or one [1] tensor
    info = {ANSWER_ID: [torch.tensor(2**62 + 1)], CORRECT: [torch.tensor(1.0)]}
    assert sample_outcome(info) == (2**62 + 1, True)  # int64 ids stay exact
    assert sample_outcome({ANSWER_ID: torch.tensor([5])}, reward=torch.tensor([0.0])) == (5, False)
    assert REWARD_LOGS[0] == ANSWER_ID


def test_every_metric_is_declared_once_and_named_in_the_docs():
    import re
    from pathlib import Path

    from openrlhf_copo.contract import ENGINE_LOGPROB_ABSDIFF, METRICS

    assert len(set(METRICS)) == len(METRICS) and all(m.startswith("copo_") for m in METRICS)
    page = (Path(__file__).resolve().parents[1] / "docs" / "openrlhf.md").read_text()
    section = page.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`(copo_[a-z_0-9<>]+)`", section))
    assert {m.replace("{}", "<i>") for m in METRICS} == named, named ^ {m.replace("{}", "<i>") for m in METRICS}
    assert ENGINE_LOGPROB_ABSDIFF.format(3) == "copo_rollout_logprob_absdiff_engine3"
