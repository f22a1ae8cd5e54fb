"""Patches 5, 6 and 8 and the end-of-training evaluation (`openrlhf_ext/runtime_patches/evaluation.py`): mean@k, maj@k and
greedy accuracy from OpenRLHF's eval samples, and the last step's evaluation when the prompts run out."""

import functools

import pytest

from openrlhf_copo.openrlhf_ext.runtime_patches import eval_state, evaluation
from openrlhf_copo.openrlhf_ext.runtime_patches.evaluation import eval_greedy_logs, eval_majority_logs
from tests_support import make_rollout

# --- Patch 5: mean@k, maj@k and greedy accuracy in the evaluation's logs ---


def test_in_training_eval_reports_mean_and_majority():
    """OpenRLHF's eval samples (k consecutive per prompt, info from the reward function) -> mean@k / maj@k per source."""
    samples = make_rollout([[1, 0, 1, 0], [0, 0, 0, 1]], [[7, 3, 7, 5], [2, 2, 4, 9]])
    for i, s in enumerate(samples):
        s.prompts = [f"p{i // 4}"]
    loader = [(["math500", "aime24"], ["p0", "p1"], ["7", "9"], [None, None])]
    logs = eval_majority_logs(loader, samples, 4)
    # p0: 2/4 correct, majority 7 (2 votes) correct; p1: 1/4 correct, majority 2 (2 votes) wrong
    # one prompt per source: no spread, so a standard error of 0
    assert logs == {"eval_math500_mean4": 0.5, "eval_math500_mean4_se": 0.0, "eval_math500_maj4": 1.0,
                    "eval_aime24_mean4": 0.25, "eval_aime24_mean4_se": 0.0, "eval_aime24_maj4": 0.0}


def test_greedy_evaluation_reports_accuracy_and_per_prompt_outcomes_in_file_order():
    """One greedy sample per prompt, arriving in engine order (not the file's): accuracy and its standard error per
    source, and the 0/1 outcome string in the held-out file's order, the unit of a paired before/after comparison."""
    samples = make_rollout([[1, 0, 1, 1, 0]], [[4, 1, 2, 3, 0]])
    for s, prompt in zip(samples, ["p2", "p0", "p4", "p1", "p3"]):  # as two engines returned them
        s.prompts = [prompt]
    loader = [(["a", "a", "b"], ["p0", "p1", "p2"], ["0", "1", "2"], [None] * 3),
              (["b", "b"], ["p3", "p4"], ["3", "4"], [None] * 2)]
    logs, outcomes = eval_greedy_logs(loader, samples)
    # source a: p0 wrong, p1 right; source b: p2 right, p3 wrong, p4 right
    assert outcomes == {"eval_a_greedy_outcomes": "01", "eval_b_greedy_outcomes": "101"}
    assert logs["eval_a_greedy"] == 0.5 and logs["eval_b_greedy"] == pytest.approx(2 / 3)
    # std of (0, 1) with ddof 1 is 0.7071, over sqrt(2); of (1, 0, 1): 0.5774 over sqrt(3)
    assert logs["eval_a_greedy_se"] == pytest.approx(0.5) and logs["eval_b_greedy_se"] == pytest.approx(1 / 3)


# --- The end-of-training evaluation (`--copo.eval_after_train`: patch 6 watches the draws, patch 4 logs the step) ---


@pytest.fixture
def state(monkeypatch):
    """A fresh `eval_state.STATE`, as a new training process starts with."""
    fresh = eval_state.EvalState()
    monkeypatch.setattr(eval_state, "STATE", fresh)
    return fresh


def fake_trainer(state, eval_steps=6, episodes=1):
    """A trainer as `PPOTrainer.fit` sees it, with `evaluate` recording the steps it was asked for, and the state
    patch 6 records at the start of its fit with --copo.eval_after_train."""
    from types import SimpleNamespace as NS

    trainer = NS(args=NS(eval=NS(steps=eval_steps, temperature=1.0, n_samples_per_prompt=2),
                         train=NS(num_episodes=episodes), copo=NS(eval_after_train=True)),
                 eval_dataloader=[0], generate_kwargs={}, evaluated=[])
    trainer.evaluate = lambda step, **kw: trainer.evaluated.append(step)
    state.trainer, state.watch_draws = trainer, True
    return trainer


def draws(*results):
    """`SamplesGenerator.generate_samples` as patch 6 wraps it, drawing ``results`` in turn: each (samples, pass
    rate, prompts consumed, exhausted)."""
    results = iter(results)
    return functools.partial(evaluation.watched_prompt_draw(lambda self, **kw: next(results)), None)


def test_a_dapo_run_that_runs_out_of_prompts_mid_batch_is_evaluated_at_its_last_step(state):
    """DAPO seed 1 of the benchmark: 71 of 72 prompts drawn by step 7, the last one cannot fill a batch, the
    next draw comes back empty and fit() stops; step 7 (not a multiple of --eval.steps 6) must be evaluated."""
    trainer = fake_trainer(state)
    draw = draws((["batch"], 0.5, 11, False), ([], None, 1, True))
    assert draw()[3] is False
    state.step, state.episode = 7, 0  # what save_logs_and_checkpoints records for the step
    assert draw() == ([], None, 1, True)
    assert trainer.evaluated == [7]


@pytest.mark.parametrize("logged, episodes, evaluated_before, expected", [
    ((6, 0), 1, None, []),    # OpenRLHF's own evaluation at a multiple of --eval.steps saw it
    ((7, 0), 1, 7, []),       # evaluated already (the draw that fed step 7 said the prompts were used up)
    ((7, 0), 2, None, []),    # an episode is left: the prompts are drawn again
    ((7, 1), 2, None, [7]),   # the last episode's end
    ((0, None), 1, None, []),  # no step was made: nothing to evaluate after training
])
def test_the_end_of_the_prompts_evaluates_the_last_step_once(state, logged, episodes, evaluated_before, expected):
    trainer = fake_trainer(state, episodes=episodes)
    state.step, state.episode = logged
    state.evaluated_step = evaluated_before
    draws(([], None, 0, True))()
    assert trainer.evaluated == expected


def test_a_draw_that_uses_up_the_prompts_with_a_batch_is_flagged_for_the_steps_logging(state):
    """A draw that hits the end of the prompts while still filling a batch returns that batch: fit() trains on
    it, logs the step (whose logging then evaluates it) and stops. Nothing is evaluated at the draw itself."""
    trainer = fake_trainer(state)
    draws((["partial batch"], 0.5, 2, True))()
    assert state.prompts_used_up is True and trainer.evaluated == []
    state.step, state.episode = 5, 0
    evaluation.evaluate_if_prompts_ran_out(trainer)
    assert trainer.evaluated == [5]


def test_unwatched_draws_pass_through_and_record_nothing(state):
    """Without --copo.eval_after_train (patch 6 then records watch_draws False), a draw that uses up the prompts
    is returned as it is and evaluates nothing, as OpenRLHF's own draw."""
    trainer = fake_trainer(state)
    state.watch_draws = False
    state.step, state.episode = 7, 0
    assert draws(([], None, 0, True))() == ([], None, 0, True)
    assert state.prompts_used_up is False and trainer.evaluated == []


def test_patch_5_takes_the_greedy_samples_and_time_of_its_own_evaluation_once(state):
    """Patch 8 leaves an evaluation's greedy samples and generation time for patch 5 of the same evaluation; once
    taken they are gone, so a later evaluation without --copo.eval_greedy cannot report them again."""
    state.greedy_samples, state.generate_seconds = ["g"], 0.0
    assert state.take_evaluation_extras() == (["g"], 0.0)
    assert state.take_evaluation_extras() == (None, None)


def test_patch_6_wraps_openrlhfs_prompt_draw_once_on_its_class(monkeypatch):
    """The draw is wrapped on `SamplesGenerator` itself when patch 6 is applied (no wrapper installing another on
    an instance at run time), and applying the patch again wraps nothing twice."""
    from openrlhf.trainer.ppo_trainer import BasePPOTrainer
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    for cls, name in ((BasePPOTrainer, "init_checkpoint_states"), (SamplesGenerator, "generate_samples")):
        monkeypatch.setattr(cls, name, getattr(cls, name))  # OpenRLHF's own again after the test
    own = SamplesGenerator.generate_samples
    evaluation.apply_eval_before_train()
    evaluation.apply_eval_before_train()
    assert SamplesGenerator.generate_samples.__wrapped__ is own
    assert BasePPOTrainer.init_checkpoint_states.__wrapped__.__qualname__ == "BasePPOTrainer.init_checkpoint_states"
