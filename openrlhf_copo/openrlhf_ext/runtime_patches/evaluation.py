"""Patches 5, 6 and 8, and the end-of-training evaluation: OpenRLHF's in-training evaluation, extended.

5. `compute_eval_metrics`: the evaluation also reports mean@k, its standard error and maj@k (and, with
   `--copo.eval_greedy`, greedy accuracy with its per-prompt verdicts), and appends them to the metrics file as a
   row with `"eval": 1`;
6. `BasePPOTrainer.init_checkpoint_states` (the start of `fit`): with `--copo.eval_before_train`, a run that
   starts from step 0 evaluates once before its first step; with `--copo.eval_after_train`, `fit`'s prompt draws
   (`SamplesGenerator.generate_samples`) are watched for the end of the prompts (`note_prompt_draw`), and patch 4's
   logging evaluates the last step when they ran out (`evaluate_if_prompts_ran_out`);
8. `SamplesGenerator.generate_eval_samples`: the held-out prompts go to vLLM in one call (OpenRLHF sends them
   `--rollout.batch_size` at a time), first greedily with `--copo.eval_greedy`, then sampled, on the first
   `--copo.eval_sampled_prompts` prompts if set.

What these patches and patch 4 hand each other (the step last logged, the greedy samples of the evaluation under
way, whether the prompts ran out, ...) is one object per trainer, `eval_state.EvalState`, found through the trainer
(`eval_state.trainer_state`) or its held-out dataloader (`eval_state.held_out_state`); that module's docstring says
who writes and who reads each field.
"""

from __future__ import annotations

import functools
import time

from openrlhf_copo.contract import ANSWER_ID, sample_correct, sample_outcome
from openrlhf_copo.openrlhf_ext.runtime_patches import eval_state
from openrlhf_copo.openrlhf_ext.runtime_patches.metrics_file import append_metrics
from openrlhf_copo.openrlhf_ext.runtime_patches.rollout import DrawCounter
from openrlhf_copo.openrlhf_ext.runtime_patches.versions import PATCHED_ATTR, check_symbol, check_vllm


def apply_eval_majority() -> None:
    """Patch 5, in Ray workers only: OpenRLHF's in-training evaluation (`--eval.dataset`) also reports
    mean@k, its standard error and maj@k per data source (`eval_<source>_mean<k>`, `..._mean<k>_se`,
    `eval_<source>_maj<k>`), with the answer ids of the reward function, so the paper's training curves
    come out of one run; with `--copo.metrics_file` the evaluation is appended there too (`"eval": 1`)."""
    import openrlhf.trainer.ppo_trainer as ppo_trainer

    original = ppo_trainer.compute_eval_metrics
    if getattr(original, PATCHED_ATTR, False):
        return
    check_symbol("openrlhf.trainer.ppo_trainer", "compute_eval_metrics")

    @functools.wraps(original)
    def compute_eval_metrics(eval_dataloader, samples_list, n_samples_per_prompt):
        logs = original(eval_dataloader, samples_list, n_samples_per_prompt)
        if samples_list and all(ANSWER_ID in s.info for s in samples_list):
            logs.update(eval_majority_logs(eval_dataloader, samples_list, n_samples_per_prompt))
        outcomes = {}
        state = eval_state.held_out_state(eval_dataloader)  # the evaluating trainer's: its held-out set is ours
        greedy, seconds = state.take_evaluation_extras()  # patch 8's: `evaluate` hands us only the sampled ones
        if seconds is not None:
            logs["eval_generate_seconds"] = seconds
        if greedy:
            greedy_logs, outcomes = eval_greedy_logs(eval_dataloader, greedy)
            logs.update(greedy_logs)
        if state.metrics_file and logs:
            # the outcome strings go to the metrics file only: wandb and tensorboard take numbers
            append_metrics(state.metrics_file, state.step, {"eval": 1, **logs}, text=outcomes)
        return logs

    compute_eval_metrics.__openrlhf_copo_patched__ = True
    ppo_trainer.compute_eval_metrics = compute_eval_metrics


def eval_majority_logs(eval_dataloader, samples_list, k: int) -> dict:
    """mean@k and maj@k per data source from OpenRLHF's eval samples (k consecutive samples per prompt)."""
    from openrlhf_copo.evaluation.metrics import maj_at_k, mean_at_k, mean_at_k_se

    source_of = {}
    for sources, prompts, _labels, _images in eval_dataloader:
        source_of.update(zip(prompts, sources))
    per_source: dict = {}
    flat = [(s.prompts[0], *sample_outcome(s.info, reward=s.rewards)) for s in samples_list]
    for i in range(0, len(flat) - k + 1, k):
        group = flat[i : i + k]
        per_source.setdefault(source_of.get(group[0][0], "unknown"), []).append(
            [(answer_id, correct) for _, answer_id, correct in group])
    logs = {}
    for source, prompts in per_source.items():
        logs[f"eval_{source}_mean{k}"] = mean_at_k(prompts)
        logs[f"eval_{source}_mean{k}_se"] = mean_at_k_se(prompts)
        logs[f"eval_{source}_maj{k}"] = maj_at_k(prompts)
    return logs


def eval_greedy_logs(eval_dataloader, samples_list) -> tuple:
    """Greedy accuracy per data source from one greedy sample per prompt: (`eval_<source>_greedy` and
    `..._greedy_se`, i.e. mean@1 and its standard error; {`eval_<source>_greedy_outcomes`: the per-prompt 0/1
    string in the held-out file's order}), so that two evaluations of the same prompts pair up prompt by prompt."""
    from openrlhf_copo.evaluation.metrics import mean_at_k, mean_at_k_se, outcome_string

    order, source_of = {}, {}
    for sources, prompts, _labels, _images in eval_dataloader:
        for prompt, source in zip(prompts, sources):
            order.setdefault(prompt, len(order))
            source_of[prompt] = source
    per_source: dict = {}
    for s in sorted(samples_list, key=lambda s: order.get(s.prompts[0], len(order))):
        correct = sample_correct(s.info, reward=s.rewards)
        per_source.setdefault(source_of.get(s.prompts[0], "unknown"), []).append(correct)
    logs, outcomes = {}, {}
    for source, correct in per_source.items():
        logs[f"eval_{source}_greedy"] = mean_at_k([[(None, c)] for c in correct])
        logs[f"eval_{source}_greedy_se"] = mean_at_k_se([[(None, c)] for c in correct])
        outcomes[f"eval_{source}_greedy_outcomes"] = outcome_string(correct)
    return logs, outcomes


def apply_eval_generation() -> None:
    """Patch 8, in Ray workers only: `SamplesGenerator.generate_eval_samples` hands vLLM the held-out prompts
    in one call. OpenRLHF 0.11.2 sends them `--rollout.batch_size` at a time (64 prompts x 2 samples took 80 s
    in 11 calls on 2 CPU cores, and each call waits for its slowest response); vLLM batches a single call
    itself. With `--copo.eval_greedy`, a greedy call (temperature 0, one sample per prompt) comes first and
    its samples are kept for `compute_eval_metrics` (patch 5, through the trainer's `eval_state.held_out_state`); the
    sampled call then takes the first `--copo.eval_sampled_prompts` prompts (0: all) with `evaluate`'s settings
    (`--eval.temperature`, ...)."""
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    original = SamplesGenerator.generate_eval_samples
    if getattr(original, PATCHED_ATTR, False):
        return
    for name in ("SamplesGenerator.generate_eval_samples", "SamplesGenerator._generate_vllm"):  # called positionally
        check_symbol("openrlhf.trainer.ppo_utils.samples_generator", name)
    check_symbol("openrlhf.trainer.ray.vllm_engine", "batch_vllm_engine_call")
    check_vllm("8")  # the engines' sleep(level) and wake_up(tags), reached through batch_vllm_engine_call

    @functools.wraps(original)
    def generate_eval_samples(self, **generate_kwargs):
        from openrlhf.trainer.ray.vllm_engine import batch_vllm_engine_call

        copo = getattr(self.args, "copo", None)
        total = len(self.eval_dataloader.dataset)
        sampled = min(getattr(copo, "eval_sampled_prompts", 0) or total, total)
        with_greedy = getattr(copo, "eval_greedy", False)
        state = eval_state.held_out_state(self.eval_dataloader)
        start = time.time()
        if self.args.vllm.enable_sleep:
            batch_vllm_engine_call(self.vllm_engines, "wake_up")
        try:
            if with_greedy:
                greedy = dict(generate_kwargs, temperature=0.0, n_samples_per_prompt=1)
                state.greedy_samples = self._generate_vllm(iter(self.eval_dataloader), total, False, **greedy)[0]
            samples = self._generate_vllm(iter(self.eval_dataloader), sampled, False, **generate_kwargs)[0]
        finally:
            if self.args.vllm.enable_sleep:
                batch_vllm_engine_call(self.vllm_engines, "sleep")
        state.generate_seconds = time.time() - start
        print(f"openrlhf_copo: held-out evaluation: {f'{total} prompts greedy, then ' if with_greedy else ''}"
              f"{sampled} prompts x {generate_kwargs.get('n_samples_per_prompt')} samples at temperature "
              f"{generate_kwargs.get('temperature')}, one vLLM call each ({state.generate_seconds:.0f} s)", flush=True)
        return samples

    setattr(generate_eval_samples, PATCHED_ATTR, True)
    SamplesGenerator.generate_eval_samples = generate_eval_samples


def apply_eval_before_train() -> None:
    """Patch 6, in Ray workers only: `--copo.eval_before_train` evaluates at step 0, before training.

    `PPOTrainer.fit` (a Ray actor class, shipped by value) starts by reading its checkpoint state with
    `BasePPOTrainer.init_checkpoint_states` (resolved in the worker, so patchable here). When that
    state says step 0, the vLLM engines still hold the initial weights: evaluating then measures the
    starting policy with the same engines, sampling settings and reward as every later evaluation.
    There it also records the trainer and whether `--copo.eval_after_train` asks for the prompt draws to be
    watched; `SamplesGenerator.generate_samples`, `fit`'s prompt draw, is wrapped here for that
    (`note_prompt_draw`), and passes through unwatched otherwise."""
    from openrlhf.trainer.ppo_trainer import BasePPOTrainer
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    original = BasePPOTrainer.init_checkpoint_states
    if getattr(original, PATCHED_ATTR, False):
        return
    check_symbol("openrlhf.trainer.ppo_trainer", "BasePPOTrainer.init_checkpoint_states")
    check_symbol("openrlhf.trainer.ppo_trainer", "PPOTrainer.evaluate")
    check_symbol("openrlhf.trainer.ppo_utils.samples_generator", "SamplesGenerator.generate_samples")

    @functools.wraps(original)
    def init_checkpoint_states(self):
        states = original(self)
        DrawCounter.restore(self, states)  # seeded rollouts: the draw counts the checkpoint was saved with
        copo = getattr(self.args, "copo", None)
        state = eval_state.trainer_state(self)
        state.watch_draws = getattr(copo, "eval_after_train", False)
        if getattr(copo, "eval_before_train", False) and states.get("global_step", 0) == 0:
            state.step, state.metrics_file = 0, getattr(copo, "metrics_file", None)
            evaluate_now(self, 0)
        return states

    setattr(init_checkpoint_states, PATCHED_ATTR, True)
    BasePPOTrainer.init_checkpoint_states = init_checkpoint_states
    SamplesGenerator.generate_samples = watched_prompt_draw(SamplesGenerator.generate_samples)


def watched_prompt_draw(draw):
    """`SamplesGenerator.generate_samples` that tells `note_prompt_draw` what each draw returned, when its trainer
    watches them (found through the generator's held-out set: without one nothing is evaluated, so nothing watched)."""

    @functools.wraps(draw)
    def generate_samples(self, *args, **generate_kwargs):
        samples, pass_rate, consumed, exhausted = draw(self, *args, **generate_kwargs)
        state = eval_state.held_out_state(getattr(self, "eval_dataloader", None))
        if state is not None and state.watch_draws:
            note_prompt_draw(state, samples, exhausted)
        return samples, pass_rate, consumed, exhausted

    setattr(generate_samples, PATCHED_ATTR, True)
    return generate_samples


def note_prompt_draw(state: eval_state.EvalState, samples, exhausted: bool) -> None:
    """With `--copo.eval_after_train`: the run's last step is evaluated even when `--eval.steps` does not divide
    it. How many steps a run makes is not known in advance (DAPO's filter refills groups from later prompts, and
    stops when too few are left for a batch), so this watches `PPOTrainer.fit`'s prompt draws, the only place that
    learns the prompts are used up. Its loop stops after a draw that says so: after training on the draw's batch
    (the step's logging then evaluates it, `evaluate_if_prompts_ran_out`) or, when the draw came back empty, at
    once (evaluated here). ``state`` is the drawing trainer's."""
    state.prompts_used_up = exhausted
    if exhausted and not samples:
        evaluate_last_step(state.trainer)


def evaluate_if_prompts_ran_out(trainer) -> None:
    """After each step's logging (patch 4 calls it): when drawing this step's batch used up the prompts, fit()
    stops after it, so the step is evaluated now (`evaluate_last_step`; `note_prompt_draw` records it)."""
    if eval_state.trainer_state(trainer).prompts_used_up:
        evaluate_last_step(trainer)


def evaluate_last_step(trainer) -> None:
    """Once the prompts are used up: evaluate the last logged step, when `last_step_left_unevaluated`."""
    state = eval_state.trainer_state(trainer)
    if last_step_left_unevaluated(state, trainer.args):
        evaluate_now(trainer, state.step)


def last_step_left_unevaluated(state: eval_state.EvalState, args) -> bool:
    """Whether the last logged step still needs its evaluation when the prompts are used up: a step was made, no
    episode is left (another episode draws the prompts again), OpenRLHF's own loop did not evaluate it (it does at
    multiples of --eval.steps), and no evaluation of ours saw it yet (the draw that fed it may have)."""
    step_made = state.step > 0
    episodes_left = state.episode != args.train.num_episodes - 1
    openrlhf_evaluated_it = state.step % args.eval.steps == 0
    evaluated_already = state.evaluated_step == state.step
    return step_made and not episodes_left and not openrlhf_evaluated_it and not evaluated_already


def evaluate_now(trainer, step: int) -> None:
    """OpenRLHF's in-training evaluation at ``step``, with the settings its own loop uses (a no-op without
    --eval.dataset)."""
    if getattr(trainer, "eval_dataloader", None) is None or not hasattr(trainer, "evaluate"):
        return
    eval_state.trainer_state(trainer).evaluated_step = step
    trainer.evaluate(step, **dict(trainer.generate_kwargs, temperature=trainer.args.eval.temperature,
                                  n_samples_per_prompt=trainer.args.eval.n_samples_per_prompt))
