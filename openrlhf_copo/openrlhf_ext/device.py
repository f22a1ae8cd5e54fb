"""Where the actors will run, CUDA or the CPU path: `--copo.device {auto,cuda,cpu}`, decided once per run in the driver.

Why not the driver's own CUDA: under `ray job submit` the driver runs on the cluster's head node, and on KubeRay,
Slurm+Ray or any cluster with a CPU-only head or login node that node has no GPU while every actor's node has one.
So `auto` asks where the actors will run:

- no cluster to join (`cluster_address`, found as a bare `ray.init()` finds it: no `RAY_ADDRESS` and no `ray start`
  cluster on this machine; OpenRLHF then starts Ray here): this machine's CUDA;
- a cluster to join (`RAY_ADDRESS`, which `ray job submit` sets for its driver, or the latest `ray start` on this
  machine): what the cluster declares. A CPU node offers logical GPU slots (`ray start --num-gpus N`) and marks them
  with the custom resource `LOGICAL_GPU_RESOURCE` (`--resources '{"logical_gpu": N}'`: `scripts/ray_cluster.sh`
  does, and the CPU-cluster recipe in docs/cpu-path.md). The rule: CUDA unless the cluster marks its slots logical. A
  cluster whose GPU slots are all marked takes the CPU path; one with no mark is CUDA, even with no GPU slot at all
  (an autoscaling cluster whose GPU nodes are at zero: OpenRLHF's placement waits for them, and the autoscaler adds
  them); one that marks only some of its slots is refused (say `--copo.device`). The resources are read
  from a short-lived child process (`cluster_slots`), so the driver itself joins the cluster only once, and nothing
  waits for a GPU slot: a job submitted while another holds every GPU queues in OpenRLHF's placement, as it would
  without us.

`cuda` and `cpu` say it outright. The decision is printed in one line with its reason, and every CPU-path refusal
and adaptation follows it: on the CUDA path nothing of the CPU path is exported (`driver.after_parse`,
`driver.ray_init_kwargs`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Callable, Optional

#: `--copo.device` values.
DEVICES = ("auto", "cuda", "cpu")
CUDA, CPU = "cuda", "cpu"
#: The custom Ray resource that marks a node's GPU slots as logical (no CUDA behind them: the CPU path).
LOGICAL_GPU_RESOURCE = "logical_gpu"
#: How long reading the cluster's resources may take (joining it from a child process, reading, leaving).
READ_TIMEOUT_S = 120.0


class DeviceError(RuntimeError):
    """The device cannot be decided (one line, naming the flag that settles it)."""


@dataclass(frozen=True)
class ClusterSlots:
    """What the cluster declares: its GPU slots, and how many of them are marked logical (`LOGICAL_GPU_RESOURCE`)."""

    gpus: float
    logical: float


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
    """The Ray cluster OpenRLHF's bare `ray.init()` will join, or None when it starts one on this machine. Found as
    Ray finds it (Ray 2.55's `ray.init` calls this function): `RAY_ADDRESS`, else the address the latest `ray start`
    on this machine wrote under Ray's temp dir (`$RAY_TMPDIR/ray`, default /tmp/ray: `ray_current_cluster`)."""
    from ray._private.services import get_ray_address_from_environment

    address = get_ray_address_from_environment(None, None)
    return None if address in (None, "", "local") else address


def cluster_slots(address: str, timeout_s: float = READ_TIMEOUT_S) -> ClusterSlots:
    """The GPU slots the Ray cluster at ``address`` declares, and how many are marked logical. Raises `DeviceError`
    when it cannot be read.

    Read from a child process, a Ray driver of its own, so that this driver connects once, with OpenRLHF's
    `ray.init` and the run's runtime env. (A first version connected here and disconnected: under `ray job submit`
    with a working dir, that disconnection let Ray delete the unpacked working dir, the driver's own current
    directory, before OpenRLHF's `ray.init`.) Nothing is scheduled: the resources are the cluster's declaration, so
    the answer does not wait for a free GPU."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "RAY_JOB_CONFIG_JSON_ENV_VAR"}
    try:
        out = subprocess.run([sys.executable, "-m", __name__, address], capture_output=True, text=True, env=env,
                             timeout=timeout_s)
    except subprocess.TimeoutExpired:
        out = None
    if out is not None and out.returncode == 0 and out.stdout.strip():
        return ClusterSlots(**json.loads(out.stdout.strip().splitlines()[-1]))
    why = (out.stderr.strip().splitlines() or ["no output"])[-1] if out is not None else "it did not answer in time"
    raise DeviceError(f"could not read the resources of the Ray cluster at {address} ({why[:300]}): say "
                      "--copo.device cuda (GPU nodes) or --copo.device cpu")


def _read_here(address: str) -> dict:
    """The child's part of `cluster_slots`: join, read the declared resources, leave."""
    import ray

    ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    try:
        resources = ray.cluster_resources()
        return {"gpus": float(resources.get("GPU", 0)), "logical": float(resources.get(LOGICAL_GPU_RESOURCE, 0))}
    finally:
        ray.shutdown()


def decide(requested: str, *, address: Optional[str] = None,
           local_cuda: Callable[[], bool] = cuda_available,
           slots: Callable[[str], ClusterSlots] = cluster_slots) -> DeviceDecision:
    """`--copo.device` ``requested`` -> the device the actors use, with the reason (``address``: the cluster to
    join, None for a cluster of this machine's own). ``local_cuda`` and ``slots`` are parameters for tests."""
    if requested not in DEVICES:
        raise DeviceError(f"--copo.device {requested}: choose one of {', '.join(DEVICES)}")
    if requested != "auto":
        return DeviceDecision(requested, f"--copo.device {requested}")
    if address is None:
        where = "no Ray cluster to join (RAY_ADDRESS unset, no `ray start` cluster on this machine)"
        if local_cuda():
            return DeviceDecision(CUDA, f"--copo.device auto: {where}, and this machine sees CUDA")
        return DeviceDecision(CPU, f"--copo.device auto: {where}, and this machine has no CUDA")
    found = slots(address)
    if found.logical <= 0:  # GPU nodes, or none yet: an autoscaler adds them when OpenRLHF's placement asks
        return DeviceDecision(CUDA, f"--copo.device auto: the Ray cluster at {address} declares {found.gpus:g} GPU "
                                    f"slot(s), none marked logical (resource {LOGICAL_GPU_RESOURCE}); the rule: CUDA "
                                    "unless every slot is marked logical (with no GPU slot yet, as an autoscaling "
                                    "cluster, OpenRLHF waits for GPU nodes; CPU-only nodes: mark their slots, or say "
                                    "--copo.device cpu)")
    if found.logical >= found.gpus:
        return DeviceDecision(CPU, f"--copo.device auto: the Ray cluster at {address} marks all its {found.gpus:g} GPU "
                                   f"slot(s) logical (resource {LOGICAL_GPU_RESOURCE}): no CUDA behind them; "
                                   "--copo.device cuda overrides")
    raise DeviceError(f"the Ray cluster at {address} marks {found.logical:g} of its {found.gpus:g} GPU slots logical "
                      f"(resource {LOGICAL_GPU_RESOURCE}): CUDA nodes and CPU nodes in one cluster; say --copo.device "
                      "cuda or --copo.device cpu")


if __name__ == "__main__":  # the child of `cluster_slots`: prints one JSON line
    import sys

    print(json.dumps(_read_here(sys.argv[1])), flush=True)
