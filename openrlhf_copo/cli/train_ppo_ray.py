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
import time
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
        _fail(_stop_on_failure(e, captured.get("args")))
    finally:
        sys.argv = saved_argv
    return captured


def _stop_on_failure(error: BaseException, args) -> str:
    """The one line saying what stopped training, then Ray shut down (so that its log forwarding does not print
    after that line). In this order: naming a worker that died asks Ray's actor table."""
    line = _failure_line(error, args)
    _stop_ray()
    return line


def _stop_ray() -> None:
    try:
        import ray

        if ray.is_initialized():
            ray.shutdown()
    except Exception:
        pass  # the message below matters more than a clean shutdown


# Why a worker died, as Ray words it in an ActorDiedError and in its actor table ("The actor is dead because
# its worker process has died. Worker exit type: ...").
_DEATH_REASON = re.compile(r"The actor is dead because ([^.]*)")
# What the surviving ranks of a collective raise when a peer is gone: gloo's "Connection closed by peer",
# NCCL's DistBackendError, a broken socket.
_PEER_LOST = re.compile(r"connection (?:closed|reset) by peer|broken pipe|gloo|nccl|DistBackendError", re.IGNORECASE)
DEAD_WORKER_WAIT_S = 10.0


def _death_line(class_name: str, pid, message: str) -> str:
    why = _DEATH_REASON.search(message)
    class_name = class_name.rsplit(".", 1)[-1]  # the actor table holds the qualified name
    return f"{class_name} (pid {pid}) died" + (f": {why.group(1)}" if why else "")


def _actor_death(error: BaseException) -> Optional[str]:
    """Which worker died and why, from Ray's ActorDiedError text ("class_name: ...", "pid: ...", "The actor is
    dead because ..."): on a cluster the first line alone ("The actor died unexpectedly") names nothing."""
    fields = dict(re.findall(r"^\s*(class_name|pid): (\S+)", str(error), re.MULTILINE))
    if "class_name" not in fields:
        return None
    return _death_line(fields["class_name"], fields.get("pid", "?"), str(error))


def _dead_worker(error: BaseException) -> Optional[str]:
    """A worker of this job that died on its own (crash, SIGKILL, OOM, lost node; not `ray.kill`), from Ray's
    actor table, which needs no dashboard.

    Why: when one DeepSpeed rank dies, the other ranks' collective fails at once ("Connection closed by
    peer"), and that error often reaches the driver before Ray's ActorDiedError does. The line must name
    the worker that died, not the one that noticed. For such a peer-lost error Ray is given up to
    DEAD_WORKER_WAIT_S to record the death; for any other error it is asked once."""
    import ray
    from ray._private import state  # the GCS actor table (ray.util.state needs the dashboard)
    from ray.core.generated.common_pb2 import ActorDiedErrorContext

    if not ray.is_initialized():
        return None
    unintended = (ActorDiedErrorContext.WORKER_DIED, ActorDiedErrorContext.NODE_DIED)
    job = ray.JobID.from_hex(ray.get_runtime_context().get_job_id())
    deadline = time.monotonic() + (DEAD_WORKER_WAIT_S if _PEER_LOST.search(str(error)) else 0.0)
    while True:
        dead = state.actors(job_id=job, actor_state_name="DEAD").values()
        for actor in sorted(dead, key=lambda a: a["EndTime"]):  # the first to die, not what it took down
            cause = actor["DeathCause"]
            if cause.WhichOneof("context") == "oom_context":
                return _death_line(actor["ActorClassName"], actor["Pid"], cause.oom_context.error_message)
            died = cause.actor_died_error_context
            if cause.WhichOneof("context") == "actor_died_error_context" and died.reason in unintended:
                return _death_line(actor["ActorClassName"], actor["Pid"], died.error_message)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.5)


def _failure_line(error: BaseException, args) -> str:
    # An error raised inside a Ray actor (the PPO controller's advantage step, say) comes back as a
    # RayTaskError whose first line is Ray's "ray::PPOTrainer.fit() (pid=...)": name the original.
    cause = getattr(error, "cause", None)
    if isinstance(cause, BaseException):
        error = cause
    first = (str(error).strip().splitlines() or [""])[0]
    death = _actor_death(error)
    if death:
        line = f"training stopped: {type(error).__name__}: {death}"
    else:
        try:
            death = _dead_worker(error)
        except Exception:  # asking Ray is a courtesy: the error itself must still come out
            death = None
        line = (f"training stopped: ActorDiedError: {death} (then {type(error).__name__}: {first[:200]})" if death
                else f"training stopped: {type(error).__name__}: {first[:300]}")
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
