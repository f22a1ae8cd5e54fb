"""Every place openrlhf_copo changes OpenRLHF's code at run time: the map. One module per concern.

patch  module         what it changes in OpenRLHF 0.11.2                  why
 1     copo           RemoteExperienceMaker.compute_advantages_and_returns
                                                                          COPO's advantages over the whole rollout batch
 2     copo           ActorPPOTrainer.__init__                            the PolicyLoss becomes loss.CopoPolicyLoss
 3     copo           ActorPPOTrainer.training_step                       the global advantages reach it; terms logged
 4     metrics_file   BasePPOTrainer.save_logs_and_checkpoints            --copo.metrics_file; then the last-step eval
 5     evaluation     compute_eval_metrics                                mean@k, its SE, maj@k, greedy accuracy logged
 6     evaluation     BasePPOTrainer.init_checkpoint_states               --copo.eval_before_train; watches the prompts
                                                                          for --copo.eval_after_train
 7     rollout        Single/MultiTurnAgentExecutor.execute               each response's engine seed;
                                                                          --copo.seeded_rollouts
 8     evaluation     SamplesGenerator.generate_eval_samples              held-out prompts in one vLLM call per pass
 9     rollout        SamplesGenerator._dispatch_prompts_to_vllm          the tokenizer travels as its path
10     prompt_order   prepare_datasets                                    the prompts' order comes from --train.seed

Patches 1-3 make COPO (each a no-op unless the run's estimator is one of COPO's); 4-10 serve logging, evaluation,
rollout speed and reproducibility, for any estimator. `versions` holds the openrlhf versions and signatures they
were written against, and the checks that refuse others. Each module's docstring says what its patches change and
why; each is tested by the test module of the same name under tests/openrlhf_ext/runtime_patches/.

A monkeypatch made in the driver never reaches Ray actor processes, where these classes run.
`worker_hook.ray_worker_setup` is therefore registered as Ray's `worker_process_setup_hook` (see
`openrlhf_copo.cli.train_ppo_ray`): in every worker it arranges for the four `patch_*` functions below to run
when the actor first imports the OpenRLHF module each one patches. The driver and tests call `apply()` (patches
1-3); a fork carrying patches/ calls the glue functions of `copo` from its own source, and the run-time patches
then stand aside.
"""

from __future__ import annotations

from openrlhf_copo.openrlhf_ext.runtime_patches import evaluation, metrics_file, prompt_order, rollout
from openrlhf_copo.openrlhf_ext.runtime_patches.copo import (after_training_step, apply, before_training_step,
                                                     copo_advantages_or_none, is_applied, patch_experience_maker,
                                                     patch_ppo_actor, wrap_actor_loss)
from openrlhf_copo.openrlhf_ext.runtime_patches.rollout import patch_agent
from openrlhf_copo.openrlhf_ext.runtime_patches.versions import (SUPPORTED_OPENRLHF, OpenRLHFVersionError, check_openrlhf,
                                                         check_signature, check_version)

__all__ = [
    # what the worker hook installs, one function per OpenRLHF module (`worker_hook.POST_IMPORT_PATCHES`)
    "patch_experience_maker", "patch_ppo_actor", "patch_ppo_trainer", "patch_agent",
    # the driver's and the tests' entry points
    "apply", "is_applied", "check_openrlhf", "check_version", "check_signature", "OpenRLHFVersionError",
    "SUPPORTED_OPENRLHF",
    # the glue a fork carrying patches/ calls
    "copo_advantages_or_none", "wrap_actor_loss", "before_training_step", "after_training_step",
]


def patch_ppo_trainer(module) -> None:
    """Patches 4-6 and 8-10 into a loaded `openrlhf.trainer.ppo_trainer` (Ray workers only: see
    `metrics_file.apply_metrics_file`). ``module`` is that module; each patch imports what it patches."""
    metrics_file.apply_metrics_file(after_logging=evaluation.evaluate_if_prompts_ran_out)
    evaluation.apply_eval_majority()
    evaluation.apply_eval_before_train()
    evaluation.apply_eval_generation()
    rollout.apply_tokenizer_by_path()
    prompt_order.apply_seeded_prompt_order()
