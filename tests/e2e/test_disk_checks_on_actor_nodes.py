"""The resume guard and the preflight read the disks where the actors run (issue 50: under `ray job submit` to a head
without a GPU, they read the head's disk, so a checkpoint on the GPU nodes' disks was never seen and
copo_settings.json was written on the head).

Two Ray nodes on 127.0.0.1 (`scripts/ray_cluster.sh`): a head with no GPU slot, where the driver joins, and a second
node with two logical GPU slots, where OpenRLHF would place every actor. The driver's checks (`driver.after_parse`,
the CLI's) run in a child process that joins the cluster as a submitted job's driver does (RAY_ADDRESS); both nodes
share this machine's disk, so what shows where the checks ran is the node they name and the Ray task that ran them.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests_support import REPO, copo_argv, free_port

pytestmark = pytest.mark.heavy  # starts Ray, a vLLM engine or a training run: left out by `pytest --quick`

RAY = str(Path(sys.executable).parent / "ray")

#: The driver's checks (the CLI's, in order) on a command line, in a process that joins the cluster at RAY_ADDRESS.
CHECKS = r"""
import json, sys
from openrlhf_copo.cli.train_ppo_ray import load_args
from openrlhf_copo.openrlhf_ext import driver
args = load_args(json.loads(sys.argv[1]))
try:
    driver.after_parse(args, driver.CLI)
except driver.DriverError as e:
    print("REFUSED " + str(e), flush=True)
    sys.exit(0)
import time
from ray.util.state import list_tasks
for _ in range(60):  # the state API learns of finished tasks a few seconds late
    tasks = [t for t in list_tasks(detail=True, limit=10000, raise_on_missing_output=False)
             if t.name.endswith("_remote_disk_checks")]
    if tasks:
        break
    time.sleep(1)
print("TASK_NODES " + json.dumps(sorted(t.node_id for t in tasks)), flush=True)
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu-less-head")
    port = free_port()
    env = {**os.environ, "RAY": RAY, "COPO_RAY_DIR": f"/tmp/copo-ray-disk-{os.getpid()}", "COPO_RAY_PORT": str(port),
           "COPO_RAY_DASHBOARD_PORT": str(free_port()), "COPO_RAY_HEAD_GPUS": "0", "COPO_RAY_WORKER_GPUS": "2",
           "COPO_RAY_CPUS": "4", "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    script = ["bash", str(REPO / "scripts" / "ray_cluster.sh")]
    started = subprocess.run(script + ["start"], env=env, capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        nodes = subprocess.run([sys.executable, "-c", "import json, ray; ray.init(address=%r, logging_level='ERROR'); "
                                "print(json.dumps({n['NodeID']: n['Resources'].get('GPU', 0) for n in ray.nodes() "
                                "if n['Alive']}))" % f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=300)
        gpus = json.loads(nodes.stdout.strip().splitlines()[-1])
        (worker,) = [node for node, n in gpus.items() if n > 0]
        assert len(gpus) == 2, gpus
        yield {"address": f"127.0.0.1:{port}", "worker": worker, "root": root, "env": env}
    finally:
        subprocess.run(script + ["stop"], env=env, capture_output=True, text=True, timeout=300)


def checks(cluster, ckpt: Path) -> list:
    argv = copo_argv("--copo.device", "auto", "--vllm.sync_backend", "gloo", "--vllm.num_engines", "1",
                     "--actor.num_gpus_per_node", "1", "--ckpt.path", str(ckpt), "--ckpt.save_steps", "1",
                     "--ckpt.load_enable")
    env = {**cluster["env"], "RAY_ADDRESS": cluster["address"]}
    out = subprocess.run([sys.executable, "-c", CHECKS, json.dumps(argv)], capture_output=True, text=True, env=env,
                         cwd=REPO, timeout=900)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    return out.stdout.splitlines() + out.stderr.splitlines()


def test_a_checkpoint_saved_with_other_settings_is_refused_where_the_actors_run(cluster):
    ckpt = cluster["root"] / "resumed"
    (ckpt / "_actor" / "global_step1").mkdir(parents=True)
    (ckpt / "_actor" / "latest").write_text("global_step1")
    (ckpt / "copo_settings.json").write_text(json.dumps({"estimator": "copo", "gamma": 5.0}))
    lines = checks(cluster, ckpt)
    refused = [x for x in lines if x.startswith("REFUSED ")]
    assert len(refused) == 1, lines[-40:]
    assert refused[0].startswith(f"REFUSED {ckpt} was saved with other COPO settings (")
    # the node's address as Ray reports it, then its id: the node with the GPU slots, not the head
    assert re.search(rf"\(checked on \S+ \(node {cluster['worker'][:8]}\), where the actors run\)$", refused[0])


def test_the_settings_file_is_written_by_a_task_on_the_actor_node_and_the_line_says_so(cluster):
    ckpt = cluster["root"] / "fresh"
    lines = checks(cluster, ckpt)
    assert not [x for x in lines if x.startswith("REFUSED ")], lines[-40:]
    said = [x for x in lines if x.startswith("openrlhf_copo: the resume guard and the preflight ran on ")]
    assert len(said) == 1 and re.fullmatch(
        "openrlhf_copo: the resume guard and the preflight ran on the 1 node\\(s\\) with GPU slots, where the actors "
        rf"run: \S+ \(node {cluster['worker'][:8]}\)", said[0]), lines[-40:]
    (task_nodes,) = [json.loads(x.split(" ", 1)[1]) for x in lines if x.startswith("TASK_NODES ")]
    assert set(task_nodes) == {cluster["worker"]}  # every disk-check task of the cluster (both tests') ran there
    assert json.loads((ckpt / "copo_settings.json").read_text())["estimator"] == "copo"
