"""Where the actors will run, CUDA or the CPU path: `--copo.device {auto,cuda,cpu}`, decided once per run in the driver.

Why not the driver's own CUDA: under `ray job submit` the driver runs on the cluster's head node, and on KubeRay,
Slurm+Ray or any cluster with a CPU-only head or login node that node has no GPU while every actor's node has one.
So `auto` asks where the actors will run:

- no cluster to join (no `RAY_ADDRESS`; OpenRLHF then starts Ray on this machine): this machine's CUDA;
- a cluster to join (`RAY_ADDRESS`, which `ray job submit` sets for its driver): the cluster. One task on one GPU
  slot (after Ray narrowed `CUDA_VISIBLE_DEVICES` to that slot, as it does for OpenRLHF's actors) reports whether
  it sees CUDA; its worker process exits afterwards (`max_calls=1`), so no CUDA state outlives it. It is asked
  from a short-lived child process (`probe_cluster`), so the driver itself joins the cluster only once.

`cuda` and `cpu` say it outright (`cuda` is for a cluster the probe cannot reach or a GPU slot it cannot get). The
decision is printed in one line with its reason, and every CPU-path refusal and adaptation follows it: on the
CUDA path nothing of the CPU path is exported (`driver.after_parse`, `driver.ray_init_kwargs`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Callable, Optional

#: `--copo.device` values.
DEVICES = ("auto", "cuda", "cpu")
CUDA, CPU = "cuda", "cpu"
#: How long the probe waits for a GPU slot of the cluster (the slots may be held by another job).
PROBE_TIMEOUT_S = 120.0


class DeviceError(RuntimeError):
    """The device cannot be decided (one line, naming the flag that settles it)."""


@dataclass(frozen=True)
class ProbeAnswer:
    """What the task on one GPU slot of the cluster saw."""

    cuda: bool
    devices: int
    node: str


@dataclass(frozen=True)
class DeviceDecision:
    device: str  # CUDA or CPU
    reason: str

    @property
    def cpu_path(self) -> bool:
        return self.device == CPU

    def line(self) -> str:
        where = "CUDA" if self.device == CUDA else "the CPU path (no CUDA touched)"
        return f"openrlhf_copo: the actors run on {where}: {self.reason}"


def cuda_available() -> bool:
    """This process's CUDA (the driver's machine)."""
    import torch

    return torch.cuda.is_available()


def cluster_address() -> Optional[str]:
    """The Ray cluster this driver will join, or None when OpenRLHF's `ray.init` starts one on this machine."""
    return os.environ.get("RAY_ADDRESS") or None


def _sees_cuda() -> tuple:
    # Runs in a Ray worker on a GPU slot: CUDA as the actors there will see it (after Ray's narrowing).
    import socket

    import torch

    return torch.cuda.is_available(), torch.cuda.device_count(), socket.gethostname()


def probe_cluster(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> ProbeAnswer:
    """Ask one GPU slot of the cluster at ``address`` whether it sees CUDA. Raises `DeviceError` when the cluster has
    no GPU slot, none comes free within ``timeout_s``, or it cannot be asked.

    Asked from a child process, a Ray driver of its own, so that this driver connects once, with OpenRLHF's
    `ray.init` and the run's runtime env. (A first version connected here, asked, and disconnected: under `ray job
    submit` with a working dir, that disconnection let Ray delete the unpacked working dir, the driver's own
    current directory, before OpenRLHF's `ray.init`.) The child is no part of the submitted job: it carries neither
    its runtime env nor its working dir, and its task runs in the cluster's own Python environment."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "RAY_JOB_CONFIG_JSON_ENV_VAR"}
    try:
        out = subprocess.run([sys.executable, "-m", __name__, address, str(timeout_s)], capture_output=True,
                             text=True, env=env, timeout=timeout_s + 120)
    except subprocess.TimeoutExpired:
        out = None
    if out is not None and out.returncode == 0 and out.stdout.strip():
        reply = json.loads(out.stdout.strip().splitlines()[-1])
        if "error" in reply:
            raise DeviceError(reply["error"])
        return ProbeAnswer(**reply)
    why = (out.stderr.strip().splitlines() or ["no output"])[-1] if out is not None else "it did not answer in time"
    raise DeviceError(f"could not ask the Ray cluster at {address} whether its GPU slots see CUDA ({why[:300]}): say "
                      "--copo.device cuda (GPU nodes) or --copo.device cpu")


def _probe_here(address: str, timeout_s: float) -> dict:
    """The child's part of `probe_cluster`: join, ask one GPU slot, leave."""
    import ray

    ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    try:
        if ray.cluster_resources().get("GPU", 0) < 1:
            return {"error": f"the Ray cluster at {address} has no GPU resource, and OpenRLHF places every rank and "
                             "vLLM engine on a GPU slot: start its GPU nodes with their GPUs, or CPU-only nodes with "
                             "`ray start --num-gpus N` (logical slots, the CPU path; scripts/ray_cluster.sh)"}
        # A hundredth of a slot: beside any fractional (colocated) user, and Ray still narrows CUDA_VISIBLE_DEVICES.
        task = ray.remote(num_gpus=0.01, num_cpus=0, max_calls=1)(_sees_cuda).remote()
        try:
            cuda, devices, node = ray.get(task, timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            ray.cancel(task, force=True)
            return {"error": f"no GPU slot of the Ray cluster at {address} came free within {timeout_s:.0f} s to ask "
                             "whether it sees CUDA: say --copo.device cuda (GPU nodes) or --copo.device cpu"}
        return {"cuda": bool(cuda), "devices": int(devices), "node": str(node)}
    finally:
        ray.shutdown()


def decide(requested: str, *, address: Optional[str] = None,
           local_cuda: Callable[[], bool] = cuda_available,
           probe: Callable[[str], ProbeAnswer] = probe_cluster) -> DeviceDecision:
    """`--copo.device` ``requested`` -> the device the actors use, with the reason (``address``: the cluster to
    join, None for a cluster of this machine's own). ``local_cuda`` and ``probe`` are parameters for tests."""
    if requested not in DEVICES:
        raise DeviceError(f"--copo.device {requested}: choose one of {', '.join(DEVICES)}")
    if requested != "auto":
        return DeviceDecision(requested, f"--copo.device {requested}")
    if address is None:
        if local_cuda():
            return DeviceDecision(CUDA, "--copo.device auto: no Ray cluster to join (RAY_ADDRESS unset), and this "
                                        "machine sees CUDA")
        return DeviceDecision(CPU, "--copo.device auto: no Ray cluster to join (RAY_ADDRESS unset), and this machine "
                                   "has no CUDA")
    answer = probe(address)
    if answer.cuda:
        return DeviceDecision(CUDA, f"--copo.device auto: a task on a GPU slot of the cluster at {address} (node "
                                    f"{answer.node}) sees {answer.devices} CUDA device(s)")
    return DeviceDecision(CPU, f"--copo.device auto: a task on a GPU slot of the cluster at {address} (node "
                               f"{answer.node}) sees no CUDA, so its GPU slots are logical; --copo.device cuda "
                               "overrides")


if __name__ == "__main__":  # the child of `probe_cluster`: prints one JSON line
    import sys

    print(json.dumps(_probe_here(sys.argv[1], float(sys.argv[2]))), flush=True)
