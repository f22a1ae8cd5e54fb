"""A cluster whose head node has no GPU (KubeRay, Slurm login nodes): the job's driver, on that head, sees no CUDA,
and `--copo.device auto` must still put the actors on CUDA, because the cluster's GPU slots have it.

On one GPU machine: a Ray head started with no visible GPU (`CUDA_VISIBLE_DEVICES=`, `--num-gpus 0`) and a second
node with the GPU, both on 127.0.0.1; a job submitted to the head runs the driver's device step there and a CUDA
matmul in a GPU actor. (The full OpenRLHF training on CUDA is the training-step test's; vLLM is not in this suite.)
The test stops only the two nodes it started (`RayNodes`): a user's own Ray cluster on the machine keeps running.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests_support import REPO, RayNodes, free_port, ray_start_ports

# The interpreter's own `ray` (a venv), else the one on PATH (wheels installed with `pip --target`).
RAY = str(Path(sys.executable).parent / "ray")
if not os.path.exists(RAY):
    RAY = shutil.which("ray") or RAY

DRIVER = r"""
import json, os, sys
import ray
import torch
from openrlhf_copo.openrlhf_ext import device

decision = device.decide("auto", address=device.cluster_address())
ray.init()

@ray.remote(num_gpus=1)
class Actor:
    def matmul(self):
        import torch
        x = torch.ones(64, 64, device="cuda")
        return float((x @ x).sum()), torch.cuda.get_device_name(0)

total, name = ray.get(Actor.remote().matmul.remote())
print("RESULT " + json.dumps({"driver_cuda": torch.cuda.is_available(), "device": decision.device,
                              "reason": decision.reason, "total": total, "gpu": name}))
"""


def test_a_head_without_a_gpu_drives_actors_on_cuda(cuda, tmp_path):
    temp = Path(f"/tmp/copo-gpu-head-{os.getpid()}")
    port, dashboard = free_port(), free_port()
    common = ["--node-ip-address", "127.0.0.1", "--num-cpus", "4", "--temp-dir", str(temp), "--disable-usage-stats"]
    head_env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # the head node sees no GPU, as a CPU-only pod would
    (tmp_path / "driver.py").write_text(DRIVER)
    nodes = RayNodes(RAY)
    try:
        nodes.start("--head", "--port", str(port), "--num-gpus", "0", "--include-dashboard", "true", "--dashboard-host",
                    "127.0.0.1", "--dashboard-port", str(dashboard), *ray_start_ports(), *common, env=head_env)
        nodes.start("--address", f"127.0.0.1:{port}", "--num-gpus", "1", *ray_start_ports(head=False), *common)
        out = subprocess.run([RAY, "job", "submit", "--address", f"http://127.0.0.1:{dashboard}",
                              "--runtime-env-json", json.dumps({"working_dir": str(tmp_path),
                                                                "env_vars": {"PYTHONPATH": os.pathsep.join(
                                                                    filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}}),
                              "--", sys.executable, "driver.py"],
                             env=head_env, capture_output=True, text=True, timeout=600)
    finally:
        nodes.stop()  # these two nodes only: never `ray stop`, which ends every Ray cluster on the machine
        shutil.rmtree(temp, ignore_errors=True)
    lines = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
    assert out.returncode == 0 and lines, out.stdout[-3000:] + out.stderr[-2000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert result["driver_cuda"] is False  # the driver ran on the GPU-less head
    assert result["device"] == "cuda" and "declares 1 GPU slot(s), none marked logical" in result["reason"], result
    assert result["total"] == 64.0 ** 3
