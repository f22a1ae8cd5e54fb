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


class HeldOut(list):
    """A held-out dataloader as the patches see it: iterable, and an object the trainer's state can be kept on."""


def fake_trainer(eval_steps=6, episodes=1, eval_after_train=True):
    """A trainer as `PPOTrainer.fit` sees it, with `evaluate` recording the steps it was asked for, and the state
    patch 6 records at the start of its fit (with --copo.eval_after_train: the draws are watched)."""
    from types import SimpleNamespace as NS

    trainer = NS(args=NS(eval=NS(steps=eval_steps, temperature=1.0, n_samples_per_prompt=2),
                         train=NS(num_episodes=episodes), copo=NS(eval_after_train=eval_after_train)),
                 eval_dataloader=HeldOut([0]), generate_kwargs={}, evaluated=[])
    trainer.evaluate = lambda step, **kw: trainer.evaluated.append(step)
    eval_state.trainer_state(trainer).watch_draws = eval_after_train
    return trainer


def draws(trainer, *results):
    """`SamplesGenerator.generate_samples` of ``trainer``'s generator (which holds its held-out set), as patch 6
    wraps it, drawing ``results`` in turn: each (samples, pass rate, prompts consumed, exhausted)."""
    from types import SimpleNamespace as NS

    results = iter(results)
    generator = NS(eval_dataloader=trainer.eval_dataloader)
    return functools.partial(evaluation.watched_prompt_draw(lambda self, **kw: next(results)), generator)


def test_a_dapo_run_that_runs_out_of_prompts_mid_batch_is_evaluated_at_its_last_step():
    """DAPO seed 1 of the benchmark: 71 of 72 prompts drawn by step 7, the last one cannot fill a batch, the
    next draw comes back empty and fit() stops; step 7 (not a multiple of --eval.steps 6) must be evaluated."""
    trainer = fake_trainer()
    state = eval_state.trainer_state(trainer)
    draw = draws(trainer, (["batch"], 0.5, 11, False), ([], None, 1, True))
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
def test_the_end_of_the_prompts_evaluates_the_last_step_once(logged, episodes, evaluated_before, expected):
    trainer = fake_trainer(episodes=episodes)
    state = eval_state.trainer_state(trainer)
    state.step, state.episode = logged
    state.evaluated_step = evaluated_before
    draws(trainer, ([], None, 0, True))()
    assert trainer.evaluated == expected


def test_a_draw_that_uses_up_the_prompts_with_a_batch_is_flagged_for_the_steps_logging():
    """A draw that hits the end of the prompts while still filling a batch returns that batch: fit() trains on
    it, logs the step (whose logging then evaluates it) and stops. Nothing is evaluated at the draw itself."""
    trainer = fake_trainer()
    state = eval_state.trainer_state(trainer)
    draws(trainer, (["partial batch"], 0.5, 2, True))()
    assert state.prompts_used_up is True and trainer.evaluated == []
    state.step, state.episode = 5, 0
    evaluation.evaluate_if_prompts_ran_out(trainer)
    assert trainer.evaluated == [5]


def test_unwatched_draws_pass_through_and_record_nothing():
    """Without --copo.eval_after_train (patch 6 then records watch_draws False), a draw that uses up the prompts
    is returned as it is and evaluates nothing, as OpenRLHF's own draw."""
    trainer = fake_trainer(eval_after_train=False)
    state = eval_state.trainer_state(trainer)
    state.step, state.episode = 7, 0
    assert draws(trainer, ([], None, 0, True))() == ([], None, 0, True)
    assert state.prompts_used_up is False and trainer.evaluated == []


def test_two_trainers_in_one_process_each_keep_their_own_evaluation_state(tmp_path, monkeypatch):
    """Two trainers in one process, their steps interleaved, through the real patches 4, 5 and 6 (OpenRLHF's own
    functions under them stubbed): each evaluation's row goes to its own trainer's metrics file at its own step, and
    one trainer's prompts running out evaluates that trainer alone. With one state per process, the second trainer's
    logging sent the first one's evaluation row to the second one's file at its step, and the first one's end of
    prompts evaluated the second."""
    import json
    from types import SimpleNamespace as NS

    import openrlhf.trainer.ppo_trainer as ppo_trainer
    from openrlhf.trainer.ppo_trainer import BasePPOTrainer
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    from openrlhf_copo.openrlhf_ext.runtime_patches import metrics_file, versions

    def save_logs_and_checkpoints(self, global_step, logs_dict=None, client_states=None):
        pass

    def init_checkpoint_states(self):
        return {"global_step": 0}

    def compute_eval_metrics(eval_dataloader, samples_list, n_samples_per_prompt):
        return {"eval_x_mean2": 0.5}

    # OpenRLHF's own, stubbed where the patches wrap them; all restored after the test
    monkeypatch.setattr(BasePPOTrainer, "save_logs_and_checkpoints", save_logs_and_checkpoints)
    monkeypatch.setattr(BasePPOTrainer, "init_checkpoint_states", init_checkpoint_states)
    monkeypatch.setattr(BasePPOTrainer, versions.PATCHED_ATTR, False, raising=False)
    monkeypatch.setattr(SamplesGenerator, "generate_samples", SamplesGenerator.generate_samples)
    monkeypatch.setattr(ppo_trainer, "compute_eval_metrics", compute_eval_metrics)
    metrics_file.apply_metrics_file(after_logging=evaluation.evaluate_if_prompts_ran_out)
    evaluation.apply_eval_majority()
    evaluation.apply_eval_before_train()

    def trainer(name):
        made = NS(args=NS(eval=NS(steps=6, temperature=1.0, n_samples_per_prompt=2), train=NS(num_episodes=1),
                          copo=NS(eval_after_train=True, metrics_file=str(tmp_path / f"{name}.jsonl"))),
                  eval_dataloader=HeldOut([0]), generate_kwargs={}, evaluated=[])
        made.evaluate = lambda step, **kw: made.evaluated.append(step)
        BasePPOTrainer.init_checkpoint_states(made)  # patch 6: the start of its fit
        return made

    first, second = trainer("first"), trainer("second")
    BasePPOTrainer.save_logs_and_checkpoints(first, 3, {"reward": 0.1}, {"episode": 0})  # patch 4
    BasePPOTrainer.save_logs_and_checkpoints(second, 7, {"reward": 0.2}, {"episode": 0})
    ppo_trainer.compute_eval_metrics(first.eval_dataloader, [], 2)  # the first trainer's evaluation (patch 5)

    def rows(name):
        return [{k: v for k, v in json.loads(line).items() if k != "time"}
                for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]

    assert rows("first") == [{"step": 3, "reward": 0.1}, {"step": 3, "eval": 1.0, "eval_x_mean2": 0.5}]
    assert rows("second") == [{"step": 7, "reward": 0.2}]

    # the first trainer's draw uses up its prompts: its step's logging evaluates it, the other trainer's does not
    generator = NS(eval_dataloader=first.eval_dataloader)
    evaluation.watched_prompt_draw(lambda self, **kw: (["batch"], 1.0, 2, True))(generator)
    evaluation.evaluate_if_prompts_ran_out(second)
    evaluation.evaluate_if_prompts_ran_out(first)
    assert (first.evaluated, second.evaluated) == ([3], [])


def test_patch_5_takes_the_greedy_samples_and_time_of_its_own_evaluation_once():
    """Patch 8 leaves an evaluation's greedy samples and generation time for patch 5 of the same evaluation; once
    taken they are gone, so a later evaluation without --copo.eval_greedy cannot report them again."""
    state = eval_state.EvalState()
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
