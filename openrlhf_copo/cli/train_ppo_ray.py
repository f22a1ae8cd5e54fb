"""`python -m openrlhf_copo.cli.train_ppo_ray`: OpenRLHF's train_ppo_ray, with COPO.

Runs OpenRLHF's own `openrlhf.cli.train_ppo_ray` main (its parser lives under
`if __name__ == "__main__"`, so it is run, not imported) with four hooks:

- its parser gains the COPO estimators, the `--advantage_estimator` alias and the `--copo.*` flags;
- the parsed args are checked: a setting that breaks COPO stops the run with a one-line reason;
- `ray.init` gets our `worker_process_setup_hook`, so every Ray worker applies the COPO patches;
- without a CUDA device it takes the CPU path (`openrlhf_copo.openrlhf_ext.cpu`), after refusing
  with a one-line reason the settings that cannot work there.

Every other flag keeps OpenRLHF's meaning.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import runpy
import sys
import traceback
from typing import List, Optional

OPENRLHF_MAIN = "openrlhf.cli.train_ppo_ray"
PROG = "python -m openrlhf_copo.cli.train_ppo_ray"


class _StopBeforeTraining(Exception):
    pass


def _fail(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


@contextlib.contextmanager
def _openrlhf_hooks(captured: dict, stop_before_training: bool):
    import ray

    import openrlhf.utils.config as orl_config
    from openrlhf_copo.openrlhf_ext import cpu, patches
    from openrlhf_copo.openrlhf_ext.preflight import PreflightError, preflight
    from openrlhf_copo.openrlhf_ext.config import (CopoConfigError, check_resume_settings, copo_problems,
                                                   copo_warnings, estimator_action, extend_openrlhf_parser, is_copo)

    original_parse_args = argparse.ArgumentParser.parse_args
    original_hierarchize = orl_config.hierarchize
    original_init = ray.init
    original_is_initialized = ray.is_initialized

    def parse_args(self, args=None, namespace=None):
        if "parser" not in captured and estimator_action(self) is not None:
            self.prog = PROG
            extend_openrlhf_parser(self)
            captured["parser"] = self
        return original_parse_args(self, args, namespace)

    def hierarchize(flat):
        nested = original_hierarchize(flat)
        if "parser" in captured and "args" not in captured:
            captured["args"] = nested
            problems = copo_problems(nested)
            if problems:
                _fail(problems[0])
            for warning in copo_warnings(nested):
                print(f"{PROG}: warning: {warning}", file=sys.stderr)
            if is_copo(nested):
                try:
                    patches.apply()  # in the driver too; fails early on an unsupported openrlhf
                except patches.OpenRLHFVersionError as e:
                    _fail(str(e))
            if not stop_before_training:
                try:
                    check_resume_settings(nested)
                    preflight(nested)
                except (CopoConfigError, PreflightError) as e:
                    _fail(str(e))
            if not stop_before_training and not cpu.cuda_available():
                problems = cpu.cpu_problems(nested)
                if problems:
                    _fail(f"no CUDA device, so this runs on the CPU path, where {problems[0]}")
                captured["cpu"] = True
                cpu.apply()
        return nested

    def init(*args, **kwargs):
        try:
            kwargs["runtime_env"] = patches.with_worker_hook(kwargs.get("runtime_env"))
        except RuntimeError as e:
            _fail(str(e))
        _add_stop_tokens(kwargs["runtime_env"], captured.get("args"))
        if captured.get("cpu"):
            kwargs = cpu.ray_init_kwargs(captured["args"], kwargs)
        return original_init(*args, **kwargs)

    def is_initialized():
        if stop_before_training and "args" in captured:
            raise _StopBeforeTraining()  # train(args) starts here
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
        print(f"openrlhf_copo: could not read the stop tokens of {model}'s tokenizer ({type(e).__name__}); the "
              "reward cuts responses at the common chat templates' end-of-turn tokens only", file=sys.stderr)


def _run(argv: List[str], stop_before_training: bool) -> dict:
    from openrlhf_copo.openrlhf_ext import cpu

    if not stop_before_training and not cpu.cuda_available():
        cpu.prepare_driver()
    captured: dict = {}
    saved_argv = sys.argv
    sys.argv = [PROG] + list(argv)
    try:
        with _openrlhf_hooks(captured, stop_before_training):
            runpy.run_module(OPENRLHF_MAIN, run_name="__main__", alter_sys=False)
    except _StopBeforeTraining:
        pass
    except Exception as e:  # a dead Ray worker, an out-of-memory, ...: keep the traceback, end on one line
        if stop_before_training:
            raise
        traceback.print_exc()
        _stop_ray()  # so that Ray's log forwarding does not print after the last line
        _fail(_failure_line(e, captured.get("args")))
    finally:
        sys.argv = saved_argv
    return captured


def _stop_ray() -> None:
    try:
        import ray

        if ray.is_initialized():
            ray.shutdown()
    except Exception:
        pass  # the message below matters more than a clean shutdown


def _failure_line(error: BaseException, args) -> str:
    # An error raised inside a Ray actor (the PPO controller's advantage step, say) comes back as a
    # RayTaskError whose first line is Ray's "ray::PPOTrainer.fit() (pid=...)": name the original.
    cause = getattr(error, "cause", None)
    if isinstance(cause, BaseException):
        error = cause
    first = (str(error).strip().splitlines() or [""])[0][:300]
    line = f"training stopped: {type(error).__name__}: {first}"
    if args is not None and (args.ckpt.save_steps or -1) > 0:
        line += (f"; checkpoints under {args.ckpt.path} are as last saved: rerun the same command with "
                 "--ckpt.load_enable to resume")
    return line


def load_args(argv: List[str]):
    """The validated, hierarchized args that `train(args)` would receive, without training (the CPU
    path's checks and adaptations are left out: they depend on the machine, not on the command line).

    Runs OpenRLHF's parser and its post-parse checks with the COPO hooks, then stops where
    `train(args)` begins. Used by tests and the example-script check.
    """
    return _run(argv, stop_before_training=True)["args"]


def wants_embedded_default(argv: List[str]) -> bool:
    """No model given (and no --help): the user asks for the embedded default job."""
    return not any(a in ("-h", "--help") for a in argv) and not any(
        a == "--actor.model_name_or_path" or a.startswith("--actor.model_name_or_path=") for a in argv)


def main(argv: Optional[List[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if wants_embedded_default(argv):
        from openrlhf_copo.embedded import job
        from openrlhf_copo.openrlhf_ext import cpu

        raise SystemExit(job.refuse_on_gpu() if cpu.cuda_available() else job.run(argv))
    _run(argv, stop_before_training=False)


if __name__ == "__main__":
    main()
