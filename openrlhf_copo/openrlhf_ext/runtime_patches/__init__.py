"""Every place openrlhf_copo changes OpenRLHF's code at run time: the map. One module per concern.

patch  module         what it changes in OpenRLHF 0.11.2                  why
 1     copo           RemoteExperienceMaker.compute_advantages_and_returns
                                                                          COPO's advantages over the whole rollout batch
                      RemoteExperienceMaker.make_experience_batch         --copo.probe: no model forward before them
 2     copo           ActorPPOTrainer.__init__                            the PolicyLoss becomes loss.CopoPolicyLoss
 3     copo           ActorPPOTrainer.training_step                       the global advantages reach it; terms logged
 4     metrics_file   BasePPOTrainer.save_logs_and_checkpoints            --copo.metrics_file; then the last-step eval
                      SamplesGenerator.generate_samples,                  each step's generated tokens counted and
                      ._process_response_into_experience,                 logged (every response drawn, evaluation
                      BasePPOTrainer.init_checkpoint_states               apart); the total kept in checkpoints
 5     evaluation     compute_eval_metrics                                mean@k, its SE, maj@k, greedy accuracy logged
 6     evaluation     BasePPOTrainer.init_checkpoint_states               --copo.eval_before_train; watches the prompts
                    SamplesGenerator.generate_samples                   for --copo.eval_after_train
 7     rollout        Single/MultiTurnAgentExecutor.execute               each response's engine seed;
                      (+ SamplesGenerator._dispatch_prompts_to_vllm)      --copo.seeded_rollouts (the run's draw index)
 8     evaluation     SamplesGenerator.generate_eval_samples              held-out prompts in one vLLM call per pass
 9     rollout        SamplesGenerator._dispatch_prompts_to_vllm          the tokenizer travels as its path
10     prompt_order   prepare_datasets                                    the prompts' order comes from --train.seed
11     adaptive_sampling SamplesGenerator._generate_vllm                  Reinforce-Ada's sampling rounds (reinforce_ada, its kin);
       (+ knapsack)                                                        Knapsack RL's pilot and allocation (knapsack)

Patches 1-3 make COPO; 4-10 serve logging, evaluation, rollout speed and reproducibility; 11 is the rollout of the
modes that draw more than one round (Reinforce-Ada's rounds, Knapsack RL's allocation). Which of them a run's workers install is the driver's decision (`patches_for`, handed to the workers in
`contract.PATCHES_ENV`): a COPO run gets all ten (and 11 under a mode that samples adaptively,
`core.Mode.adaptive_sampling`, or that allocates its budget, `core.Mode.budget_allocation`); a run of any other estimator gets OpenRLHF's own functions wherever a patch would change what it
does, and only the patches that add to its logs (1: our reward's id labels out of the logs; 5: mean@k, maj@k; 7:
each response's engine, as a label) unless a `--copo.*` flag asks for one (`--copo.same_pipeline`: all of 4-10, so
that a baseline runs through the same pipeline as the COPO run it is compared with). `versions` holds the openrlhf
versions and every symbol the patches touch, and the checks that refuse others. `eval_state` holds what patches 4, 5, 6
and 8 of one trainer hand each other (tested with `evaluation`). Each module's docstring says what its patches change and
why; each is tested by the test module of the same name under tests/openrlhf_ext/runtime_patches/.

A monkeypatch made in the driver never reaches Ray actor processes, where these classes run.
`worker_hook.ray_worker_setup` is therefore registered as Ray's `worker_process_setup_hook` (see
`openrlhf_copo.cli.train_ppo_ray`): in every worker it arranges for the four `install_*` functions below to run
when the actor first imports the OpenRLHF module each one patches; each installs the patches the driver enabled. The driver and tests call `apply()` (patches
1-3); a fork carrying patches/ calls the glue functions of `copo` from its own source, and the run-time patches
then stand aside.
"""

from __future__ import annotations

import os
from typing import FrozenSet

from openrlhf_copo.contract import PATCHES_ENV, ROLLOUT_SEED_ENV
from openrlhf_copo.openrlhf_ext.runtime_patches import (adaptive_sampling, evaluation, knapsack, metrics_file,
                                                        prompt_order, rollout)
from openrlhf_copo.openrlhf_ext.runtime_patches.copo import (after_training_step, apply, before_training_step,
                                                     copo_advantages_or_none, is_applied, patch_experience_maker,
                                                     patch_ppo_actor, probe_experience_batch, probing,
                                                     wrap_actor_loss)
from openrlhf_copo.openrlhf_ext.runtime_patches.rollout import patch_agent
from openrlhf_copo.openrlhf_ext.runtime_patches.versions import (SUPPORTED_OPENRLHF, OpenRLHFVersionError, check_openrlhf,
                                                         check_symbol, check_version)

__all__ = [
    # what the worker hook calls, one function per OpenRLHF module (`worker_hook.POST_IMPORT_PATCHES`)
    "install_experience_maker", "install_ppo_actor", "install_ppo_trainer", "install_agent",
    # the driver's and the tests' entry points
    "apply", "is_applied", "check_openrlhf", "check_version", "check_symbol", "OpenRLHFVersionError",
    "patches_for", "patches_env", "enabled_patches", "ALL_PATCHES", "LOG_ONLY_PATCHES",
    "SUPPORTED_OPENRLHF",
    # the glue a fork carrying patches/ calls
    "copo_advantages_or_none", "wrap_actor_loss", "before_training_step", "after_training_step", "probing",
    "probe_experience_batch",
]


ALL_PATCHES: FrozenSet[int] = frozenset(range(1, 12))
#: Reinforce-Ada's sampling rounds and Knapsack RL's allocation: installed only for a mode that samples adaptively or
#: allocates its budget.
ADAPTIVE_SAMPLING_PATCH = 11
#: What a run of a non-COPO estimator gets with no `--copo.*` flag: the patches that only add to its logs.
LOG_ONLY_PATCHES: FrozenSet[int] = frozenset({1, 5, 7})


def patches_for(args) -> FrozenSet[int]:
    """The run-time patches the run's workers install (the driver decides; `contract.PATCHES_ENV` carries it).

    Every patch for COPO's estimators. For any other, OpenRLHF's own functions, except the patches that only add to
    its logs (`LOG_ONLY_PATCHES`: 1 drops our reward file's id labels before OpenRLHF averages them into the logs,
    and calls OpenRLHF's own advantage code; 5 adds mean@k / maj@k to the evaluation's logs; 7 tags each response
    with its engine and, only under --copo.seeded_rollouts, seeds it) and those a flag asks for."""
    from openrlhf_copo.openrlhf_ext.config import is_copo

    copo = args.copo
    if is_copo(args):
        rounds = adaptive_sampling.samples_adaptively(args) or knapsack.allocates_budget(args)
        return ALL_PATCHES if rounds else ALL_PATCHES - {ADAPTIVE_SAMPLING_PATCH}
    if copo.same_pipeline:
        return LOG_ONLY_PATCHES | {4, 6, 8, 9, 10}
    wanted = set(LOG_ONLY_PATCHES)
    if copo.metrics_file or copo.eval_after_train:
        wanted.add(4)
    if copo.eval_before_train or copo.eval_after_train:
        wanted.add(6)
    if copo.seeded_rollouts:  # the run's draw counts go into each checkpoint (4) and come back on a resume (6)
        wanted |= {4, 6}
    if copo.eval_greedy or copo.eval_sampled_prompts:
        wanted.add(8)
    return frozenset(wanted)


def patches_env(patches) -> str:
    """``patches`` as `contract.PATCHES_ENV` carries them."""
    return ",".join(str(p) for p in sorted(patches))


def enabled_patches() -> FrozenSet[int]:
    """The patches this worker installs: as the driver decided (`contract.PATCHES_ENV`), or all when it is unset (a
    test, or a process that our driver did not start)."""
    value = os.environ.get(PATCHES_ENV)
    if value is None:
        return ALL_PATCHES
    return frozenset(int(p) for p in value.split(",") if p.strip())


def install_experience_maker(module) -> None:
    """Patch 1, if enabled, into a loaded `openrlhf.trainer.ppo_utils.experience_maker` (the worker hook)."""
    if 1 in enabled_patches():
        patch_experience_maker(module)


def install_ppo_actor(module) -> None:
    """Patches 2 and 3, if enabled, into a loaded `openrlhf.trainer.ray.ppo_actor` (the worker hook)."""
    if {2, 3} <= enabled_patches():
        patch_ppo_actor(module)


def install_agent(module) -> None:
    """Patch 7, if enabled, into a loaded `openrlhf.utils.agent` (the worker hook)."""
    if 7 in enabled_patches():
        patch_agent(module)


def install_ppo_trainer(module) -> None:
    """Patches 4-6 and 8-11, those enabled, into a loaded `openrlhf.trainer.ppo_trainer` (Ray workers only: see
    `metrics_file.apply_metrics_file`). ``module`` is that module; each patch imports what it patches."""
    enabled = enabled_patches()
    if 4 in enabled:
        metrics_file.apply_metrics_file(after_logging=evaluation.evaluate_if_prompts_ran_out)
    if 5 in enabled:
        evaluation.apply_eval_majority()
    if 6 in enabled:
        evaluation.apply_eval_before_train()
    if 8 in enabled:
        evaluation.apply_eval_generation()
    if 9 in enabled:
        rollout.apply_tokenizer_by_path()
    if 7 in enabled and os.environ.get(ROLLOUT_SEED_ENV) is not None:
        rollout.apply_seeded_dispatch()  # patch 7's trainer side: each request carries the run's draw index
    if 10 in enabled:
        prompt_order.apply_seeded_prompt_order()
    if ADAPTIVE_SAMPLING_PATCH in enabled:
        adaptive_sampling.apply_adaptive_sampling()
