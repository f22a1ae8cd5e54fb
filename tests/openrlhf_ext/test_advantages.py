"""The patched RemoteExperienceMaker.compute_advantages_and_returns on real OpenRLHF Experience objects."""

import pytest
import torch

from openrlhf.utils.deepspeed import DeepspeedStrategy

from openrlhf_copo.contract import GROUP_SIZE
from openrlhf_copo.core import copo_advantages
from openrlhf_copo.openrlhf_ext.config import CopoConfigError
from tests_support import copo_argv, experience_maker, make_rollout

pytestmark = pytest.mark.usefixtures("copo_patched")


def maker_for(args):
    return experience_maker(DeepspeedStrategy(args=args), args.algo.kl.init_coef)  # the constructor only reads args


# 3 prompts x 4 responses: all correct (one answer), all wrong (two answers), mixed.
REWARDS = [[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 0]]
IDS = [[7, 7, 7, 7], [3, 3, 4, 4], [7, 5, 7, 6]]


def made_experiences(args, micro_batch=3, rewards=REWARDS, ids=IDS):
    args.rollout.micro_batch_size = micro_batch
    maker = maker_for(args)
    samples = make_rollout(rewards, ids)
    experiences = maker.split_rollout_samples(samples)  # OpenRLHF's own indexing and micro-batching
    for exp in experiences:
        exp.action_log_probs = torch.zeros_like(exp.action_mask, dtype=torch.float32)
        exp.kl = torch.zeros_like(exp.action_log_probs)
    return maker, experiences


def token_value(exp):
    """The advantage each response carries on its action tokens."""
    mask = exp.action_mask.float()
    return (exp.advantages * mask).sum(1) / mask.sum(1)


def per_sample(experiences, fn):
    out = torch.empty(sum(len(e.index) for e in experiences))
    for exp in experiences:
        out[torch.tensor(exp.index)] = fn(exp).float()
    return out.reshape(-1, len(REWARDS[0]))


def test_copo_advantages_reach_each_response(load_args):
    args = load_args(copo_argv())
    maker, experiences = made_experiences(args)
    experiences = maker.compute_advantages_and_returns(experiences)
    expected = copo_advantages(torch.tensor(REWARDS, dtype=torch.float32), torch.tensor(IDS))  # paper defaults
    for exp in experiences:  # the local term on every action token, nothing elsewhere
        torch.testing.assert_close(exp.advantages, token_value(exp).unsqueeze(1) * exp.action_mask)
        assert exp.kl is None and "copo_answer_id" not in exp.info
    local = per_sample(experiences, token_value)
    glob = per_sample(experiences, lambda e: e.info["copo_weighted_global_adv"])
    torch.testing.assert_close(local, expected.weighted_local)
    torch.testing.assert_close(glob, expected.weighted_global)
    # all-correct and all-incorrect groups keep a signal through the global term
    assert (glob[0] > 0).all() and (glob[1] < 0).all()
    assert per_sample(experiences, lambda e: e.info["copo_signal_grpo"]).mean().item() == pytest.approx(4 / 12)
    assert per_sample(experiences, lambda e: e.info["copo_signal_copo"]).mean().item() == pytest.approx(1.0)
    assert per_sample(experiences, lambda e: e.info["copo_all_incorrect"]).mean().item() == pytest.approx(1 / 3)


def test_mixed_groups_that_lost_their_local_term_responses_pushed_the_wrong_way_and_the_token_surprisal(load_args):
    """G = 4 at gamma 20, rho 1.5. Prompt means R = .75, .5, .5, 0, .25 (batch mean .4, so A_global is positive for
    the first three prompts, negative for the last two). A 3-right / 1-wrong group with two answers (3+1, H 0.811
    bits, w_local 1e-6), a 2+2 one (H 1, w_local 4.5e-5) and a 1-right / 3-same-wrong one (3+1) lose their local
    term; a 2+1+1 mixed group (H 1.5, w_local 0.5) keeps it; the all-wrong group is not mixed.
    Pushed the wrong way (never under GRPO): the lone wrong answer of group 0 and the two of group 1 get about
    +A_global > 0; the lone right answer of group 4 gets about A_global < 0. Group 2's wrong answers get
    0.5 (-1) + 0.5 A_global < 0, as GRPO would."""
    rewards = [[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0], [1, 0, 0, 0]]
    ids = [[7, 7, 7, 5], [7, 7, 5, 5], [7, 5, 7, 6], [3, 3, 4, 4], [7, 5, 5, 5]]
    maker, experiences = made_experiences(load_args(copo_argv()), micro_batch=5, rewards=rewards, ids=ids)
    for exp in experiences:  # log-prob -0.5 (i + 1) on every action token of response i, -9 where masked out
        per_response = -0.5 * (1 + torch.tensor(exp.index, dtype=torch.float32)).unsqueeze(1)
        exp.action_log_probs = torch.where(exp.action_mask.bool(), per_response, torch.tensor(-9.0))
    experiences = maker.compute_advantages_and_returns(experiences)
    lost = per_sample(experiences, lambda e: e.info["copo_mixed_local_lost"])
    assert lost[:, 0].tolist() == [1.0, 1.0, 0.0, 0.0, 1.0] and (lost == lost[:, :1]).all()
    reinforced = per_sample(experiences, lambda e: e.info["copo_incorrect_reinforced"])
    assert reinforced.tolist() == [[0, 0, 0, 1], [0, 0, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    penalized = per_sample(experiences, lambda e: e.info["copo_correct_penalized"])
    assert penalized.tolist() == [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]]
    surprisal = per_sample(experiences, lambda e: e.info["copo_token_surprisal"])
    assert surprisal.flatten().tolist() == pytest.approx([0.5 * (1 + i) for i in range(20)])


def test_grpo_never_pushes_a_response_the_wrong_way(load_args):
    maker, experiences = made_experiences(load_args(copo_argv("--copo.mode", "grpo")), rewards=[[1, 1, 1, 0],
                                          [1, 0, 0, 0], [0, 0, 0, 0]], ids=[[7, 7, 7, 5], [7, 5, 5, 5], [3, 3, 4, 4]])
    experiences = maker.compute_advantages_and_returns(experiences)
    for key in ("copo_incorrect_reinforced", "copo_correct_penalized"):
        assert per_sample(experiences, lambda e: e.info[key]).sum().item() == 0


# The paper's format reward for base models: 0 no answer, 0.1 formatted but wrong, 1 correct. The middle
# prompt has no correct answer but formatted ones, four different answers (H = 2 bits).
FORMAT_REWARDS = [[1, 1, 1, 1], [0, 0.1, 0.1, 0], [1, 0, 1, 0.1]]
FORMAT_IDS = [[7, 7, 7, 7], [1, 2, 3, 4], [7, 5, 7, 6]]


@pytest.mark.parametrize("incorrect, w_local", [
    ("answer", 0.0),  # paper: no correct answer = all incorrect -> zero control -> global only
    ("reward", 0.9999546021312976),  # released code: rewards of 0.1 are not 0 -> sigmoid(20 (2 - 1.5))
])
def test_what_incorrect_means_under_the_format_reward(load_args, incorrect, w_local):
    args = load_args(copo_argv("--copo.incorrect", incorrect))
    args.rollout.micro_batch_size = 3
    maker = maker_for(args)
    experiences = maker.split_rollout_samples(make_rollout(FORMAT_REWARDS, FORMAT_IDS))
    for exp in experiences:
        exp.action_log_probs = torch.zeros_like(exp.action_mask, dtype=torch.float32)
    experiences = maker.compute_advantages_and_returns(experiences)
    local = per_sample(experiences, token_value)
    w = per_sample(experiences, lambda e: e.info["copo_w_local"])
    # A_local of [0, 0.1, 0.1, 0]: mean 0.05, population std 0.05, eps 1e-6
    a = 0.05 / (0.05 + 1e-6)
    torch.testing.assert_close(w[1], torch.full((4,), w_local))
    torch.testing.assert_close(local[1], w_local * a * torch.tensor([-1.0, 1.0, 1.0, -1.0]))
    torch.testing.assert_close(per_sample(experiences, lambda e: e.info["copo_w_global"])[1],
                               torch.full((4,), 1 - w_local))
    assert per_sample(experiences, lambda e: e.info["copo_all_incorrect"])[1].tolist() == (
        [1.0] * 4 if incorrect == "answer" else [0.0] * 4)


def test_global_statistics_span_the_rollout_batch_whatever_the_micro_batch(load_args):
    """The split into micro-batches (and later shards) must not change any advantage."""
    results = []
    for micro in (1, 5, 12):
        maker, experiences = made_experiences(load_args(copo_argv()), micro_batch=micro)
        experiences = maker.compute_advantages_and_returns(experiences)
        results.append(per_sample(experiences, lambda e: e.info["copo_weighted_global_adv"]))
    torch.testing.assert_close(results[0], results[1])
    torch.testing.assert_close(results[0], results[2])


def test_settings_flow_from_flags(load_args):
    args = load_args(copo_argv("--copo.gamma", "5", "--copo.rho", "1", "--copo.zero_control", "response",
                               "--copo.std", "unbiased"))
    maker, experiences = made_experiences(args)
    experiences = maker.compute_advantages_and_returns(experiences)
    expected = copo_advantages(torch.tensor(REWARDS, dtype=torch.float32), torch.tensor(IDS), gamma=5, rho=1,
                               zero_control="response", std="unbiased")
    torch.testing.assert_close(per_sample(experiences, token_value), expected.weighted_local)


def test_group_norm_is_untouched_by_the_patch(load_args):
    args = load_args(copo_argv()[2:] + ["--advantage_estimator", "group_norm"])
    maker, experiences = made_experiences(args)
    experiences = maker.compute_advantages_and_returns(experiences)
    r = torch.tensor(REWARDS, dtype=torch.float32)
    expected = (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-9)  # OpenRLHF's group_norm
    torch.testing.assert_close(per_sample(experiences, token_value), expected)
    assert all("copo_weighted_global_adv" not in e.info for e in experiences)
    # the answer ids of our reward file are labels, not metrics: not logged under other estimators either
    assert all("copo_answer_id" not in e.info for e in experiences)


def test_string_buckets_read_the_released_answer_strings(load_args):
    """--copo.answer_buckets string: the entropy over copo_answer_string_id (the released code's strings), where
    the default reads copo_answer_id. Prompt 1's answers are one value (id 3) written two ways (strings 30, 31):
    H 0 by value, 1 bit by string."""
    strings = [[70, 70, 70, 70], [30, 30, 31, 31], [70, 50, 70, 60]]

    def entropies(*flags):
        maker, experiences = made_experiences(load_args(copo_argv(*flags)), ids=[[7] * 4, [3] * 4, [7, 5, 7, 6]])
        for exp in experiences:
            exp.info["copo_answer_string_id"] = torch.tensor([strings[j // 4][j % 4] for j in exp.index])
        experiences = maker.compute_advantages_and_returns(experiences)
        assert all("copo_answer_string_id" not in e.info for e in experiences)  # a label, not a metric
        return per_sample(experiences, lambda e: torch.stack(list(e.info["copo_entropy"]))
                          if isinstance(e.info["copo_entropy"], list) else e.info["copo_entropy"])[:, 0].tolist()

    assert entropies() == pytest.approx([0.0, 0.0, 1.5])
    assert entropies("--copo.answer_buckets", "string") == pytest.approx([0.0, 1.0, 1.5])


def test_string_buckets_without_string_ids_are_refused(load_args):
    maker, experiences = made_experiences(load_args(copo_argv("--copo.answer_buckets", "string")))
    with pytest.raises(CopoConfigError, match="copo_answer_string_id"):
        maker.compute_advantages_and_returns(experiences)


def test_missing_answer_id_is_refused(load_args):
    maker, experiences = made_experiences(load_args(copo_argv()))
    for exp in experiences:
        exp.info.pop("copo_answer_id")
    with pytest.raises(CopoConfigError, match="copo_answer_id"):
        maker.compute_advantages_and_returns(experiences)


def test_nan_reward_is_refused_not_trained_on(load_args):
    maker, experiences = made_experiences(load_args(copo_argv()))
    experiences[0].rewards[0] = float("nan")
    with pytest.raises(ValueError, match="non-finite reward"):
        maker.compute_advantages_and_returns(experiences)


@pytest.mark.parametrize("n_failed, stops", [(0, False), (6, False), (7, True), (12, True)])
def test_a_step_of_failed_answer_checks_stops_instead_of_training_on_zeros(load_args, n_failed, stops):
    """12 responses, --copo.max_verify_failed 0.5 (the default): more than 6 failed checks stop the run."""
    from openrlhf_copo.openrlhf_ext.advantages import RewardCheckError

    maker, experiences = made_experiences(load_args(copo_argv()))
    flat = [(exp, j) for exp in experiences for j in range(len(exp.index))]
    for exp in experiences:
        exp.info["copo_verify_failed"] = torch.zeros(len(exp.index))
    for exp, j in flat[:n_failed]:
        exp.info["copo_verify_failed"][j] = 1.0
    if stops:
        with pytest.raises(RewardCheckError, match=f"math-verify failed on {n_failed} of 12 responses"):
            maker.compute_advantages_and_returns(experiences)
    else:
        maker.compute_advantages_and_returns(experiences)
        assert all(e.advantages is not None for e in experiences)


def test_engines_feeding_the_batch_and_each_engines_logprob_gap(load_args):
    """Two vLLM engines (seeds --train.seed + 0 and + 1, as OpenRLHF builds them): the step reports both and
    the mean logprob gap of each engine's responses, so an engine that missed a weight sync stands out."""
    from openrlhf_copo.contract import ROLLOUT_ENGINE_SEED

    args = load_args(copo_argv("--train.seed", "7"))
    maker, experiences = made_experiences(args, micro_batch=1)
    for exp in experiences:  # prompts 0 and 2 sampled by engine 0, prompt 1 by engine 1 (stale: gap 0.5)
        prompt = int(exp.index[0]) // 4
        engine = 1 if prompt == 1 else 0
        exp.info[ROLLOUT_ENGINE_SEED] = torch.tensor([7 + engine])
        exp.rollout_log_probs = exp.action_log_probs + (0.5 if engine else 0.001) * exp.action_mask
    experiences = maker.compute_advantages_and_returns(experiences)
    info = experiences[0].info
    assert ROLLOUT_ENGINE_SEED not in info  # a tag, not a metric
    assert info["copo_num_engines"].tolist() == [2.0]
    assert info["copo_num_prompts"].tolist() == [3.0]
    assert info["copo_rollout_logprob_absdiff_engine0"].item() == pytest.approx(0.001, abs=1e-6)
    assert info["copo_rollout_logprob_absdiff_engine1"].item() == pytest.approx(0.5, abs=1e-6)
    # every metric the step writes is declared in the contract (docs/openrlhf.md names each: tests/test_contract.py)
    from openrlhf_copo.contract import ENGINE_LOGPROB_ABSDIFF, METRICS

    written = {k for k in info if k.startswith("copo_")}
    declared = set(METRICS) | {ENGINE_LOGPROB_ABSDIFF.format(e) for e in (0, 1)}
    assert written <= declared, written - declared
    # 16 per response (the token surprisal among them), 4 per batch, 2 engines, the weighted global term, and the
    # reward's copo_correct
    assert len(written) == 24, sorted(written)


def test_a_group_mixing_two_prompts_is_refused(load_args):
    """Each prompt's G responses form one group: a batch whose numbering puts another prompt's response into
    a group must stop, not blend two prompts' rewards into one group's statistics."""
    maker, experiences = made_experiences(load_args(copo_argv()), micro_batch=1)
    a, b = experiences[0], experiences[4]  # response 0 of prompt 0 and response 0 of prompt 1
    a.index, b.index = b.index, a.index
    with pytest.raises(RuntimeError, match="group 0 of the rollout batch holds responses to different prompts"):
        maker.compute_advantages_and_returns(experiences)


def test_incorrect_answer_without_copo_correct_is_refused_at_the_first_step(load_args):
    """Under the 0/0.1/1 format reward a fallback to rewards > 0 would call formatted-but-wrong answers correct,
    and zero control would never fire: the step stops with one line instead."""
    args = load_args(copo_argv())
    maker, experiences = made_experiences(args)
    for exp in experiences:
        exp.info.pop("copo_correct")
    with pytest.raises(CopoConfigError, match=r"--copo.incorrect answer needs extra_logs\['copo_correct'\]"):
        maker.compute_advantages_and_returns(experiences)
    args = load_args(copo_argv("--copo.incorrect", "reward"))  # the released code's rule needs no copo_correct
    maker, experiences = made_experiences(args)
    for exp in experiences:
        exp.info.pop("copo_correct")
    maker.compute_advantages_and_returns(experiences)


def test_unchecked_answers_and_untagged_engines_are_said_once(load_args, capsys, monkeypatch):
    """A reward function without the failure flag cannot be checked for failed answer checks, and responses without
    their engine tag give no per-engine metrics: each is said once per process (the advantage step runs every
    rollout step), not passed over in silence."""
    from openrlhf_copo.openrlhf_ext import advantages

    monkeypatch.setattr(advantages, "_warned", set())
    for step in range(3):
        maker, experiences = made_experiences(load_args(copo_argv()))
        for exp in experiences:
            exp.info.pop("copo_verify_failed", None)
        maker.compute_advantages_and_returns(experiences)
    err = capsys.readouterr().err
    assert err.count("returns no extra_logs['copo_verify_failed']") == 1, err
    assert "--copo.max_verify_failed is not enforced" in err
    assert err.count("responses without their engine tag (info['copo_rollout_engine_seed']") == 1, err


def test_under_probe_the_step_stops_with_the_batch_it_would_have_trained_on(load_args):
    """--copo.probe: OpenRLHF's make_experience_batch hands the rollout straight to the advantage step (this maker has
    no actor, reference or critic to run: a forward would fail), which measures the batch as it does at any step,
    then stops (ProbeFinished) with the record: each group in prompt order with its rewards, answer split and
    columns, and the batch means, which are the metrics the same step logs without the probe."""
    from openrlhf_copo.openrlhf_ext.probe_step import ProbeFinished, finished_record

    args = load_args(copo_argv("--copo.probe", "unused.json", "--train.seed", "5"))
    args.rollout.micro_batch_size = 5  # micro-batches that cut across groups
    with pytest.raises(ProbeFinished) as stopped:
        maker_for(args).make_experience_batch(make_rollout(REWARDS, IDS))
    record = finished_record(stopped.value)
    assert [g["prompt"] for g in record["groups"]] == ["prompt 0", "prompt 1", "prompt 2"]
    assert [g["split"] for g in record["groups"]] == [[4], [2, 2], [2, 1, 1]]
    assert [g["rewards"] for g in record["groups"]] == [[1.0] * 4, [0.0] * 4, [1.0, 0.0, 1.0, 0.0]]
    assert [(g["copo_all_correct"], g["copo_all_incorrect"], g["copo_zero_std"]) for g in record["groups"]] == \
        [(1.0, 0.0, 1.0), (0.0, 1.0, 1.0), (0.0, 0.0, 0.0)]
    assert record["groups"][1]["copo_entropy"] == pytest.approx(1.0)  # 2+2: one bit
    assert record["G"] == 4 and record["seed"] == 5 and record["settings"]["rho"] == 1.5
    # the batch means are what the step logs when it trains: every column's mean over the responses
    trained_args = load_args(copo_argv())
    maker, experiences = made_experiences(trained_args, micro_batch=5)
    experiences = maker.compute_advantages_and_returns(experiences)
    for key, value in record["metrics"].items():
        if key in experiences[0].info:
            logged = torch.cat([e.info[key].float() for e in experiences]).mean().item()
            assert value == pytest.approx(logged, abs=1e-6), key
    assert record["metrics"]["copo_zero_std"] == pytest.approx(2 / 3)


# ---------------------------------------------------------------------------------------------
# Groups of different sizes (issue 69; `knapsack` draws them): each response says its group's size
# (contract.GROUP_SIZE), and the groups' statistics are their own.

# groups of 2, 5 and 3 responses: mixed, mixed (3 answers), all correct (one answer); tests/test_core.py's by-hand case
RAGGED_REWARDS = [[1, 0], [1, 1, 0, 0, 0], [1, 1, 1]]
RAGGED_IDS = [[3, 4], [7, 7, 7, 2, 5], [9, 9, 9]]


def ragged_experiences(args, micro_batch=4, sizes=None):
    """The ragged batch as OpenRLHF's maker splits it (micro-batches of 4 cut across the groups), each response
    tagged with its group's size as the knapsack rollout tags it (``sizes``: the tags, one per group)."""
    args.rollout.micro_batch_size = micro_batch
    maker = maker_for(args)
    samples = make_rollout(RAGGED_REWARDS, RAGGED_IDS)
    tags = [s for s, row in zip(sizes or [len(r) for r in RAGGED_REWARDS], RAGGED_REWARDS) for _ in row]
    for sample, tag in zip(samples, tags):
        sample.info[GROUP_SIZE] = torch.tensor([float(tag)])
    experiences = maker.split_rollout_samples(samples)
    for exp in experiences:
        exp.action_log_probs = torch.zeros_like(exp.action_mask, dtype=torch.float32)
    return maker, experiences


def flat_column(experiences, fn):
    out = torch.empty(sum(len(e.index) for e in experiences))
    for exp in experiences:
        out[torch.tensor(exp.index)] = fn(exp).float()
    return out


@pytest.mark.parametrize("mode", ["copo", "grpo"])
def test_groups_of_different_sizes_train_with_their_own_statistics(load_args, mode):
    """GRPO's advantages of the 2-, 5- and 3-response groups by hand (tests/test_core.py, test_unequal_groups_by_hand:
    1, -1 | 1.224745 x 2, -0.816497 x 3 | 0 x 3); COPO's global term over the 3 prompts; each per-prompt column on
    each of its group's responses; the size tag dropped like an id."""
    maker, experiences = ragged_experiences(load_args(copo_argv("--copo.mode", mode)))
    experiences = maker.compute_advantages_and_returns(experiences)
    expected = copo_advantages(torch.tensor([1.0, 0, 1, 1, 0, 0, 0, 1, 1, 1]),
                               torch.tensor([3, 4, 7, 7, 7, 2, 5, 9, 9, 9]), group_sizes=[2, 5, 3], mode=mode)
    local = flat_column(experiences, token_value)
    torch.testing.assert_close(local, expected.weighted_local)
    torch.testing.assert_close(flat_column(experiences, lambda e: e.info["copo_weighted_global_adv"]),
                               expected.weighted_global)
    if mode == "grpo":
        torch.testing.assert_close(local, torch.tensor([1.0, -1, 1.224745, 1.224745, -0.816497, -0.816497,
                                                        -0.816497, 0, 0, 0]), atol=5e-6, rtol=0)
    else:
        torch.testing.assert_close(flat_column(experiences, lambda e: e.info["copo_global_adv_raw"]),
                                   torch.tensor([-0.507999] * 2 + [-0.888998] * 5 + [1.396996] * 3), atol=5e-6,
                                   rtol=0)
    assert flat_column(experiences, lambda e: e.info["copo_zero_std"]).tolist() == [0.0] * 7 + [1.0] * 3
    assert flat_column(experiences, lambda e: e.info["copo_all_correct"]).tolist() == [0.0] * 7 + [1.0] * 3
    torch.testing.assert_close(flat_column(experiences, lambda e: e.info["copo_entropy"]),
                               torch.tensor([1.0] * 2 + [1.370951] * 5 + [0.0] * 3), atol=1e-5, rtol=0)
    std = flat_column(experiences, lambda e: e.info["group_reward_std"])  # OpenRLHF's, unbiased: each group's own n
    torch.testing.assert_close(std, torch.tensor([0.707107] * 2 + [0.547723] * 5 + [0.0] * 3), atol=1e-5, rtol=0)
    info = experiences[0].info
    assert info["copo_num_prompts"].tolist() == [3.0] * len(experiences[0].index)
    # the std of A_global over the 3 prompts (computed, and weighted 0, under grpo): 1 up to eps
    assert info["copo_global_adv_std"][0].item() == pytest.approx(0.999996, abs=1e-5)
    assert all(GROUP_SIZE not in e.info for e in experiences)


def test_a_size_tag_that_its_group_does_not_continue_is_refused(load_args):
    """Prompt 1's 5 responses say 4: responses 2-5 read as a group of 4, and response 6 (prompt 1's last) as the start
    of another group of 4 that prompt 2's responses, tagged 3, do not continue: the batch's groups cannot be read."""
    maker, experiences = ragged_experiences(load_args(copo_argv()), sizes=[2, 4, 3])
    with pytest.raises(RuntimeError, match=r"response 6 starts a group of 4 \(info\['copo_group_size'\]\)"):
        maker.compute_advantages_and_returns(experiences)


def test_a_group_of_different_size_mixing_two_prompts_is_refused(load_args):
    maker, experiences = ragged_experiences(load_args(copo_argv()), micro_batch=1)
    a, b = experiences[1], experiences[2]  # the second response of prompt 0 and the first of prompt 1
    a.index, b.index = b.index, a.index
    a.info[GROUP_SIZE], b.info[GROUP_SIZE] = b.info[GROUP_SIZE], a.info[GROUP_SIZE]
    with pytest.raises(RuntimeError, match="group 0 of the rollout batch holds responses to different prompts"):
        maker.compute_advantages_and_returns(experiences)


def test_under_probe_groups_of_different_sizes_are_recorded_with_their_own_responses(load_args):
    from openrlhf_copo.openrlhf_ext.probe_step import ProbeFinished, finished_record

    maker, experiences = ragged_experiences(load_args(copo_argv("--copo.probe", "unused.json")))
    with pytest.raises(ProbeFinished) as stopped:
        maker.compute_advantages_and_returns(experiences)
    record = finished_record(stopped.value)
    assert [g["rewards"] for g in record["groups"]] == [[1.0, 0.0], [1.0, 1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]
    assert [g["split"] for g in record["groups"]] == [[1, 1], [3, 1, 1], [3]]
    assert [g["copo_zero_std"] for g in record["groups"]] == [0.0, 0.0, 1.0]
