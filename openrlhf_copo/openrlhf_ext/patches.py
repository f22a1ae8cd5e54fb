"""Every place openrlhf_copo touches OpenRLHF, applied by `apply()`.

Three patches that make COPO (each a no-op unless the run's estimator is one of COPO's), and seven for
logging, evaluation, rollout speed and reproducibility:

1. `RemoteExperienceMaker.compute_advantages_and_returns` -> `advantages.copo_compute_advantages_and_returns`
   (COPO's advantages over the whole rollout batch, on the controller);
2. `ActorPPOTrainer.__init__`: wraps the trainer's PolicyLoss in `loss.CopoPolicyLoss`;
3. `ActorPPOTrainer.training_step`: hands the micro-batch's global advantages to that loss and
   logs the two loss terms;
4. `BasePPOTrainer.save_logs_and_checkpoints`: with `--copo.metrics_file`, appends each step's
   metrics (the dict OpenRLHF sends to wandb / tensorboard) and the prompts drawn so far to a
   JSON-lines file (in Ray workers only: see `apply_metrics_file`); with `--copo.eval_after_train`,
   the run's last step is evaluated even when `--eval.steps` does not divide it;
5. `compute_eval_metrics`: OpenRLHF's in-training evaluation also reports mean@k, its standard
   error and maj@k, and appends them to the metrics file as a row with `"eval": 1`;
6. `BasePPOTrainer.init_checkpoint_states` (the start of `fit`): with `--copo.eval_before_train`, a
   run that starts from step 0 evaluates once before its first step; with `--copo.eval_after_train`,
   the trainer's prompt draws are watched for the end of the prompts (`watch_prompt_draws`, for patch 4);
7. the rollout executors' `execute` (`openrlhf.utils.agent`, in the vLLM engine actors): each
   response carries the seed of the engine that sampled it, so that the advantage step can report
   how many engines fed the batch and the weight-sync logprob gap of each engine; with
   `--copo.seeded_rollouts`, each sampled response gets its own vLLM seed (`seeded_sampling_params`).
8. `SamplesGenerator.generate_eval_samples`: the held-out prompts go to vLLM in one call (OpenRLHF
   sends them `--rollout.batch_size` at a time), first greedily with `--copo.eval_greedy`, then
   sampled, on the first `--copo.eval_sampled_prompts` prompts if set.
9. `SamplesGenerator._dispatch_prompts_to_vllm`: the tokenizer that OpenRLHF sends along with every
   prompt travels as its path (`TokenizerByPath`), loaded once per vLLM engine process.
10. `prepare_datasets`: the training prompts are shuffled by `--train.seed` (`seed_prompt_order`).

A monkeypatch made in the driver never reaches Ray actor processes, where these classes run.
`worker_hook.ray_worker_setup` is therefore registered as Ray's `worker_process_setup_hook` (see
`openrlhf_copo.cli.train_ppo_ray`): in every worker it arranges for `patch_experience_maker`,
`patch_ppo_actor` and `patch_ppo_trainer` to run when the actor first imports those modules.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import inspect
import os
import time
from typing import Optional

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from openrlhf_copo.contract import (ANSWER_ID, CLIP_RATIO_GLOBAL, LOSS_GLOBAL, LOSS_LOCAL, PROMPTS_CONSUMED,
                                    ROLLOUT_ENGINE_SEED, ROLLOUT_SEED_ENV, WEIGHTED_GLOBAL_ADV, info_tensor,
                                    sample_correct, sample_outcome)
from openrlhf_copo.openrlhf_ext.config import is_copo

#: OpenRLHF releases whose patched symbols were read and tested.
SUPPORTED_OPENRLHF = SpecifierSet(">=0.11.2,<0.12")
_PATCHED_ATTR = "__openrlhf_copo_patched__"
_EXPECTED_ADVANTAGES = ["self", "experiences"]
_EXPECTED_TRAINING_STEP = ["self", "experience", "kl_ctl", "step", "loss_batch_info"]
_EXPECTED_POLICY_LOSS = ["self", "log_probs", "old_log_probs", "advantages", "action_mask", "rollout_log_probs"]


class OpenRLHFVersionError(RuntimeError):
    """The installed openrlhf is not one whose internals these patches were written against."""


def check_version() -> str:
    """The installed openrlhf version (package metadata only: imports nothing); raises if untested."""
    version = importlib.metadata.version("openrlhf")
    if Version(version) not in SUPPORTED_OPENRLHF:
        raise OpenRLHFVersionError(
            f"openrlhf {version} is installed; openrlhf_copo patches openrlhf{SUPPORTED_OPENRLHF} only "
            "(pip install 'openrlhf==0.11.2'), or apply patches/ to your fork"
        )
    return version


def check_signature(cls, name: str, expected) -> None:
    """Raises `OpenRLHFVersionError` if ``cls.name`` no longer takes the parameters the patch was written for."""
    fn = getattr(cls, name, None)
    params = list(inspect.signature(fn).parameters)[: len(expected)] if fn is not None else None
    if params != expected:
        raise OpenRLHFVersionError(
            f"openrlhf {check_version()}: {cls.__module__}.{cls.__name__}.{name} has moved or changed "
            f"(expected parameters {expected}, found {params}); openrlhf_copo cannot patch it"
        )


def check_openrlhf() -> str:
    """The installed openrlhf version; raises `OpenRLHFVersionError` if untested or if a patched symbol moved."""
    version = check_version()
    from openrlhf.models import PolicyLoss
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
    from openrlhf.trainer.ray.ppo_actor import ActorPPOTrainer

    check_signature(RemoteExperienceMaker, "compute_advantages_and_returns", _EXPECTED_ADVANTAGES)
    check_signature(ActorPPOTrainer, "training_step", _EXPECTED_TRAINING_STEP)
    check_signature(PolicyLoss, "forward", _EXPECTED_POLICY_LOSS)
    return version


# The glue itself: four functions that OpenRLHF's code calls. `apply()` wires them in at run time;
# the diffs in patches/ call the very same functions from a fork's source.


def copo_advantages_or_none(maker, experiences):
    """In `RemoteExperienceMaker.compute_advantages_and_returns`: COPO's advantages, or None when the
    run's estimator is not COPO's (OpenRLHF's own code then runs unchanged, on experiences whose answer ids
    are dropped: OpenRLHF would average them into the logged metrics, as noise, when a baseline such as
    train_dapo_baseline.sh uses our reward file)."""
    from openrlhf_copo.openrlhf_ext.advantages import copo_compute_advantages_and_returns

    if not is_copo(maker.strategy.args):
        for exp in experiences:
            exp.info.pop(ANSWER_ID, None)
            exp.info.pop(ROLLOUT_ENGINE_SEED, None)
        return None

    return copo_compute_advantages_and_returns(maker, experiences)


def wrap_actor_loss(trainer) -> None:
    """At the end of `ActorPPOTrainer.__init__`: the two-term COPO loss around the trainer's PolicyLoss."""
    from openrlhf_copo.openrlhf_ext.loss import CopoPolicyLoss

    if is_copo(trainer.args) and not isinstance(trainer.actor_loss_fn, CopoPolicyLoss):
        trainer.actor_loss_fn = CopoPolicyLoss(trainer.actor_loss_fn)


def before_training_step(trainer, experience) -> None:
    """At the start of `ActorPPOTrainer.training_step`: hand the micro-batch's w_global * A_global to the loss."""
    from openrlhf_copo.openrlhf_ext.loss import CopoPolicyLoss

    if isinstance(trainer.actor_loss_fn, CopoPolicyLoss):
        g = experience.info.get(WEIGHTED_GLOBAL_ADV)
        if g is None:
            raise RuntimeError(f"COPO: micro-batch without info['{WEIGHTED_GLOBAL_ADV}'] (not made by the COPO advantage step)")
        trainer.actor_loss_fn.global_advantages = info_tensor(g)


def after_training_step(trainer, status: dict) -> dict:
    """At the end of `ActorPPOTrainer.training_step`: log the two loss terms."""
    from openrlhf_copo.openrlhf_ext.loss import CopoPolicyLoss

    loss = trainer.actor_loss_fn
    if isinstance(loss, CopoPolicyLoss) and loss.last_terms is not None:
        local, glob, glob_clip = loss.last_terms
        status["metrics"].update({LOSS_LOCAL: local, LOSS_GLOBAL: glob, CLIP_RATIO_GLOBAL: glob_clip})
        w = loss.term_weight  # the terms are micro-batch means (CopoPolicyLoss.forward): exact step means in the log
        status["weights"].update({LOSS_LOCAL: w, LOSS_GLOBAL: w, CLIP_RATIO_GLOBAL: "token"})
    return status


def patch_experience_maker(module) -> bool:
    """Patch 1 into a loaded `openrlhf.trainer.ppo_utils.experience_maker`. Returns True if newly applied.

    A fork carrying patches/ marks its classes as patched, so this is a no-op there."""
    cls = module.RemoteExperienceMaker
    if getattr(cls, _PATCHED_ATTR, False):
        return False
    check_version()
    check_signature(cls, "compute_advantages_and_returns", _EXPECTED_ADVANTAGES)
    original_advantages = cls.compute_advantages_and_returns

    @functools.wraps(original_advantages)
    def compute_advantages_and_returns(self, experiences):
        result = copo_advantages_or_none(self, experiences)
        return original_advantages(self, experiences) if result is None else result

    cls.compute_advantages_and_returns = compute_advantages_and_returns
    cls.__openrlhf_copo_patched__ = True
    return True


def patch_ppo_actor(module) -> bool:
    """Patches 2 and 3 into a loaded `openrlhf.trainer.ray.ppo_actor`. Returns True if newly applied."""
    from openrlhf.models import PolicyLoss

    cls = module.ActorPPOTrainer
    if getattr(cls, _PATCHED_ATTR, False):
        return False
    check_version()
    check_signature(cls, "training_step", _EXPECTED_TRAINING_STEP)
    check_signature(PolicyLoss, "forward", _EXPECTED_POLICY_LOSS)
    original_init = cls.__init__
    original_step = cls.training_step

    @functools.wraps(original_init)
    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        wrap_actor_loss(self)

    @functools.wraps(original_step)
    def training_step(self, experience, kl_ctl, step, loss_batch_info=None):
        before_training_step(self, experience)
        return after_training_step(self, original_step(self, experience, kl_ctl, step, loss_batch_info))

    cls.__init__ = __init__
    cls.training_step = training_step
    cls.__openrlhf_copo_patched__ = True
    return True


def patch_agent(module) -> None:
    """Patch 7 into a loaded `openrlhf.utils.agent` (vLLM engine actors): every response's `extra_logs`
    gets ROLLOUT_ENGINE_SEED, the seed of the engine that sampled it (engine i has --train.seed + i)."""
    for cls in (module.SingleTurnAgentExecutor, module.MultiTurnAgentExecutor):
        original = cls.__dict__["execute"]
        if getattr(original, _PATCHED_ATTR, False):
            continue

        def patched(original):
            @functools.wraps(original)
            async def execute(self, *args, **kwargs):
                # OpenRLHF 0.11.2's generate_responses passes every argument by keyword
                if "sampling_params" in kwargs:
                    kwargs["sampling_params"] = seeded_sampling_params(kwargs["sampling_params"], kwargs.get("prompt"))
                output = await original(self, *args, **kwargs)
                engine = kwargs["llm_engine"] if "llm_engine" in kwargs else args[5]
                seed = getattr(engine, "kwargs", {}).get("seed")
                if seed is not None and isinstance(output, dict):
                    output["extra_logs"] = {**(output.get("extra_logs") or {}), ROLLOUT_ENGINE_SEED: int(seed)}
                return output

            setattr(execute, _PATCHED_ATTR, True)
            return execute

        cls.execute = patched(original)


#: How many responses this process has sampled for each prompt (by hash) under `--copo.seeded_rollouts`.
_draws: dict = {}


def seeded_sampling_params(sampling_params, prompt):
    """With `--copo.seeded_rollouts` (ROLLOUT_SEED_ENV set in every worker): a copy of ``sampling_params`` whose
    seed is a hash of the run's seed, the prompt and the number of responses this engine process sampled for
    that prompt before; ``sampling_params`` itself when the option is off, the sampling is greedy, or it has a
    seed already.

    Why: vLLM samples a batch from one generator per engine, so the response a request gets depends on what else
    is in the batch and when it arrived, and OpenRLHF sends each of the G samples of a prompt as its own
    asynchronous request: two runs from the same model with the same --train.seed draw different first rollout
    batches. With a seed per request, the i-th response to a prompt is the same in both (up to floating-point
    differences between batch shapes), which is what a paired comparison of methods needs."""
    run_seed = os.environ.get(ROLLOUT_SEED_ENV)
    if run_seed is None or getattr(sampling_params, "seed", None) is not None or not sampling_params.temperature > 0:
        return sampling_params
    key = hashlib.sha256(str(prompt).encode()).digest()[:8]
    draw = _draws.get(key, 0)
    _draws[key] = draw + 1
    params = sampling_params.clone()
    params.seed = int.from_bytes(hashlib.sha256(f"{run_seed}:{draw}:".encode() + key).digest()[:4], "little") >> 1
    return params


def patch_ppo_trainer(module) -> None:
    """Patches 4-6 and 8-10 into a loaded `openrlhf.trainer.ppo_trainer` (Ray workers only: see `apply_metrics_file`)."""
    apply_metrics_file()
    apply_eval_majority()
    apply_eval_before_train()
    apply_eval_generation()
    apply_tokenizer_by_path()
    apply_seeded_prompt_order()


def apply() -> bool:
    """Install patches 1-3 into this process's openrlhf classes (idempotent). Returns True if newly applied.

    The driver (to fail early on an unsupported openrlhf) and tests call this; Ray workers get the same
    patches from `worker_hook`, module by module as the actor imports them."""
    import openrlhf.trainer.ppo_utils.experience_maker as experience_maker
    import openrlhf.trainer.ray.ppo_actor as ppo_actor

    check_openrlhf()
    newly = patch_experience_maker(experience_maker)
    return patch_ppo_actor(ppo_actor) or newly


#: The step the trainer last logged (patch 4) or is about to start from (patch 6): OpenRLHF's `evaluate`
#: runs right after `save_logs_and_checkpoints(global_step, ...)` and hands `compute_eval_metrics` no step.
_last_step = {"step": 0, "metrics_file": None}
#: What patch 8 hands patch 5 about the evaluation under way: its greedy samples (`evaluate` hands
#: `compute_eval_metrics` only the sampled ones) and its generation time.
_eval_under_way: dict = {}


def seed_prompt_order(prompts_dataloader, seed: int) -> None:
    """Makes the training prompts' order a function of ``seed`` alone (patch 10).

    OpenRLHF 0.11.2 builds the prompt loader in the PPOTrainer actor, where torch.distributed is not initialized,
    so `setup_dataloader` returns a torchdata StatefulDataLoader whose RandomSampler seeds its own generator, when
    it is built, from the process's global torch generator: nothing seeds that one with --train.seed in that
    process, so the order depended on what the process had drawn before. (OpenRLHF's distributed branch gives
    `DistributedSampler(seed=strategy.seed)`; this gives the controller's branch the same property.) Found when
    the benchmark's COPO and GRPO runs of one seed, same flags but the estimator, drew different first batches.
    A resumed run then restores the sampler's state from its checkpoint as before."""
    generator = getattr(getattr(prompts_dataloader, "sampler", None), "generator", None)
    if generator is not None:
        generator.manual_seed(int(seed))


def apply_seeded_prompt_order() -> None:
    """Patch 10, in Ray workers only: `prepare_datasets` (the PPOTrainer actor's prompt and held-out loaders)
    hands back a prompt loader shuffled by --train.seed (`seed_prompt_order`)."""
    import openrlhf.trainer.ppo_trainer as ppo_trainer

    original = ppo_trainer.prepare_datasets
    if getattr(original, _PATCHED_ATTR, False):
        return

    @functools.wraps(original)
    def prepare_datasets(strategy, tokenizer):
        prompts_dataloader, eval_dataloader, max_steps = original(strategy, tokenizer)
        seed_prompt_order(prompts_dataloader, strategy.args.train.seed)
        return prompts_dataloader, eval_dataloader, max_steps

    setattr(prepare_datasets, _PATCHED_ATTR, True)
    ppo_trainer.prepare_datasets = prepare_datasets


def apply_eval_majority() -> None:
    """Patch 5, in Ray workers only: OpenRLHF's in-training evaluation (`--eval.dataset`) also reports
    mean@k, its standard error and maj@k per data source (`eval_<source>_mean<k>`, `..._mean<k>_se`,
    `eval_<source>_maj<k>`), with the answer ids of the reward function, so the paper's training curves
    come out of one run; with `--copo.metrics_file` the evaluation is appended there too (`"eval": 1`)."""
    import openrlhf.trainer.ppo_trainer as ppo_trainer

    original = ppo_trainer.compute_eval_metrics
    if getattr(original, _PATCHED_ATTR, False):
        return

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
        if _last_step["metrics_file"] and logs:
            # the outcome strings go to the metrics file only: wandb and tensorboard take numbers
            append_metrics(_last_step["metrics_file"], _last_step["step"], {"eval": 1, **logs}, text=outcomes)
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
    if getattr(original, _PATCHED_ATTR, False):
        return

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

    setattr(generate_eval_samples, _PATCHED_ATTR, True)
    SamplesGenerator.generate_eval_samples = generate_eval_samples


class TokenizerByPath:
    """Stands in for a Hugging Face tokenizer in a Ray call's arguments: it pickles as the tokenizer's path and
    settings, and unpickles as the tokenizer loaded from that path, once per process (`_tokenizer_at`).

    Why: OpenRLHF 0.11.2 passes `hf_tokenizer=self.tokenizer` in every prompt's `generate_responses` call. The
    engine actor unpickles it each time, on the one thread that deserializes its calls: SmolLM2's 1.5 MB
    tokenizer takes 0.1 s on an idle core, and py-spy found the engine actor spending 86% of its time there
    during a 480-prompt evaluation on 2 cores. The executor only encodes the prompt and decodes the response,
    which the tokenizer loaded from the same path does identically; the vLLM engine loads its model from a path
    on the same node anyway."""

    def __init__(self, tokenizer):
        self.path = tokenizer.name_or_path
        self.settings = {"use_fast": bool(getattr(tokenizer, "is_fast", True)),
                         "padding_side": tokenizer.padding_side, "pad_token": tokenizer.pad_token,
                         "size": len(tokenizer)}

    @classmethod
    def of(cls, tokenizer):
        """The stand-in, or the tokenizer itself when it was not loaded from a local folder (nothing to load)."""
        return cls(tokenizer) if os.path.isdir(str(getattr(tokenizer, "name_or_path", ""))) else tokenizer

    def __reduce__(self):
        return _tokenizer_at, (self.path, tuple(sorted(self.settings.items())))


_TOKENIZERS: dict = {}


def _tokenizer_at(path: str, settings: tuple):
    """The tokenizer at ``path`` with the sender's settings, loaded once per process."""
    key = (path, settings)
    if key not in _TOKENIZERS:
        from transformers import AutoTokenizer

        wanted = dict(settings)
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True, use_fast=wanted["use_fast"])
        tokenizer.padding_side = wanted["padding_side"]
        if wanted["pad_token"] is not None:
            tokenizer.pad_token = wanted["pad_token"]
        if len(tokenizer) != wanted["size"]:
            raise RuntimeError(f"openrlhf_copo: the tokenizer loaded from {path} has {len(tokenizer)} tokens, the "
                               f"trainer's has {wanted['size']}: the rollout would tokenize differently")
        _TOKENIZERS[key] = tokenizer
    return _TOKENIZERS[key]


def apply_tokenizer_by_path() -> None:
    """Patch 9, in Ray workers only: `SamplesGenerator._dispatch_prompts_to_vllm` sends `TokenizerByPath` where
    OpenRLHF sends the tokenizer itself with every prompt."""
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    original = SamplesGenerator._dispatch_prompts_to_vllm
    if getattr(original, _PATCHED_ATTR, False):
        return

    @functools.wraps(original)
    def _dispatch_prompts_to_vllm(self, *args, **kwargs):
        tokenizer = self.tokenizer
        self.tokenizer = TokenizerByPath.of(tokenizer)  # read by the original's `.remote(hf_tokenizer=...)` only
        try:
            return original(self, *args, **kwargs)
        finally:
            self.tokenizer = tokenizer

    setattr(_dispatch_prompts_to_vllm, _PATCHED_ATTR, True)
    SamplesGenerator._dispatch_prompts_to_vllm = _dispatch_prompts_to_vllm


def apply_eval_before_train() -> None:
    """Patch 6, in Ray workers only: `--copo.eval_before_train` evaluates at step 0, before training.

    `PPOTrainer.fit` (a Ray actor class, shipped by value) starts by reading its checkpoint state with
    `BasePPOTrainer.init_checkpoint_states` (resolved in the worker, so patchable here). When that
    state says step 0, the vLLM engines still hold the initial weights: evaluating then measures the
    starting policy with the same engines, sampling settings and reward as every later evaluation.
    With `--copo.eval_after_train`, it also starts `watch_prompt_draws` there, for patch 4."""
    from openrlhf.trainer.ppo_trainer import BasePPOTrainer

    original = BasePPOTrainer.init_checkpoint_states
    if getattr(original, _PATCHED_ATTR, False):
        return

    @functools.wraps(original)
    def init_checkpoint_states(self):
        states = original(self)
        copo = getattr(self.args, "copo", None)
        if getattr(copo, "eval_after_train", False):
            watch_prompt_draws(self)
        if getattr(copo, "eval_before_train", False) and states.get("global_step", 0) == 0:
            _last_step.update(step=0, metrics_file=getattr(copo, "metrics_file", None))
            evaluate_now(self, 0)
        return states

    init_checkpoint_states.__openrlhf_copo_patched__ = True
    BasePPOTrainer.init_checkpoint_states = init_checkpoint_states


def apply_metrics_file() -> None:
    """Patch 4, in Ray workers only (`worker_hook`): never in the driver.

    `BasePPOTrainer` is the base of a Ray actor class. When `@ray.remote` wraps a class, Ray
    snapshots its methods in the driver, and cloudpickle ships a method *by value* when it no
    longer matches the module's attribute. Patched in the driver, the worker would receive the
    unpatched original; unpatched in the driver, it is shipped by reference and the worker
    resolves it to its own, patched, version.
    """
    from openrlhf.trainer.ppo_trainer import BasePPOTrainer

    if getattr(BasePPOTrainer, _PATCHED_ATTR, False):
        return
    original_save = BasePPOTrainer.save_logs_and_checkpoints

    @functools.wraps(original_save)
    def save_logs_and_checkpoints(self, global_step, logs_dict=None, client_states=None):
        path = getattr(getattr(self.args, "copo", None), "metrics_file", None)
        _last_step.update(step=int(global_step), metrics_file=path)
        self._copo_logged = (int(global_step), (client_states or {}).get("episode"))
        if path and logs_dict:
            consumed = (client_states or {}).get("total_consumed_prompts")
            append_metrics(path, global_step, logs_dict if consumed is None else {**logs_dict, PROMPTS_CONSUMED: consumed})
        result = original_save(self, global_step, logs_dict, client_states)
        if getattr(self, "_copo_draw_exhausted", False):  # the prompts ran out drawing this step's batch: fit() stops
            evaluate_last_step(self)
        return result

    BasePPOTrainer.save_logs_and_checkpoints = save_logs_and_checkpoints
    BasePPOTrainer.__openrlhf_copo_patched__ = True


def watch_prompt_draws(trainer) -> None:
    """With `--copo.eval_after_train` (installed at the start of `fit`, patch 6): the run's last step is
    evaluated even when `--eval.steps` does not divide it. How many steps a run makes is not known in advance
    (DAPO's filter refills groups from later prompts, and stops when too few are left for a batch), so this
    watches `PPOTrainer.fit`'s prompt draws, the only place that learns the prompts are used up. Its loop stops
    after a draw that says so: after training on the draw's batch (the step's logging then evaluates it,
    `save_logs_and_checkpoints`) or, when the draw came back empty, at once (evaluated here)."""
    generator = getattr(trainer, "samples_generator", None)
    if generator is None or getattr(generator.generate_samples, _PATCHED_ATTR, False):
        return
    draw = generator.generate_samples

    @functools.wraps(draw)
    def generate_samples(**generate_kwargs):
        samples, pass_rate, consumed, exhausted = draw(**generate_kwargs)
        trainer._copo_draw_exhausted = exhausted
        if exhausted and not samples:
            evaluate_last_step(trainer)
        return samples, pass_rate, consumed, exhausted

    setattr(generate_samples, _PATCHED_ATTR, True)
    generator.generate_samples = generate_samples


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


def append_metrics(path: str, step: int, logs: dict, text: Optional[dict] = None) -> None:
    """One JSON line per step: the numeric metrics of ``logs`` plus the step and wall time, and the strings of
    ``text`` (an evaluation's per-prompt outcomes) as they are."""
    import json
    import math

    row = {"step": int(step), "time": time.time()}
    for k, v in logs.items():
        v = v.item() if hasattr(v, "item") and getattr(v, "numel", lambda: 1)() == 1 else v
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            row[k] = float(v) if math.isfinite(v) else None
    row.update(text or {})
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def is_applied() -> bool:
    """Whether this process's openrlhf classes carry the COPO patches."""
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
    from openrlhf.trainer.ray.ppo_actor import ActorPPOTrainer

    return bool(getattr(RemoteExperienceMaker, _PATCHED_ATTR, False) and getattr(ActorPPOTrainer, _PATCHED_ATTR, False))
