"""Patches 5, 6 and 8, and the end-of-training evaluation: OpenRLHF's in-training evaluation, extended.

5. `compute_eval_metrics`: the evaluation also reports mean@k, its standard error and maj@k (and, with
   `--copo.eval_greedy`, greedy accuracy with its per-prompt verdicts), and appends them to the metrics file as a
   row with `"eval": 1`;
6. `BasePPOTrainer.init_checkpoint_states` (the start of `fit`): with `--copo.eval_before_train`, a run that
   starts from step 0 evaluates once before its first step; with `--copo.eval_after_train`, the trainer's prompt
   draws are watched for the end of the prompts (`watch_prompt_draws`), and patch 4's logging evaluates the last
   step when they ran out (`evaluate_if_prompts_ran_out`);
8. `SamplesGenerator.generate_eval_samples`: the held-out prompts go to vLLM in one call (OpenRLHF sends them
   `--rollout.batch_size` at a time), first greedily with `--copo.eval_greedy`, then sampled, on the first
   `--copo.eval_sampled_prompts` prompts if set.
"""

from __future__ import annotations

import functools
import time

from openrlhf_copo.contract import ANSWER_ID, sample_correct, sample_outcome
from openrlhf_copo.openrlhf_ext.runtime_patches.metrics_file import append_metrics, last_step
from openrlhf_copo.openrlhf_ext.runtime_patches.versions import PATCHED_ATTR, check_symbol, check_vllm


#: What patch 8 hands patch 5 about the evaluation under way: its greedy samples (`evaluate` hands
#: `compute_eval_metrics` only the sampled ones) and its generation time.
_eval_under_way: dict = {}


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
        if "seconds" in _eval_under_way:
            logs["eval_generate_seconds"] = _eval_under_way.pop("seconds")
        greedy = _eval_under_way.pop("samples", None)
        if greedy:
            greedy_logs, outcomes = eval_greedy_logs(eval_dataloader, greedy)
            logs.update(greedy_logs)
        if last_step["metrics_file"] and logs:
            # the outcome strings go to the metrics file only: wandb and tensorboard take numbers
            append_metrics(last_step["metrics_file"], last_step["step"], {"eval": 1, **logs}, text=outcomes)
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
    its samples are kept for `compute_eval_metrics` (patch 5); the sampled call then takes the first
    `--copo.eval_sampled_prompts` prompts (0: all) with `evaluate`'s settings (`--eval.temperature`, ...)."""
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
        start = time.time()
        if self.args.vllm.enable_sleep:
            batch_vllm_engine_call(self.vllm_engines, "wake_up")
        try:
            if with_greedy:
                greedy = dict(generate_kwargs, temperature=0.0, n_samples_per_prompt=1)
                _eval_under_way["samples"] = self._generate_vllm(iter(self.eval_dataloader), total, False, **greedy)[0]
            samples = self._generate_vllm(iter(self.eval_dataloader), sampled, False, **generate_kwargs)[0]
        finally:
            if self.args.vllm.enable_sleep:
                batch_vllm_engine_call(self.vllm_engines, "sleep")
        _eval_under_way["seconds"] = time.time() - start
        print(f"openrlhf_copo: held-out evaluation: {f'{total} prompts greedy, then ' if with_greedy else ''}"
              f"{sampled} prompts x {generate_kwargs.get('n_samples_per_prompt')} samples at temperature "
              f"{generate_kwargs.get('temperature')}, one vLLM call each ({_eval_under_way['seconds']:.0f} s)", flush=True)
        return samples

    setattr(generate_eval_samples, PATCHED_ATTR, True)
    SamplesGenerator.generate_eval_samples = generate_eval_samples


def apply_eval_before_train() -> None:
    """Patch 6, in Ray workers only: `--copo.eval_before_train` evaluates at step 0, before training.

    `PPOTrainer.fit` (a Ray actor class, shipped by value) starts by reading its checkpoint state with
    `BasePPOTrainer.init_checkpoint_states` (resolved in the worker, so patchable here). When that
    state says step 0, the vLLM engines still hold the initial weights: evaluating then measures the
    starting policy with the same engines, sampling settings and reward as every later evaluation.
    With `--copo.eval_after_train`, it also starts `watch_prompt_draws` there, for patch 4."""
    from openrlhf.trainer.ppo_trainer import BasePPOTrainer

    original = BasePPOTrainer.init_checkpoint_states
    if getattr(original, PATCHED_ATTR, False):
        return
    check_symbol("openrlhf.trainer.ppo_trainer", "BasePPOTrainer.init_checkpoint_states")
    check_symbol("openrlhf.trainer.ppo_trainer", "PPOTrainer.evaluate")
    check_symbol("openrlhf.trainer.ppo_utils.samples_generator", "SamplesGenerator.generate_samples")

    @functools.wraps(original)
    def init_checkpoint_states(self):
        states = original(self)
        copo = getattr(self.args, "copo", None)
        if getattr(copo, "eval_after_train", False):
            watch_prompt_draws(self)
        if getattr(copo, "eval_before_train", False) and states.get("global_step", 0) == 0:
            last_step.update(step=0, metrics_file=getattr(copo, "metrics_file", None))
            evaluate_now(self, 0)
        return states

    init_checkpoint_states.__openrlhf_copo_patched__ = True
    BasePPOTrainer.init_checkpoint_states = init_checkpoint_states


def watch_prompt_draws(trainer) -> None:
    """With `--copo.eval_after_train` (installed at the start of `fit`, patch 6): the run's last step is
    evaluated even when `--eval.steps` does not divide it. How many steps a run makes is not known in advance
    (DAPO's filter refills groups from later prompts, and stops when too few are left for a batch), so this
    watches `PPOTrainer.fit`'s prompt draws, the only place that learns the prompts are used up. Its loop stops
    after a draw that says so: after training on the draw's batch (the step's logging then evaluates it,
    `save_logs_and_checkpoints`) or, when the draw came back empty, at once (evaluated here)."""
    generator = getattr(trainer, "samples_generator", None)
    if generator is None or getattr(generator.generate_samples, PATCHED_ATTR, False):
        return
    draw = generator.generate_samples

    @functools.wraps(draw)
    def generate_samples(**generate_kwargs):
        samples, pass_rate, consumed, exhausted = draw(**generate_kwargs)
        trainer._copo_draw_exhausted = exhausted
        if exhausted and not samples:
            evaluate_last_step(trainer)
        return samples, pass_rate, consumed, exhausted

    setattr(generate_samples, PATCHED_ATTR, True)
    generator.generate_samples = generate_samples


def evaluate_if_prompts_ran_out(trainer) -> None:
    """After each step's logging (patch 4 calls it): when drawing this step's batch used up the prompts, fit()
    stops after it, so the step is evaluated now (`evaluate_last_step`; `watch_prompt_draws` sets the flag)."""
    if getattr(trainer, "_copo_draw_exhausted", False):
        evaluate_last_step(trainer)


def evaluate_last_step(trainer) -> None:
    """Once the prompts are used up (`watch_prompt_draws`): evaluate the last logged step, unless the run has
    episodes left, or an evaluation already saw that step (OpenRLHF's own, at multiples of --eval.steps)."""
    step, episode = getattr(trainer, "_copo_logged", (0, None))
    if (step and step % trainer.args.eval.steps and episode == trainer.args.train.num_episodes - 1
            and getattr(trainer, "_copo_evaluated_step", None) != step):
        evaluate_now(trainer, step)


def evaluate_now(trainer, step: int) -> None:
    """OpenRLHF's in-training evaluation at ``step``, with the settings its own loop uses (a no-op without
    --eval.dataset)."""
    if getattr(trainer, "eval_dataloader", None) is None or not hasattr(trainer, "evaluate"):
        return
    trainer._copo_evaluated_step = step
    trainer.evaluate(step, **dict(trainer.generate_kwargs, temperature=trainer.args.eval.temperature,
                                  n_samples_per_prompt=trainer.args.eval.n_samples_per_prompt))
