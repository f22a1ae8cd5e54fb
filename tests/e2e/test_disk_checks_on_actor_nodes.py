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

# starts Ray (left out by `pytest --quick`); its cluster is `scripts/ray_cluster.sh`'s, with ports and a temp dir of its
# own; group 2, where every `scripts/ray_cluster.sh` head is (tests/quick_tier.py)
pytestmark = pytest.mark.heavy(group=2)

RAY = str(Path(sys.executable).parent / "ray")

#: The driver's checks (the CLI's, in order) on each of several command lines, one after the other in one process that
#: joins the cluster at RAY_ADDRESS (unbuffered, its stderr into its stdout: one stream in the order written); each
#: command line's lines are bracketed by "CASE <i>" and "END <i>".
CHECKS = r"""
import json, sys
from openrlhf_copo.cli.train_ppo_ray import load_args
from openrlhf_copo.openrlhf_ext import driver
argvs = json.loads(sys.argv[1])
for i, argv in enumerate(argvs):
    print(f"CASE {i}", flush=True)
    try:
        driver.after_parse(load_args(argv), driver.CLI)
    except driver.DriverError as e:
        print("REFUSED " + str(e), flush=True)
    print(f"END {i}", flush=True)
import time
from ray.util.state import list_tasks
for _ in range(60):  # the state API learns of finished tasks a few seconds late
    tasks = [t for t in list_tasks(detail=True, limit=10000, raise_on_missing_output=False)
             if t.name.endswith("_remote_disk_checks")]
    if len(tasks) >= len(argvs):
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


@pytest.fixture(scope="module")
def checked(cluster) -> dict:
    """The driver's checks, run once for two checkpoint folders in one process (one import of OpenRLHF, not two):
    "resumed" holds a checkpoint saved with other settings, "fresh" nothing. Returns each folder's lines, and the
    nodes where every disk-check task of the cluster ran."""
    cases = {"resumed": cluster["root"] / "resumed", "fresh": cluster["root"] / "fresh"}
    ckpt = cases["resumed"]
    (ckpt / "_actor" / "global_step1").mkdir(parents=True)
    (ckpt / "_actor" / "latest").write_text("global_step1")
    (ckpt / "copo_settings.json").write_text(json.dumps({"estimator": "copo", "gamma": 5.0}))
    argvs = [copo_argv("--copo.device", "auto", "--vllm.sync_backend", "gloo", "--vllm.num_engines", "1",
                       "--actor.num_gpus_per_node", "1", "--ckpt.path", str(path), "--ckpt.save_steps", "1",
                       "--ckpt.load_enable") for path in cases.values()]
    env = {**cluster["env"], "RAY_ADDRESS": cluster["address"]}
    out = subprocess.run([sys.executable, "-u", "-c", CHECKS, json.dumps(argvs)], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO, timeout=900)
    assert out.returncode == 0, out.stdout[-6000:]
    lines = out.stdout.splitlines()
    said = {}
    for i, name in enumerate(cases):
        said[name] = lines[lines.index(f"CASE {i}") + 1:lines.index(f"END {i}")]
    (task_nodes,) = [json.loads(x.split(" ", 1)[1]) for x in lines if x.startswith("TASK_NODES ")]
    return {**said, "task_nodes": task_nodes, "cases": cases}


def test_a_checkpoint_saved_with_other_settings_is_refused_where_the_actors_run(cluster, checked):
    ckpt, lines = checked["cases"]["resumed"], checked["resumed"]
    refused = [x for x in lines if x.startswith("REFUSED ")]
    assert len(refused) == 1, lines[-40:]
    assert refused[0].startswith(f"REFUSED {ckpt} was saved with other COPO settings (")
    # the node's address as Ray reports it, then its id: the node with the GPU slots, not the head
    assert re.search(rf"\(checked on \S+ \(node {cluster['worker'][:8]}\), where the actors run\)$", refused[0])


def test_the_settings_file_is_written_by_a_task_on_the_actor_node_and_the_line_says_so(cluster, checked):
    ckpt, lines = checked["cases"]["fresh"], checked["fresh"]
    assert not [x for x in lines if x.startswith("REFUSED ")], lines[-40:]
    said = [x for x in lines if x.startswith("openrlhf_copo: the resume guard and the preflight ran on ")]
    assert len(said) == 1 and re.fullmatch(
        "openrlhf_copo: the resume guard and the preflight ran on the 1 node\\(s\\) with GPU slots, where the actors "
        rf"run: \S+ \(node {cluster['worker'][:8]}\)", said[0]), lines[-40:]
    # every disk-check task of the cluster (both cases') ran there
    assert set(checked["task_nodes"]) == {cluster["worker"]}
    assert json.loads((ckpt / "copo_settings.json").read_text())["estimator"] == "copo"
