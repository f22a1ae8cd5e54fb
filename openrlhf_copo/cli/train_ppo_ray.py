"""`python -m openrlhf_copo.cli.train_ppo_ray`: OpenRLHF's train_ppo_ray, with COPO.

argv -> OpenRLHF's own `openrlhf.cli.train_ppo_ray` main (its parser lives under `if __name__ ==
"__main__"`, so it is run, not imported), with the driver steps of `openrlhf_copo.openrlhf_ext.driver`
(the COPO flags, refusals, resume guard, preflight, worker hook, CPU path; a fork carrying patches/
runs the same steps). With no model given it runs the embedded CPU demo instead. Every other flag keeps
OpenRLHF's meaning; whatever stops the run ends on one line.
"""

from __future__ import annotations

import re
import runpy
import sys
import traceback
from typing import List, Optional

OPENRLHF_MAIN = "openrlhf.cli.train_ppo_ray"
PROG = "python -m openrlhf_copo.cli.train_ppo_ray"


def _fail(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _warn(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr)


def _run(argv: List[str], stop_before_training: bool) -> dict:
    """OpenRLHF's own main, with the driver steps of `openrlhf_copo.openrlhf_ext.driver`."""
    from openrlhf_copo.openrlhf_ext import cpu, driver

    cpu_path = not stop_before_training and not cpu.cuda_available()
    if cpu_path:
        cpu.prepare_driver()  # before Ray is imported: it reads its cluster switch then
    captured: dict = {}
    saved_argv = sys.argv
    sys.argv = [PROG] + list(argv)
    try:
        with driver.openrlhf_main_hooks(captured, stop_before_training=stop_before_training, cpu_path=cpu_path,
                                        prog=PROG, warn=_warn):
            runpy.run_module(OPENRLHF_MAIN, run_name="__main__", alter_sys=False)
    except driver.StopBeforeTraining:
        pass
    except driver.DriverError as e:
        _fail(str(e))
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


def _actor_death(error: BaseException) -> Optional[str]:
    """Which worker died and why, from Ray's ActorDiedError text ("class_name: ...", "pid: ...", "The actor is
    dead because ..."): on a cluster the first line alone ("The actor died unexpectedly") names nothing."""
    text = str(error)
    fields = dict(re.findall(r"^\s*(class_name|pid): (\S+)", text, re.MULTILINE))
    if "class_name" not in fields:
        return None
    why = re.search(r"The actor is dead because ([^.]*)", text)
    return f"{fields['class_name']} (pid {fields.get('pid', '?')}) died" + (f": {why.group(1)}" if why else "")


def _failure_line(error: BaseException, args) -> str:
    # An error raised inside a Ray actor (the PPO controller's advantage step, say) comes back as a
    # RayTaskError whose first line is Ray's "ray::PPOTrainer.fit() (pid=...)": name the original.
    cause = getattr(error, "cause", None)
    if isinstance(cause, BaseException):
        error = cause
    first = _actor_death(error) or (str(error).strip().splitlines() or [""])[0][:300]
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
