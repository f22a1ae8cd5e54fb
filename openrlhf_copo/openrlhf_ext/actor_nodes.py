"""The checks that read the disks of the nodes where the actors run: the resume guard (`config.check_resume_settings`,
which also writes `copo_settings.json` next to the checkpoint) and the preflight of the model and data files
(`preflight.preflight`).

Why not in the driver: under `ray job submit` to a cluster whose head has no GPU (KubeRay, Slurm login nodes), the
driver runs on the head, while the actors load the model, read the data and save checkpoints on the GPU nodes. A
`--ckpt.path` or a model folder on those nodes' local disks does not exist on the head: there the resume guard never
refuses (it finds no checkpoint) and writes its settings file on the head, and the preflight refuses a model that is
where it should be. So, when the run joins a cluster (`device.cluster_address`), the driver connects to it (once, with
the run's own `ray.init` arguments, which OpenRLHF's `train` then finds in place) and runs both checks in a Ray task on
each node that declares GPU slots, where OpenRLHF places its actors (pinned there, asking for no resource, so nothing
waits for a GPU a running job holds). A run with a cluster of its own (no cluster to join) has its actors on this
machine: the checks run here. Either way one line says where they ran.
"""

from __future__ import annotations

import sys
from typing import Callable, List, Optional, Tuple

#: A node of the cluster: (its Ray node id, its address).
Node = Tuple[str, str]


def disk_checks(args) -> None:
    """The resume guard, then the preflight, on this process's disks; raises their errors (`CopoConfigError`,
    `PreflightError`), each one line."""
    from openrlhf_copo.openrlhf_ext.config import check_resume_settings
    from openrlhf_copo.openrlhf_ext.preflight import preflight

    check_resume_settings(args)
    preflight(args)


def _remote_disk_checks(args) -> Optional[str]:
    """`disk_checks` in a Ray task: its refusal as a string (None: passed), so that the driver raises it as its own."""
    from openrlhf_copo.openrlhf_ext.config import CopoConfigError
    from openrlhf_copo.openrlhf_ext.preflight import PreflightError

    try:
        disk_checks(args)
    except (CopoConfigError, PreflightError) as e:
        return str(e)
    return None


def gpu_nodes() -> List[Node]:
    """The alive nodes of the cluster this process joined that declare GPU slots (CUDA or logical ones): where
    OpenRLHF's placement groups put the actors."""
    import ray

    return [(n["NodeID"], n["NodeManagerAddress"]) for n in ray.nodes()
            if n.get("Alive") and n.get("Resources", {}).get("GPU", 0) > 0]


def run_on_nodes(args, nodes: List[Node], timeout_s: float = 600.0) -> List[Tuple[Node, Optional[str]]]:
    """`disk_checks` on each of ``nodes``, in a task pinned there: each node with its refusal or None."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(num_cpus=0, max_retries=0)(_remote_disk_checks)
    refs = [task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote(args)
            for node_id, _ in nodes]
    return list(zip(nodes, ray.get(refs, timeout=timeout_s)))


def guard_resume_and_preflight_on_cluster(args, address: str,
                                          say: Callable[[str], None] = lambda line: print(line, file=sys.stderr,
                                                                                          flush=True)) -> None:
    """The disk checks (the resume guard, which writes copo_settings.json, and the preflight) on the nodes of the
    cluster at ``address`` where the actors will run, said in one line; raises `DiskCheckError` with the first
    refusal, naming the node. This driver has joined that cluster already, with the run's `ray.init` arguments
    (`driver.start_ray_to_join_the_cluster`)."""
    nodes = gpu_nodes()
    if not nodes:
        try:
            disk_checks(args)
        except ValueError as e:
            raise DiskCheckError(f"{e} (checked on the driver's node)") from None
        say(f"openrlhf_copo: the resume guard and the preflight ran on the driver's node: the Ray cluster at {address} "
            "has no node with GPU slots yet (an autoscaler adds them), so paths on the GPU nodes' own disks were not "
            "checked")
        return
    for node, refusal in run_on_nodes(args, nodes):
        if refusal is not None:
            raise DiskCheckError(f"{refusal} (checked on {_name(node)}, where the actors run)")
    say(f"openrlhf_copo: the resume guard and the preflight ran on the {len(nodes)} node(s) with GPU slots, where the "
        f"actors run: {', '.join(_name(n) for n in nodes)}")


class DiskCheckError(ValueError):
    """A refusal of the resume guard or the preflight, naming the node whose disk it read."""


def _name(node: Node) -> str:
    node_id, ip = node
    return f"{ip} (node {node_id[:8]})"
