"""How a run that stops during training ends: one line saying what stopped it, then Ray shut down.

The CLI and a fork carrying `patches/train_ppo_ray.patch` both train through `driver.run_training`, which
ends through `end_run`: a killed worker ends either on the same line, e.g.

    <prog>: error: training stopped: ActorDiedError: PolicyModelActor (pid 4242) died: its worker process has died
    (then RuntimeError: ...); checkpoints under /ckpt are as last saved: rerun the same command with
    --ckpt.load_enable to resume
"""

from __future__ import annotations

import re
import sys
import time
import traceback
from typing import NoReturn, Optional

__all__ = ["end_run", "stop_on_failure", "stop_ray", "failure_line", "EXIT_CODE"]

#: The exit status of a run that stopped during training (the same as a refused command line's, argparse's 2).
EXIT_CODE = 2


def end_run(error: BaseException, args, prog: str) -> NoReturn:
    """Print the traceback, then the one line (Ray asked first, then shut down), and exit with `EXIT_CODE`."""
    traceback.print_exc()
    line = stop_on_failure(error, args)
    print(f"{prog}: error: {line}", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_CODE)


def stop_on_failure(error: BaseException, args) -> str:
    """The one line saying what stopped training, then Ray shut down (so that its log forwarding does not print
    after that line). In this order: naming a worker that died asks Ray's actor table."""
    line = failure_line(error, args)
    stop_ray()
    return line


def stop_ray() -> None:
    """Ray shut down if it is up; a failure to do so is ignored (what the caller prints next matters more)."""
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


def failure_line(error: BaseException, args) -> str:
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


