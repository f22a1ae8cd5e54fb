"""Patches 5, 6 and 8 and the end-of-training evaluation (`openrlhf_ext/runtime_patches/evaluation.py`): mean@k, maj@k and
greedy accuracy from OpenRLHF's eval samples, and the last step's evaluation when the prompts run out."""

import pytest

from openrlhf_copo.openrlhf_ext.runtime_patches import evaluation
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


def fake_trainer(draws, eval_steps=6, episodes=1):
    """A trainer as `PPOTrainer.fit` sees it: a samples generator whose draws return (samples, pass rate,
    prompts consumed, exhausted), and `evaluate` recording the steps it was asked for."""
    from types import SimpleNamespace as NS

    draws = iter(draws)
    trainer = NS(args=NS(eval=NS(steps=eval_steps, temperature=1.0, n_samples_per_prompt=2),
                         train=NS(num_episodes=episodes), copo=NS(eval_after_train=True)),
                 samples_generator=NS(generate_samples=lambda **kw: next(draws)), eval_dataloader=[0],
                 generate_kwargs={}, evaluated=[])
    trainer.evaluate = lambda step, **kw: trainer.evaluated.append(step)
    evaluation.watch_prompt_draws(trainer)
    return trainer


def test_a_dapo_run_that_runs_out_of_prompts_mid_batch_is_evaluated_at_its_last_step():
    """DAPO seed 1 of the benchmark: 71 of 72 prompts drawn by step 7, the last one cannot fill a batch, the
    next draw comes back empty and fit() stops; step 7 (not a multiple of --eval.steps 6) must be evaluated."""
    trainer = fake_trainer([(["batch"], 0.5, 11, False), ([], None, 1, True)])
    assert trainer.samples_generator.generate_samples()[3] is False
    trainer._copo_logged = (7, 0)  # what save_logs_and_checkpoints records for the step
    assert trainer.samples_generator.generate_samples() == ([], None, 1, True)
    assert trainer.evaluated == [7]


@pytest.mark.parametrize("logged, episodes, evaluated_before, expected", [
    ((6, 0), 1, None, []),    # OpenRLHF's own evaluation at a multiple of --eval.steps saw it
    ((7, 0), 1, 7, []),       # evaluated already (the draw that fed step 7 said the prompts were used up)
    ((7, 0), 2, None, []),    # an episode is left: the prompts are drawn again
    ((7, 1), 2, None, [7]),   # the last episode's end
    ((0, None), 1, None, []),  # no step was made: nothing to evaluate after training
])
def test_the_end_of_the_prompts_evaluates_the_last_step_once(logged, episodes, evaluated_before, expected):
    trainer = fake_trainer([([], None, 0, True)], episodes=episodes)
    trainer._copo_logged = logged
    if evaluated_before is not None:
        trainer._copo_evaluated_step = evaluated_before
    trainer.samples_generator.generate_samples()
    assert trainer.evaluated == expected


def test_a_draw_that_uses_up_the_prompts_with_a_batch_is_flagged_for_the_steps_logging():
    """A draw that hits the end of the prompts while still filling a batch returns that batch: fit() trains on
    it, logs the step (whose logging then evaluates it) and stops. Nothing is evaluated at the draw itself."""
    trainer = fake_trainer([(["partial batch"], 0.5, 2, True)])
    trainer.samples_generator.generate_samples()
    assert trainer._copo_draw_exhausted is True and trainer.evaluated == []
    trainer._copo_logged = (5, 0)
    evaluation.evaluate_last_step(trainer)
    assert trainer.evaluated == [5]
    evaluation.watch_prompt_draws(trainer)  # installed once: a second call does not wrap the wrapper
    assert trainer.samples_generator.generate_samples.__wrapped__.__name__ == "<lambda>"

