"""The driver's part of a COPO run: the steps on OpenRLHF's final arguments, Ray's start, the one-line ending.

Three entry points, each a straight line (`after_parse` says which steps each runs):

    CLI main      cli/train_ppo_ray.py `main`:  openrlhf_args -> after_parse(args, CLI) -> the device decision ->
                  run_training(openrlhf_train, args, prog, decision): Ray started with `ray_init_kwargs` over
                  OpenRLHF's own settings (`openrlhf_ray_init_kwargs`; OpenRLHF's `train` then skips its own
                  `ray.init`), then its `train`
    load_args     cli/train_ppo_ray.py `load_args`:  openrlhf_args -> after_parse(args, LOAD_ARGS) -> the args;
                  nothing is read, written, patched, asked of a cluster or trained
    a fork        patches/train_ppo_ray.patch, in the fork's own main: extend_openrlhf_parser(parser) before its
                  parse_args, then, in place of its `train(args)`, train_from_fork(train, args, parser) ->
                  after_parse(args, FORK) -> run_training(train, args, prog, decision): Ray started as for the CLI,
                  so the fork's `train` skips its own `ray.init`

How the CLI gets OpenRLHF's arguments (`openrlhf_args`). OpenRLHF builds its parser and adjusts the arguments in
statements under `if __name__ == "__main__":`, not in a function to call. So its main block is run, compiled from its
own source, in two halves split at its `args = parser.parse_args()`: the first half builds `parser`, COPO's flags are
added to it, and the second half parses, adjusts and calls `train(args)`, where `train` is an `ArgsRecorder` that keeps
the args and returns. The CLI's arguments are exactly those OpenRLHF would train on, and nothing trains.

How a fork hands its arguments back (the `isinstance(train, ArgsRecorder)` in `train_from_fork`). A fork carrying
patches/ calls `train_from_fork(train, args, parser)` in place of its `train(args)`, and that line is reached two
ways: the fork's main run as a program (`python -m openrlhf.cli.train_ppo_ray`), where `train` is the fork's own;
and the CLI reading the fork's arguments (`python -m openrlhf_copo.cli.train_ppo_ray` over a fork, `load_args`),
where `openrlhf_args` runs the fork's main block as it runs OpenRLHF's and `train` is the CLI's recorder. The patch
is the same source both ways, so `train_from_fork` tells them apart by what it is handed: the recorder gets the args
and no step runs (the CLI's entry point runs its own steps, once); the fork's own `train` gets the FORK steps, then
the training.

The steps (`after_parse`), in order, each named for what it does; load_args runs the first three (the argument
checks):

    refuse_bad_arguments            every one of copo_problems, in one message (one line each), with what the device
                                    would refuse (device_problems) for a run: the run does not start
    print_regime_and_warnings       the regime line, then copo_warnings: printed, the run goes on
    check_openrlhf_version_and_symbols
                                    the openrlhf version, and every OpenRLHF function a patch replaces (signatures
                                    read, nothing patched): an unsupported openrlhf fails here, not in a worker
    ---- load_args stops here: each step below reads files, writes, patches this process or asks a cluster ----
    check_vllm_symbols              every vLLM function the patches and the evaluation call (`versions.VLLM_SYMBOLS`;
                                    the CPU path's own are checked where it installs): a vLLM that lacks one fails
                                    here, in one line naming it
    patch_openrlhf_in_this_process  COPO estimators only: patches 1-3 into this process's OpenRLHF classes
                                    (`runtime_patches.apply`; the workers get theirs from the worker hook)
    decide_device                   --copo.device (`device.py`): CUDA or the CPU path, decided where the actors will
                                    run (a cluster to join is asked from a child process), said in one line; refuses
                                    every setting that device cannot run (`cpu.py`), in one message; returns the
                                    decision, which the steps after it and Ray's start are handed
    install_cpu_path                the CPU path only: its environment set in this process's os.environ, which Ray and
                                    every worker inherit (`cpu.prepare_driver`), then its patches installed in this
                                    process (`cpu.install`, after checking the symbols they replace)
    start_ray_to_join_the_cluster   a cluster to join only: Ray started now with the run's `ray.init` arguments (the
                                    next step runs on the cluster's nodes; OpenRLHF's `train` finds Ray up). With a
                                    cluster of its own, Ray starts with the training (`run_training`)
    guard_resume_write_settings_and_preflight
                                    where the actors run, said in one line: the resume guard (a checkpoint resumes
                                    with the COPO settings it was saved with; a half-written `_actor` is moved aside;
                                    it WRITES copo_settings.json next to the checkpoints when it does not resume from
                                    one) and the preflight (model folder, data files, rows, labels). Here when the run
                                    has a cluster of its own; on a cluster to join, in a task on each node with GPU
                                    slots (`actor_nodes.py`)

Then `run_training`: Ray started with `ray_init_kwargs` unless it is up (the worker hook: patches in every worker,
no CUDA touched, which ones by estimator and flags, `runtime_patches.patches_for`; the actor tokenizer's stop tokens
for the reward; on the CPU path, as the decision says, its environment and local cluster), then the training; a run
that stops ends on one line naming what stopped it (`failure.py`: which worker died, where the checkpoints are), then
Ray is shut down.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import json
import os
import sys
import traceback
from typing import List, Optional

from openrlhf_copo.contract import PATCHES_ENV, RAY_WORKER_SETUP_HOOK, ROLLOUT_SEED_ENV
from openrlhf_copo.openrlhf_ext import actor_nodes, config, cpu, device, runtime_patches
from openrlhf_copo.openrlhf_ext.config import (CopoConfigError, check_resume_settings, copo_problems,
                                               copo_regime, copo_warnings, is_copo)
from openrlhf_copo.files import write_atomic
from openrlhf_copo.openrlhf_ext.failure import end_run, stop_ray
from openrlhf_copo.openrlhf_ext.preflight import PreflightError, preflight
from openrlhf_copo.openrlhf_ext.runtime_patches import versions
from openrlhf_copo.openrlhf_ext.probe_step import finished_record

__all__ = ["DriverError", "CLI", "LOAD_ARGS", "FORK", "after_parse", "refusal_message",
           "extend_openrlhf_parser", "refuse_bad_arguments", "print_regime_and_warnings",
           "check_openrlhf_version_and_symbols", "check_vllm_symbols", "patch_openrlhf_in_this_process",
           "decide_device", "install_cpu_path", "start_ray_to_join_the_cluster",
           "guard_resume_write_settings_and_preflight", "ray_init_kwargs", "start_ray", "openrlhf_ray_init_kwargs",
           "openrlhf_train", "train_from_fork", "run_training", "with_worker_hook", "end_run", "openrlhf_args",
           "openrlhf_main_block", "unknown_flags", "ArgsRecorder"]

#: The entry points (`after_parse`).
CLI, LOAD_ARGS, FORK = "cli", "load_args", "fork"


class DriverError(ValueError):
    """Why the run cannot start: one line per refusal (`refusal_message`; the CLI prints it, a fork hands it to
    `parser.error`)."""


def extend_openrlhf_parser(parser: argparse.ArgumentParser) -> None:
    """The parser step: COPO's estimators, the `--advantage_estimator` alias and the `--copo.*` flags
    (`config`), and `--ds.param_dtype fp32` for the CPU path (`cpu`). Idempotent."""
    config.extend_openrlhf_parser(parser)
    cpu.extend_parser(parser)


def refusal_message(problems: List[str]) -> str:
    """Every refusal of ``problems`` in one message, so that a user fixes them all before the next try: one alone is
    its own line; several are counted, then listed one a line."""
    if len(problems) == 1:
        return problems[0]
    return f"{len(problems)} settings are refused:\n" + "\n".join(f"  - {problem}" for problem in problems)


# ---------------------------------------------------------------------------------------------
# The steps of `after_parse`, in the order it runs them; each raises `DriverError` for a run that cannot start.


def refuse_bad_arguments(args, run: bool = False) -> None:
    """Every one of COPO's refusals of these arguments (`config.copo_problems`), in one message
    (`refusal_message`): the run does not start. For a ``run`` (not `LOAD_ARGS`), the message also holds what the
    device the run would get cannot run (`device_problems`), so that one try names every setting to fix; without
    a COPO refusal, those are `decide_device`'s to say, after the checks between the two."""
    problems = copo_problems(args)
    if problems and run:
        problems += device_problems(args)
    if problems:
        raise DriverError(refusal_message(problems))


def device_problems(args) -> List[str]:
    """What the device `decide_device` would choose cannot run, each naming that device (or why none could be
    chosen), without printing the decision: for the one message of `refuse_bad_arguments`."""
    try:
        decision = _device_decision(args)
    except device.DeviceError as e:
        return [str(e)]
    where = "the CPU path" if decision.cpu_path else "CUDA"
    return [f"{problem} (the actors would run on {where}: {decision.reason})"
            for problem in _device_refusals(args, decision)]


def _device_decision(args) -> device.DeviceDecision:
    """`--copo.device`, with `auto` asked of the cluster the run joins (`device.decide`)."""
    return device.decide(args.copo.device, address=device.cluster_address(), local_cuda=device.cuda_available,
                         slots=device.cluster_slots)


def _device_refusals(args, decision: device.DeviceDecision) -> List[str]:
    """The settings of ``args`` that the device of ``decision`` cannot run (`cpu.cpu_problems`, `cpu.gpu_problems`)."""
    return cpu.cpu_problems(args) if decision.cpu_path else cpu.gpu_problems(args)


def print_regime_and_warnings(args, warn) -> None:
    """The regime line (`config.copo_regime`), then each of `config.copo_warnings`: the run goes on."""
    regime = copo_regime(args)
    if regime:
        print(f"openrlhf_copo: {regime}", file=sys.stderr, flush=True)
    for warning in copo_warnings(args):
        warn(warning)


def check_openrlhf_version_and_symbols() -> None:
    """The installed openrlhf is a supported version, and every function a patch replaces is where the patches
    expect it, with its parameters (`versions.check_openrlhf`: signatures read, nothing patched)."""
    try:
        runtime_patches.check_openrlhf()
    except runtime_patches.OpenRLHFVersionError as e:
        raise DriverError(str(e)) from None


def check_vllm_symbols() -> None:
    """Every vLLM function the patches and the evaluation call is there, with its parameters (`versions.check_vllm`;
    the CPU path's own are checked by `cpu.install`, so a CUDA driver does not import vLLM's CPU worker code)."""
    try:
        versions.check_vllm()
    except versions.VllmVersionError as e:
        raise DriverError(str(e)) from None


def patch_openrlhf_in_this_process(args) -> None:
    """For COPO's estimators, patches 1-3 into this process's OpenRLHF classes (`runtime_patches.apply`), as every
    Ray worker gets them from the worker hook: a patch that no longer fits fails here, before Ray starts."""
    if is_copo(args):
        runtime_patches.apply()


def decide_device(args) -> device.DeviceDecision:
    """The device the actors run on, CUDA or the CPU path: `--copo.device`, with `auto` asked of the cluster the run
    joins (`device.decide`), said in one line. Refuses every setting that device cannot run (`cpu.cpu_problems`,
    `cpu.gpu_problems`) in one message; else returns the decision, which `after_parse` hands to the steps after this
    one and `run_training` to Ray's start (``args.copo.device`` stays the flag as given)."""
    try:
        decision = _device_decision(args)
    except device.DeviceError as e:
        raise DriverError(str(e)) from None
    print(decision.line(), file=sys.stderr, flush=True)
    problems = _device_refusals(args, decision)
    if problems:
        where = "the CPU path" if decision.cpu_path else "CUDA"
        raise DriverError(f"the actors run on {where} ({decision.reason}), where {refusal_message(problems)}")
    return decision


def install_cpu_path(decision: device.DeviceDecision) -> None:
    """On the CPU path only (as ``decision`` says): its environment set in this process's `os.environ`, where Ray
    and every worker inherit it (`cpu.prepare_driver`: the CPU switch, loopback addresses, thread counts), then its
    patches installed in this process (`cpu.install`: torch's device calls, vLLM's weight loading, fp32). On CUDA,
    nothing of it is set or installed."""
    if decision.cpu_path:
        cpu.prepare_driver()
        cpu.install()


def start_ray_to_join_the_cluster(args, decision: device.DeviceDecision) -> None:
    """On a cluster to join only (`device.cluster_address`): Ray started now, with the run's `ray.init` arguments
    (`start_ray`), so that the resume guard and the preflight can run on the nodes where the actors will
    (`guard_resume_write_settings_and_preflight`); OpenRLHF's `train` then finds Ray up. A run with a cluster of its
    own starts Ray with the training (`run_training`)."""
    if device.cluster_address() is not None:
        start_ray(args, decision)


def guard_resume_write_settings_and_preflight(args) -> None:
    """The steps that read and write the disks where the actors run, said in one line: the resume guard, which
    writes copo_settings.json (`guard_resume_and_write_settings`), and the preflight, which reads
    (`preflight_model_and_data`). Here when the run has a cluster of its own (the actors run on this machine); on a
    cluster to join (which `start_ray_to_join_the_cluster` joined), in a Ray task on each node with GPU slots
    (`actor_nodes.guard_resume_and_preflight_on_cluster`)."""
    address = device.cluster_address()
    if address is None:
        guard_resume_and_write_settings(args)
        preflight_model_and_data(args)
        print("openrlhf_copo: the resume guard and the preflight ran on this machine, where the actors run (no Ray "
              "cluster to join)", file=sys.stderr, flush=True)
        return
    try:
        actor_nodes.guard_resume_and_preflight_on_cluster(args, address)
    except actor_nodes.DiskCheckError as e:
        raise DriverError(str(e)) from None


def guard_resume_and_write_settings(args) -> None:
    """The resume guard on this machine's disk (`config.check_resume_settings`), for a run that saves or loads
    checkpoints: a checkpoint resumes with the COPO settings it was saved with (else refused); an `_actor` left
    half-written by a killed run is moved aside (`_actor.incomplete-<time>`) and the run starts from step 0;
    copo_settings.json is written next to the checkpoints unless the run resumes from one that has it."""
    try:
        check_resume_settings(args)
    except CopoConfigError as e:
        raise DriverError(str(e)) from None


def preflight_model_and_data(args) -> None:
    """The preflight on this machine's disk (`preflight.preflight`): the model folder, the data files, their rows
    and labels. Reads only."""
    try:
        preflight(args)
    except PreflightError as e:
        raise DriverError(str(e)) from None


def after_parse(args, entry: str, *, warn=None) -> Optional[device.DeviceDecision]:
    """The steps of ``entry`` (`CLI`, `FORK` or `LOAD_ARGS`), in order, on the arguments as OpenRLHF will use them
    (where its main calls `train(args)`, after its own adjustments). Raises `DriverError` at the first step that
    refuses. Returns the device decision (`decide_device`), for `run_training`; None for `LOAD_ARGS`, which runs the
    argument checks alone: they read no file, write nothing, ask no cluster and patch nothing (the openrlhf check
    imports OpenRLHF's modules to read their signatures)."""
    if entry not in (CLI, FORK, LOAD_ARGS):
        raise ValueError(f"after_parse: entry {entry!r} is none of {CLI!r}, {FORK!r}, {LOAD_ARGS!r}")
    refuse_bad_arguments(args, run=entry != LOAD_ARGS)
    print_regime_and_warnings(args, warn or _print_warning)
    check_openrlhf_version_and_symbols()
    if entry == LOAD_ARGS:
        return None
    # a run: each step from here reads files, writes, patches this process or asks a cluster
    check_vllm_symbols()
    patch_openrlhf_in_this_process(args)
    decision = decide_device(args)
    install_cpu_path(decision)
    start_ray_to_join_the_cluster(args, decision)
    guard_resume_write_settings_and_preflight(args)
    return decision


def ray_init_kwargs(args, kwargs: dict, decision: device.DeviceDecision) -> dict:
    """OpenRLHF's `ray.init` arguments plus COPO's: the worker hook, the stop tokens, and on the CPU path (as
    ``decision`` says: `decide_device`) its environment and local cluster."""
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
    if decision.cpu_path:
        kwargs = cpu.ray_init_kwargs(args, kwargs)
    return kwargs


def openrlhf_ray_init_kwargs() -> dict:
    """OpenRLHF 0.11.2's own `ray.init` arguments (the top of its `train`), a value set in the environment winning
    as there: the driver starts Ray with these plus COPO's (`start_ray`)."""
    return {"runtime_env": {"env_vars": {
        "TOKENIZERS_PARALLELISM": os.environ.get("TOKENIZERS_PARALLELISM", "true"),
        "NCCL_DEBUG": os.environ.get("NCCL_DEBUG", "WARN"),
        "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS": os.environ.get("RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", "1"),
    }}}


def start_ray(args, decision: device.DeviceDecision) -> None:
    """Ray started with COPO's settings over OpenRLHF's own (`ray_init_kwargs`), unless it is up in this process
    already (then it is used as it is, as OpenRLHF does). OpenRLHF's `train` (or a fork's) then skips its own
    `ray.init`."""
    import ray

    if not ray.is_initialized():
        ray.init(**ray_init_kwargs(args, openrlhf_ray_init_kwargs(), decision))


def openrlhf_train(args) -> None:
    """The CLI's training: OpenRLHF's `train(args)` (Ray is up: `run_training` started it)."""
    importlib.import_module(OPENRLHF_MAIN).train(args)


def train_from_fork(train, args, parser: argparse.ArgumentParser) -> None:
    """A fork's entry point, in place of its main's `train(args)` (patches/train_ppo_ray.patch): the fork's steps
    (`after_parse(args, FORK)`), a refusal as `parser.error`, then Ray's start and ``train(args)`` (`run_training`),
    ending on one line if it stops.

    Handed the CLI's `ArgsRecorder` instead of the fork's `train` (the CLI reading this fork's arguments with
    `openrlhf_args`: the module docstring says why that is how the two are told apart), it hands the recorder the
    args and runs no step: the CLI's entry point runs its own steps, once."""
    if isinstance(train, ArgsRecorder):  # the CLI is reading this fork's arguments: hand them back, nothing else
        train(args)
        return
    try:
        decision = after_parse(args, FORK)
    except DriverError as e:
        parser.error(str(e))
    run_training(train, args, parser.prog, decision)


def run_training(train, args, prog: str, decision: device.DeviceDecision) -> None:
    """Ray started with COPO's settings for ``decision`` (`start_ray`; up already on a cluster to join), then
    ``train(args)``; if either raises, the run ends on one line (`end_run`), except a probe's (`--copo.probe`), whose
    advantage step stops the run on purpose once it has measured the first rollout batch: its record is written to
    the probe file, Ray is shut down, and the run ends as a success."""
    try:
        start_ray(args, decision)
        train(args)
    except Exception as e:  # a dead Ray worker, an out-of-memory, ...: the traceback, then one line
        record = finished_record(e) if getattr(args.copo, "probe", None) else None
        if record is None:
            end_run(e, args, prog)
        write_atomic(args.copo.probe, json.dumps(record))
        stop_ray()
        print(f"openrlhf_copo: probe: the first rollout batch ({len(record['groups'])} prompts x "
              f"{record['G']}) measured and written to {args.copo.probe}; stopped before any training step",
              file=sys.stderr, flush=True)


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


#: OpenRLHF's train_ppo_ray module (or a fork's, if that is the openrlhf installed): `openrlhf_args` runs its main
#: block, `openrlhf_train` its `train`.
OPENRLHF_MAIN = "openrlhf.cli.train_ppo_ray"


class ArgsRecorder:
    """The `train` that `openrlhf_args` puts in OpenRLHF's main block: it keeps the args it is handed and returns.
    `train(args)` is the block's last statement, so the block then ends, and nothing has trained. A fork's block
    hands it the args through `train_from_fork`, which knows it by its class."""

    def __init__(self):
        self.calls = []

    def __call__(self, args) -> None:
        self.calls.append(args)


def openrlhf_args(argv, prog: str):
    """The arguments OpenRLHF's train_ppo_ray main hands to `train(args)` for ``argv``, after all its own adjustments
    (an agent function's `remote_url = "agent"`, the split `remote_url`, a forced `packing_samples`, ...), parsed by
    its parser with COPO's flags (`extend_openrlhf_parser`). An `assert` of that main that refuses the arguments
    raises `DriverError` (one line); a bad flag or `--help` exits as argparse does.

    Why OpenRLHF's main block is run: OpenRLHF builds its parser and adjusts the arguments in statements under
    `if __name__ == "__main__":`, not in a function to call, and a copy of those ~570 lines would drift from the
    installed openrlhf. The block runs compiled from its own source (`openrlhf_main_block`: its file and lines in
    tracebacks) in a copy of the module's namespace, in one mode: its first part builds `parser`, COPO's flags are
    added (and abbreviated flags refused: `_main_block_namespace`), and its second part parses, adjusts and calls
    `train(args)`, which here is an `ArgsRecorder`. So nothing trains, no exception stops the block, and nothing of
    argparse or Ray is replaced for the process. A fork's block (patches/) runs the same way: its `train_from_fork`
    hands the recorder the args."""
    upstream, namespace, parse_and_train = _main_block_namespace(prog)
    recorder = namespace["train"] = ArgsRecorder()
    saved_argv, sys.argv = sys.argv, [prog, *argv]
    try:
        exec(parse_and_train, namespace)
    except AssertionError as e:
        raise DriverError(_openrlhf_refusal(e, namespace.get("args"), upstream.__file__)) from None
    finally:
        sys.argv = saved_argv
    if len(recorder.calls) != 1:
        raise DriverError(f"{upstream.__file__}: its main called train(args) {len(recorder.calls)} times, not once; "
                          "openrlhf_copo cannot run this OpenRLHF's main")
    return recorder.calls[0]


def _main_block_namespace(prog: str):
    """OpenRLHF's main module, a copy of its namespace in which the first part of its main block has built `parser`
    (COPO's flags added, abbreviated flags refused), and the second part of that block, to run there."""
    upstream, namespace, parse_and_train = openrlhf_parser_namespace()
    parser = namespace["parser"]
    parser.prog = prog
    # Whole flags only: argparse would take `--actor.model_name_or_pat` for `--actor.model_name_or_path`, while what
    # reads the command line as written (the CPU demo's "no model given", the example scripts' paths) would not.
    parser.allow_abbrev = False
    return upstream, namespace, parse_and_train


def openrlhf_parser_namespace():
    """OpenRLHF's main module, a copy of its namespace in which the first part of its main block has built `parser`
    with COPO's flags (`extend_openrlhf_parser`), and the second part of that block, to run there. Shared by
    `_main_block_namespace` and `compare`, which reads a command line with that parser and runs nothing."""
    upstream = importlib.import_module(OPENRLHF_MAIN)
    build_parser, parse_and_train = openrlhf_main_block(upstream)
    namespace = dict(vars(upstream))
    exec(build_parser, namespace)
    extend_openrlhf_parser(namespace["parser"])
    return upstream, namespace, parse_and_train


def unknown_flags(argv, prog: str) -> list:
    """The flags of ``argv`` (as written, without a value) that the CLI's parser does not know, an abbreviation of a
    flag included; argparse's own error for a bad value or `--help` exits as it does."""
    _, namespace, _ = _main_block_namespace(prog)
    _, unknown = namespace["parser"].parse_known_args(argv)
    return [a.split("=", 1)[0] for a in unknown if a.startswith("--")]


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


def _is_main_test(node) -> bool:
    return (isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "__name__"
            and len(node.comparators) == 1 and getattr(node.comparators[0], "value", None) == "__main__")


def _is_parse_args(node) -> bool:
    return (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute) and node.value.func.attr == "parse_args")


def _openrlhf_refusal(error: AssertionError, args, main_file: str) -> str:
    """The message for an `assert` of OpenRLHF's main that refused the arguments before `train(args)`: COPO's own
    refusals of the same arguments when there are any (each names the flag to change; OpenRLHF's assert may follow
    from one, e.g. one sample per prompt), else OpenRLHF's message with its line."""
    problems = copo_problems(args) if hasattr(args, "copo") else []
    if problems:
        return refusal_message(problems)
    line = next((f.lineno for f in reversed(traceback.extract_tb(error.__traceback__)) if f.filename == main_file), "?")
    return f"OpenRLHF's train_ppo_ray refused the arguments ({main_file}:{line}): {error or 'assertion failed'}"
