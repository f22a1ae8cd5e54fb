"""The driver's part of a COPO run: one ordered list of steps, wherever OpenRLHF's main runs.

Two entry points run the very same steps:

- `python -m openrlhf_copo.cli.train_ppo_ray` runs OpenRLHF's *unmodified* `train_ppo_ray` main under
  `openrlhf_main_hooks`, which calls the steps from three points of that main: its parser, its
  `hierarchize`, and its `ray.init` (plus `ray.is_initialized`, to stop before training in `load_args`), and
  ends a failed run with `end_run`;
- a fork carrying `patches/train_ppo_ray.patch` calls `extend_openrlhf_parser`, `after_parse`,
  `ray_init_kwargs` and `run_training` from its own source.

Steps, in order:

    parser        extend_openrlhf_parser: COPO estimators, the --advantage_estimator alias, --copo.* flags
    after_parse   1. refusals (copo_problems)              one line, the run does not start
                  2. warnings (copo_warnings)              printed, the run goes on
                  3. openrlhf version and signatures       fails early on an unsupported openrlhf
                  4. resume guard (check_resume_settings)  a checkpoint resumes with its own settings
                  5. preflight                             model folder, data files, rows, labels
                  6. device (--copo.device, `device.py`)   CUDA or the CPU path, decided where the actors will
                                                           run, said in one line; the CPU path's refusals and
                                                           adaptations follow it (`cpu.py`), and
                                                           args.copo.device holds the decision from here on
    ray.init      ray_init_kwargs: the worker hook (patches in every worker, no CUDA touched), the actor
                  tokenizer's stop tokens for the reward, the CPU path's environment and local cluster
    train         run_training / end_run: a run that stops ends on one line naming what stopped it
                  (`failure.py`: which worker died, where the checkpoints are), then Ray shut down
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

from openrlhf_copo.contract import RAY_WORKER_SETUP_HOOK, ROLLOUT_SEED_ENV
from openrlhf_copo.openrlhf_ext import config, cpu, device, runtime_patches
from openrlhf_copo.openrlhf_ext.config import (CopoConfigError, check_resume_settings, copo_problems,
                                               copo_regime, copo_warnings, estimator_action, is_copo)
from openrlhf_copo.openrlhf_ext.failure import end_run
from openrlhf_copo.openrlhf_ext.preflight import PreflightError, preflight

__all__ = ["DriverError", "extend_openrlhf_parser", "after_parse", "apply_device", "decide_device", "ray_init_kwargs",
           "with_worker_hook", "run_training", "end_run", "openrlhf_main_hooks"]


class DriverError(ValueError):
    """A reason the run cannot start, in one line (the CLI prints it; a fork hands it to `parser.error`)."""


def extend_openrlhf_parser(parser: argparse.ArgumentParser) -> None:
    """The parser step: COPO's estimators, the `--advantage_estimator` alias and the `--copo.*` flags
    (`config`), and `--ds.param_dtype fp32` for the CPU path (`cpu`)."""
    config.extend_openrlhf_parser(parser)
    cpu.extend_parser(parser)


#: The args objects the steps already ran on: the CLI running a fork's main runs them from its `hierarchize` hook,
#: and the fork's own `after_parse` call then finds them done.
_STEPS_RAN_ON: list = []


def after_parse(args, *, check_inputs: bool = True, warn=None) -> None:
    """Steps 1-6, right after OpenRLHF hierarchized the flags, once per args. Raises `DriverError`.

    ``check_inputs`` off skips the resume guard, the preflight and the device decision (`load_args`: nothing is
    read, written or asked of a cluster; args.copo.device stays as given)."""
    if any(done is args for done in _STEPS_RAN_ON):
        return
    _STEPS_RAN_ON.append(args)
    problems = copo_problems(args)
    if problems:
        raise DriverError(problems[0])
    regime = copo_regime(args)
    if regime:
        print(f"openrlhf_copo: {regime}", file=sys.stderr, flush=True)
    for warning in copo_warnings(args):
        (warn or _print_warning)(warning)
    if is_copo(args):
        try:
            runtime_patches.apply()  # in the driver too: an unsupported openrlhf fails here, not in a worker
        except runtime_patches.OpenRLHFVersionError as e:
            raise DriverError(str(e)) from None
    if not check_inputs:
        return
    try:
        check_resume_settings(args)
        preflight(args)
    except (CopoConfigError, PreflightError) as e:
        raise DriverError(str(e)) from None
    apply_device(args)


def apply_device(args) -> device.DeviceDecision:
    """Step 6: decide the device (`decide_device`), say it in one line, refuse what that device cannot run, set up
    the CPU path if it is that, and leave the decision in ``args.copo.device`` (what `ray_init_kwargs` reads)."""
    decision = decide_device(args)
    print(decision.line(), file=sys.stderr, flush=True)
    if decision.cpu_path:
        problems = cpu.cpu_problems(args)
        if problems:
            raise DriverError(f"the actors run on the CPU path ({decision.reason}), where {problems[0]}")
        cpu.prepare_driver()
        cpu.install()
    else:
        problems = cpu.gpu_problems(args)
        if problems:
            raise DriverError(f"the actors run on CUDA ({decision.reason}), where {problems[0]}")
    args.copo.device = decision.device
    return decision


def decide_device(args) -> device.DeviceDecision:
    """Step 6's decision: `--copo.device`, with `auto` asked of the cluster the run joins (`device.decide`)."""
    try:
        return device.decide(args.copo.device, address=device.cluster_address(), local_cuda=device.cuda_available,
                             probe=device.probe_cluster)
    except device.DeviceError as e:
        raise DriverError(str(e)) from None


def ray_init_kwargs(args, kwargs: dict) -> dict:
    """OpenRLHF's `ray.init` arguments plus COPO's: the worker hook, the stop tokens, and on the CPU path (as
    `after_parse` decided) its environment and local cluster."""
    kwargs = dict(kwargs)
    try:
        kwargs["runtime_env"] = with_worker_hook(kwargs.get("runtime_env"))
    except RuntimeError as e:
        raise DriverError(str(e)) from None
    _add_stop_tokens(kwargs["runtime_env"], args)
    if args.copo.seeded_rollouts:
        kwargs["runtime_env"].setdefault("env_vars", {})[ROLLOUT_SEED_ENV] = str(args.train.seed)
    if args.copo.device == device.CPU:
        kwargs = cpu.ray_init_kwargs(args, kwargs)
    return kwargs


def run_training(train, args, prog: str) -> None:
    """OpenRLHF's `train(args)`; if it raises, the run ends on one line (`end_run`)."""
    try:
        train(args)
    except Exception as e:  # a dead Ray worker, an out-of-memory, ...: the traceback, then one line
        end_run(e, args, prog)


def with_worker_hook(runtime_env=None) -> dict:
    """``runtime_env`` plus our `worker_process_setup_hook` (for `ray.init`). Refuses to replace another hook."""
    env = dict(runtime_env or {})
    hook = env.get("worker_process_setup_hook")
    if hook not in (None, RAY_WORKER_SETUP_HOOK):
        raise RuntimeError(f"runtime_env already sets worker_process_setup_hook={hook!r}; openrlhf_copo needs its own "
                           f"({RAY_WORKER_SETUP_HOOK}) to patch every Ray worker")
    env["worker_process_setup_hook"] = RAY_WORKER_SETUP_HOOK
    return env


def _print_warning(message: str) -> None:
    print(f"openrlhf_copo: warning: {message}", file=sys.stderr)


def _add_stop_tokens(runtime_env: dict, args) -> None:
    """The reward reads responses up to the first end-of-turn token; beyond the common chat templates'
    it knows, it learns the actor tokenizer's own from this variable, set for every worker."""
    from openrlhf_copo.rewards.answers import STOP_TOKENS_ENV, tokenizer_stop_tokens

    model = getattr(getattr(args, "actor", None), "model_name_or_path", None)
    env_vars = runtime_env.setdefault("env_vars", {})
    if not model or STOP_TOKENS_ENV in env_vars:
        return
    try:
        env_vars[STOP_TOKENS_ENV] = json.dumps(tokenizer_stop_tokens(model))
    except Exception as e:  # the built-in list still applies; say so rather than stop here
        _print_warning(f"could not read the stop tokens of {model}'s tokenizer ({type(e).__name__}); the reward "
                       "cuts responses at the common chat templates' end-of-turn tokens only")


class StopBeforeTraining(BaseException):
    """Raised where OpenRLHF's `train(args)` begins, when the caller only wants the args. A BaseException: it
    passes the `except Exception` of `run_training` (a fork's main, run by `load_args`), as it is no failure."""


@contextlib.contextmanager
def openrlhf_main_hooks(captured: dict, *, stop_before_training: bool, prog: str, warn=None):
    """Run the steps from inside OpenRLHF's unmodified main: its parser gets the COPO flags, its
    `hierarchize` runs `after_parse`, its `ray.init` gets `ray_init_kwargs`. ``captured`` receives the
    parser and, once `after_parse` passed, the args. Everything is restored on exit."""
    import ray

    import openrlhf.utils.config as orl_config

    original_parse_args = argparse.ArgumentParser.parse_args
    original_hierarchize = orl_config.hierarchize
    original_init = ray.init
    original_is_initialized = ray.is_initialized

    def parse_args(self, args=None, namespace=None):
        if "parser" not in captured and estimator_action(self) is not None:
            self.prog = prog
            extend_openrlhf_parser(self)
            captured["parser"] = self
        return original_parse_args(self, args, namespace)

    def hierarchize(flat):
        nested = original_hierarchize(flat)
        if "parser" in captured and "args" not in captured:
            after_parse(nested, check_inputs=not stop_before_training, warn=warn)
            captured["args"] = nested
        return nested

    def init(*args, **kwargs):
        if "args" not in captured:  # the device probe's own short connection, inside after_parse
            return original_init(*args, **kwargs)
        return original_init(*args, **ray_init_kwargs(captured["args"], kwargs))

    def is_initialized():
        if stop_before_training and "args" in captured:
            raise StopBeforeTraining()  # train(args) starts here
        return original_is_initialized()

    argparse.ArgumentParser.parse_args = parse_args
    orl_config.hierarchize = hierarchize
    ray.init = init
    ray.is_initialized = is_initialized
    try:
        yield
    finally:
        argparse.ArgumentParser.parse_args = original_parse_args
        orl_config.hierarchize = original_hierarchize
        ray.init = original_init
        ray.is_initialized = original_is_initialized
