"""The driver's part of a COPO run: one ordered list of steps, wherever OpenRLHF's main runs.

Two entry points run the very same steps:

- `python -m openrlhf_copo.cli.train_ppo_ray` runs OpenRLHF's *unmodified* `train_ppo_ray` main with
  `run_openrlhf_main`: its main block, compiled from its own source, runs with our parser step once the parser is
  built and with our `train`, which runs `after_parse` on the arguments OpenRLHF hands to `train(args)` (after all
  of OpenRLHF's own adjustments), then OpenRLHF's `train` with `ray_init_kwargs` at its `ray.init`; a failed run
  ends with `end_run`;
- a fork carrying `patches/train_ppo_ray.patch` calls `extend_openrlhf_parser`, `after_parse` (right before
  `train(args)`), `ray_init_kwargs` and `run_training` from its own source.

Steps, in order:

    parser        extend_openrlhf_parser: COPO estimators, the --advantage_estimator alias, --copo.* flags
    (OpenRLHF's own parsing, hierarchizing and adjustments of the arguments)
    after_parse   1. refusals (copo_problems)              one line, the run does not start
                  2. warnings (copo_warnings)              printed, the run goes on
                  3. openrlhf version and signatures       fails early on an unsupported openrlhf
                  4. resume guard (check_resume_settings)  a checkpoint resumes with its own settings
                  5. preflight                             model folder, data files, rows, labels
                  6. device (--copo.device, `device.py`)   CUDA or the CPU path, decided where the actors will
                                                           run, said in one line; the CPU path's refusals and
                                                           adaptations follow it (`cpu.py`), and
                                                           args.copo.device holds the decision from here on
    ray.init      ray_init_kwargs: the worker hook (patches in every worker, no CUDA touched; which ones, by
                  estimator and flags: `runtime_patches.patches_for`), the actor
                  tokenizer's stop tokens for the reward, the CPU path's environment and local cluster
    train         run_training / end_run: a run that stops ends on one line naming what stopped it
                  (`failure.py`: which worker died, where the checkpoints are), then Ray shut down
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import contextvars
import inspect
import json
import sys
import traceback
from typing import Optional

from openrlhf_copo.contract import PATCHES_ENV, RAY_WORKER_SETUP_HOOK, ROLLOUT_SEED_ENV
from openrlhf_copo.openrlhf_ext import config, cpu, device, runtime_patches
from openrlhf_copo.openrlhf_ext.config import (CopoConfigError, check_resume_settings, copo_problems,
                                               copo_regime, copo_warnings, estimator_action, is_copo)
from openrlhf_copo.openrlhf_ext.failure import end_run
from openrlhf_copo.openrlhf_ext.preflight import PreflightError, preflight

__all__ = ["DriverError", "extend_openrlhf_parser", "after_parse", "apply_device", "decide_device", "ray_init_kwargs",
           "with_worker_hook", "run_training", "end_run", "run_openrlhf_main", "openrlhf_main_block"]


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


def after_parse(args, *, check_inputs: Optional[bool] = None, warn=None) -> None:
    """Steps 1-6 on the arguments as OpenRLHF will use them (where its main calls `train(args)`, after its own
    adjustments), once per args. Raises `DriverError`.

    ``check_inputs`` off skips the resume guard, the preflight and the device decision (`load_args`: nothing is
    read, written or asked of a cluster; args.copo.device stays as given); None (a fork's main): on, or left to the
    CLI's `train` when the CLI runs that main."""
    if any(done is args for done in _STEPS_RAN_ON):
        return
    if check_inputs is None:
        if _RUN_BY_CLI.get():
            return  # a fork's main run by the CLI: the CLI's `train` runs the steps right after this
        check_inputs = True
    _STEPS_RAN_ON.append(args)
    problems = copo_problems(args)
    if problems:
        raise DriverError(problems[0])
    regime = copo_regime(args)
    if regime:
        print(f"openrlhf_copo: {regime}", file=sys.stderr, flush=True)
    for warning in copo_warnings(args):
        (warn or _print_warning)(warning)
    try:  # in the driver: an unsupported openrlhf fails here, not in a worker
        runtime_patches.check_openrlhf()
        if is_copo(args):
            runtime_patches.apply()
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
                             slots=device.cluster_slots)
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
    # which run-time patches the workers install: all for COPO, for other estimators only what its flags ask for
    kwargs["runtime_env"].setdefault("env_vars", {})[PATCHES_ENV] = runtime_patches.patches_env(
        runtime_patches.patches_for(args))
    if args.copo.seeded_rollouts:
        kwargs["runtime_env"].setdefault("env_vars", {})[ROLLOUT_SEED_ENV] = str(args.train.seed)
    if args.copo.device == device.CPU:
        kwargs = cpu.ray_init_kwargs(args, kwargs)
    return kwargs


def run_training(train, args, prog: str) -> None:
    """OpenRLHF's `train(args)`; if it raises, the run ends on one line (`end_run`)."""
    try:
        train(args)
    except DriverError:
        raise  # a refusal (the CLI's `train`, running the steps for a fork's main), not a failed run
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


#: True while `run_openrlhf_main` runs a main: a fork's own call of `after_parse` (without ``check_inputs``) then
#: leaves the steps to the CLI's `train`, which runs them at the same place, with its own settings and its one-line
#: refusals.
_RUN_BY_CLI = contextvars.ContextVar("openrlhf_copo_run_by_cli", default=False)


def _is_main_test(node) -> bool:
    return (isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "__name__"
            and len(node.comparators) == 1 and getattr(node.comparators[0], "value", None) == "__main__")


def _is_parse_args(node) -> bool:
    return (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute) and node.value.func.attr == "parse_args")


def openrlhf_main_block(module):
    """OpenRLHF's `if __name__ == "__main__":` block of ``module`` (its train_ppo_ray, or a fork's), as two code
    objects to run in the module's namespace: up to its `args = parser.parse_args()` (builds `parser`), and from
    there to the end (parses, hierarchizes, applies OpenRLHF's own adjustments, calls `train(args)`). Compiled from
    the module's own source, with its file and line numbers, so tracebacks point at OpenRLHF's lines. Raises
    `DriverError` if that block no longer has this shape."""
    source = inspect.getsource(module)
    mains = [n for n in ast.parse(source).body if isinstance(n, ast.If) and _is_main_test(n.test)]
    splits = [i for i, n in enumerate(mains[0].body) if _is_parse_args(n)] if len(mains) == 1 else []
    if len(splits) != 1:
        raise DriverError(f"{module.__file__}: its `if __name__ == \"__main__\":` block has no single "
                          "`args = parser.parse_args()`; openrlhf_copo cannot run this OpenRLHF's main")
    body, i = mains[0].body, splits[0]

    def compiled(nodes):
        return compile(ast.Module(body=nodes, type_ignores=[]), module.__file__, "exec")

    return compiled(body[:i]), compiled(body[i:])


def run_openrlhf_main(argv, captured: dict, *, prog: str, stop_before_training: bool, warn=None) -> None:
    """OpenRLHF's own train_ppo_ray main on ``argv``, with the steps of this module where they belong: the parser
    step once OpenRLHF has built its parser; `after_parse` where its main calls `train(args)`, on the arguments as
    OpenRLHF will use them (after its own adjustments: an agent function's `remote_url = "agent"`, the split
    `remote_url`, a forced `packing_samples`, ...); `ray_init_kwargs` at the `ray.init` of its `train`.

    The main block runs in a copy of the module's namespace whose `train` is ours (`openrlhf_main_block`): nothing
    of argparse or Ray is replaced for the process; `ray.init` is wrapped only while OpenRLHF's `train` runs.
    ``captured`` receives the parser and, once `after_parse` passed, the args; with ``stop_before_training`` the run
    stops there (`StopBeforeTraining`, caught here)."""
    import importlib

    upstream = importlib.import_module(OPENRLHF_MAIN)
    build_parser, parse_and_train = openrlhf_main_block(upstream)
    namespace = dict(vars(upstream))
    exec(build_parser, namespace)
    parser = namespace["parser"]
    parser.prog = prog
    extend_openrlhf_parser(parser)
    captured["parser"] = parser

    def train(args):  # where OpenRLHF's main hands over its final args
        after_parse(args, check_inputs=not stop_before_training, warn=warn)
        captured["args"] = args
        if stop_before_training:
            raise StopBeforeTraining()
        with _ray_init_with_copo(args):
            upstream.train(args)

    namespace["train"] = train
    token = _RUN_BY_CLI.set(True)
    saved_argv = sys.argv
    sys.argv = [prog, *argv]
    try:
        exec(parse_and_train, namespace)
    except StopBeforeTraining:
        pass
    except AssertionError as e:
        if "args" in captured:
            raise  # from inside training: the run's own failure
        raise DriverError(_openrlhf_refusal(e, namespace.get("args"), upstream.__file__)) from None
    finally:
        sys.argv = saved_argv
        _RUN_BY_CLI.reset(token)
    if "args" not in captured:
        raise DriverError(f"{upstream.__file__}: its main returned without calling train(args)")


def _openrlhf_refusal(error: AssertionError, args, main_file: str) -> str:
    """One line for an `assert` of OpenRLHF's main that refused the arguments before `train(args)`: COPO's own
    refusal of the same arguments when there is one (it names the flag to change; OpenRLHF's assert may follow from
    it, e.g. one sample per prompt), else OpenRLHF's message with its line."""
    problems = copo_problems(args) if hasattr(args, "copo") else []
    if problems:
        return problems[0]
    line = next((f.lineno for f in reversed(traceback.extract_tb(error.__traceback__)) if f.filename == main_file), "?")
    return f"OpenRLHF's train_ppo_ray refused the arguments ({main_file}:{line}): {error or 'assertion failed'}"


#: OpenRLHF's train_ppo_ray module: its main block is run by `run_openrlhf_main`.
OPENRLHF_MAIN = "openrlhf.cli.train_ppo_ray"


@contextlib.contextmanager
def _ray_init_with_copo(args):
    """While OpenRLHF's `train(args)` runs: its `ray.init` gets `ray_init_kwargs` (unless a fork's own code already
    added them, as its patch does: our worker hook is then in its runtime env)."""
    import ray

    original_init = ray.init

    def init(*a, **kwargs):
        hook = (kwargs.get("runtime_env") or {}).get("worker_process_setup_hook")
        return original_init(*a, **(kwargs if hook == RAY_WORKER_SETUP_HOOK else ray_init_kwargs(args, kwargs)))

    ray.init = init
    try:
        yield
    finally:
        ray.init = original_init
