"""Two Ray nodes on 127.0.0.1 (`scripts/ray_cluster.sh`), the run submitted with `ray job submit`, as on a cluster:
actor on 2 DeepSpeed ranks (ZeRO-2, gloo) one per node, 2 vLLM engines, a separate reference model.

    head node (3 GPU slots):   vLLM engine 0, vLLM engine 1, DeepSpeed rank 0, the job's driver
    second node (2 GPU slots): DeepSpeed rank 1, reference model

A tiny random Qwen2 with SmolLM2's tokenizer, fp32 (vLLM too), 2 prompts x 4 samples per step. Submitted as the example
scripts submit (`copo_runtime_env`): a working dir (a user's project) that holds the run's checkpoints, and
`--copo.device auto`, which asks the cluster whether its GPU slots have CUDA (the driver's own CUDA decides nothing)."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from openrlhf_copo.cpu_demo.models import tiny_qwen2
from tests_support import REPO, WORKER_IN_ENGINE_CORE, free_port, submit_runtime_env, train_argv, write_prompts

# starts Ray, vLLM engines and training runs (left out by `pytest --quick`); its cluster is `scripts/ray_cluster.sh`'s,
# with ports and a temp dir of its own; group 2, where every `scripts/ray_cluster.sh` head is (tests/quick_tier.py)
pytestmark = pytest.mark.heavy(group=2)

RAY = str(Path(sys.executable).parent / "ray")
PROG_ERROR = "python -m openrlhf_copo.cli.train_ppo_ray: error: training stopped:"
#: Ray folds identical lines of several workers into one; every worker's own line is the evidence here.
#: Each vLLM engine's model worker inside its engine-core process, as on a GPU cluster (`WORKER_IN_ENGINE_CORE`).
JOB_ENV = {"HF_HUB_OFFLINE": "1", "RAY_DEDUP_LOGS": "0", **WORKER_IN_ENGINE_CORE}


class Cluster:
    def __init__(self, root: Path):
        self.dir = Path(f"/tmp/copo-ray-test-{os.getpid()}")  # Ray's socket paths must stay short
        self.dashboard = free_port()
        self.env = {**os.environ, "RAY": RAY, "COPO_RAY_DIR": str(self.dir), "COPO_RAY_PORT": str(free_port()),
                    "COPO_RAY_DASHBOARD_PORT": str(self.dashboard), "RAY_DEDUP_LOGS": "0"}
        self.address = f"http://127.0.0.1:{self.dashboard}"
        self.root = root
        self.jobs = 0

    def script(self, action: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(REPO / "scripts" / "ray_cluster.sh"), action], env=self.env,
                              capture_output=True, text=True, timeout=180)

    def submit(self, argv, wait: bool = True, working_dir: Path = None):
        """`ray job submit -- python -m openrlhf_copo.cli.train_ppo_ray ...`, with the example scripts' runtime env
        for ``working_dir``; returns (submission id, process)."""
        self.jobs += 1
        job_id = f"copo-two-nodes-{self.jobs}"
        env = {**(submit_runtime_env(working_dir, *argv) if working_dir else {}), "env_vars": JOB_ENV}
        cmd = [RAY, "job", "submit", "--address", self.address, "--submission-id", job_id,
               "--runtime-env-json", json.dumps(env),
               "--", sys.executable, "-m", "openrlhf_copo.cli.train_ppo_ray", *argv]
        log = open(self.root / f"{job_id}.submit.log", "w")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True, env=self.env)
        if wait:
            proc.wait(timeout=1200)
        return job_id, proc

    def status(self, job_id: str) -> str:
        from ray.job_submission import JobSubmissionClient

        return str(JobSubmissionClient(self.address).get_job_status(job_id).value)

    def logs(self, job_id: str) -> str:
        from ray.job_submission import JobSubmissionClient

        text = JobSubmissionClient(self.address).get_job_logs(job_id)
        (self.root / f"{job_id}.log").write_text(text)
        return text

    def actors(self, job_id: str):
        """Every actor the job created (alive or dead): class, node, pid, state."""
        from ray.job_submission import JobSubmissionClient
        from ray.util.state import list_actors

        ray_job = JobSubmissionClient(self.address).get_job_info(job_id).job_id
        return [a for a in list_actors(address=self.address, detail=True, limit=1000, raise_on_missing_output=False)
                if a.job_id == ray_job]

    def nodes(self):
        from ray.util.state import list_nodes

        return {n.node_id: n for n in list_nodes(address=self.address, detail=True)}


#: What the two-node run changes in the end-to-end command line (a repeated flag's last value wins).
TWO_NODES = ("--train.micro_batch_size", "2", "--algo.kl.init_coef", "0.01", "--algo.kl.estimator", "k3",
             "--actor.num_nodes", "2", "--actor.num_gpus_per_node", "1",
             "--ref.num_nodes", "1", "--ref.num_gpus_per_node", "1",  # the reference model (KL 0.01), apart
             "--vllm.num_engines", "2", "--ds.param_dtype", "fp32")


def project(tmp: Path) -> Path:
    """The job's working dir: a user's project, whose own SAVE_DIR (my-checkpoints/, not in any .gitignore) holds
    the checkpoints and the final model, laid out as the example scripts lay it out."""
    return tmp / "project"


def job_argv(tmp: Path, model: str, data: Path, max_samples: int, *extra: str):
    save = project(tmp) / "my-checkpoints"
    return train_argv(tmp, model, data, max_samples, *TWO_NODES, "--ckpt.path", str(save / "ckpt"),
                      "--ckpt.output_dir", str(save), *extra)


def steps(tmp: Path):
    if not (tmp / "metrics.jsonl").exists():
        return []
    return [json.loads(line) for line in (tmp / "metrics.jsonl").read_text().splitlines()]


def built_ops() -> dict:
    """DeepSpeed's CPU ops as setup built them (this environment's folder), with their modification times."""
    from openrlhf_copo.openrlhf_ext.cpu import torch_extensions_dir

    return {p.name: p.stat().st_mtime_ns for p in Path(torch_extensions_dir()).glob("*/*.so")}


@pytest.fixture(scope="module")
def ops_before():
    ops = built_ops()
    assert set(ops) == {"fused_adam.so", "deepspeed_shm_comm.so"}, ops  # built by scripts/setup_cpu.sh
    return ops


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, ops_before):
    c = Cluster(tmp_path_factory.mktemp("two-nodes"))
    started = c.script("start")
    assert started.returncode == 0, started.stdout + started.stderr
    yield c
    c.script("stop")


@pytest.fixture(scope="module")
def first_job(cluster):
    tmp = cluster.root
    model = tiny_qwen2(tmp / "tiny-model")
    data = write_prompts(tmp / "prompts.jsonl", 8)
    project(tmp).mkdir()
    (project(tmp) / "train_notes.md").write_text("the user's own files travel with the job\n")
    job_id, proc = cluster.submit(job_argv(tmp, model, data, 4), working_dir=project(tmp))
    return tmp, model, data, job_id, proc


def test_submitted_job_trains_two_steps_on_two_nodes(cluster, first_job):
    tmp, _, _, job_id, proc = first_job
    assert cluster.status(job_id) == "SUCCEEDED", cluster.logs(job_id)[-4000:]
    assert proc.returncode == 0
    assert [r["step"] for r in steps(tmp)] == [1, 2]


def test_auto_asks_the_cluster_and_takes_the_cpu_path_its_workers_need(cluster, first_job):
    """`--copo.device auto` under `ray job submit`: the decision comes from what the cluster declares (its GPU slots
    all marked logical by scripts/ray_cluster.sh: no CUDA behind them), said in one line."""
    _, _, _, job_id, _ = first_job
    line = ("openrlhf_copo: the actors run on the CPU path (no CUDA touched): --copo.device auto: the Ray cluster at ")
    decisions = [x for x in cluster.logs(job_id).splitlines() if x.startswith(line)]
    assert len(decisions) == 1 and "marks all its 5 GPU slot(s) logical" in decisions[0], decisions


def test_the_cluster_declares_its_slots_logical(cluster):
    from openrlhf_copo.openrlhf_ext.device import ClusterSlots, cluster_slots

    assert cluster_slots(f"127.0.0.1:{cluster.env['COPO_RAY_PORT']}") == ClusterSlots(gpus=5.0, logical=5.0)


def test_actor_ranks_sit_on_both_nodes_and_the_engines_and_reference_apart(cluster, first_job):
    _, _, _, job_id, _ = first_job
    actors = cluster.actors(job_id)
    where = {}
    for a in actors:
        where.setdefault(a.class_name, []).append(a.node_id)
    assert len(cluster.nodes()) == 2
    assert len(where["PolicyModelActor"]) == 2 and len(set(where["PolicyModelActor"])) == 2, where
    assert len(where["RolloutRayActor"]) == 2, where
    assert len(where["ReferenceModelActor"]) == 1, where


def test_patches_reach_every_worker_on_both_nodes(cluster, first_job):
    """The worker hook travels in the job's runtime env: each DeepSpeed rank, the reference model, both vLLM
    engines and the controller report the patches they installed, whatever node they run on."""
    _, _, _, job_id, _ = first_job
    log = cluster.logs(job_id)
    expected = {"PolicyModelActor": "openrlhf.trainer.ray.ppo_actor",
                "RolloutRayActor": "openrlhf.utils.agent",
                "PPOTrainer": "openrlhf.trainer.ppo_utils.experience_maker"}
    seen_nodes = set()
    for a in cluster.actors(job_id):
        module = expected.get(a.class_name)
        if module is None:
            continue
        # Ray's prefix: "(pid=N)" while the worker starts (the hook runs then), "(Class pid=N, ...)" later
        pattern = rf"pid={a.pid}\b[^)]*\)\S* openrlhf_copo: patched {re.escape(module)}$"
        assert re.search(pattern, log, re.MULTILINE), f"no patch line from {a.class_name} pid {a.pid}"
        seen_nodes.add(a.node_id)
    assert len(seen_nodes) == 2


def test_advantage_step_sees_every_prompt_from_both_engines(cluster, first_job):
    """COPO's global statistics span the whole rollout batch: both prompts, from both engines, before the
    batch is split over the two DeepSpeed ranks."""
    tmp, _, _, job_id, _ = first_job
    assert cluster.status(job_id) == "SUCCEEDED"
    for row in steps(tmp):
        assert row["copo_num_prompts"] == 2.0 and row["copo_num_engines"] == 2.0, row


def test_both_engines_get_the_synced_weights(cluster, first_job):
    """Step 2 samples with the weights synced after step 1's update, from both engines: each engine's
    logprobs of its sampled tokens match DeepSpeed's (fp32 on both sides)."""
    tmp, _, _, job_id, _ = first_job
    step1, step2 = steps(tmp)[:2]
    assert step1["actor_grad_norm"] > 0
    for engine in (0, 1):
        assert step2[f"copo_rollout_logprob_absdiff_engine{engine}"] < 1e-3, step2


def test_two_rank_checkpoint_resumes_and_a_killed_worker_on_node_2_ends_the_job_in_one_line(cluster, first_job):
    """Resubmitted from the same working dir, the job goes on from the 2-rank checkpoint at step 3, and the
    checkpoints inside that dir (here with 600 MiB of optimizer states beside them: packed, the upload is refused,
    "413: Maximum request body size 104857600 exceeded", as a first version of this test saw) are not uploaded
    again; then the DeepSpeed rank on the second node is killed: the job fails, without a
    hang, with one line of reason."""
    import signal

    tmp, model, data, first_id, _ = first_job
    assert cluster.status(first_id) == "SUCCEEDED"
    save = project(tmp) / "my-checkpoints"
    assert (save / "ckpt").is_dir()
    big = save / "optimizer_states_of_a_3b_model.pt"
    with open(big, "wb") as f:  # incompressible, as optimizer states are: packed, the submission would be refused
        for _ in range(600):
            f.write(os.urandom(1 << 20))
    job_id, proc = cluster.submit(job_argv(tmp, model, data, 8, "--train.num_episodes", "3"), wait=False,
                                  working_dir=project(tmp))
    deadline = time.time() + 900
    while time.time() < deadline and len(steps(tmp)) < 3 and proc.poll() is None:
        time.sleep(2)
    assert [r["step"] for r in steps(tmp)][:3] == [1, 2, 3], cluster.logs(job_id)[-4000:]
    big.unlink()
    # what the nodes unpacked of both submissions: the user's file, none of the checkpoints
    unpacked = [d for d in (cluster.dir / "session_latest" / "runtime_resources" / "working_dir_files").glob("_ray_pkg_*")
                if d.is_dir()]
    assert unpacked and all((d / "train_notes.md").exists() for d in unpacked), unpacked
    assert not [p for d in unpacked for p in d.rglob("*") if "my-checkpoints" in p.parts]

    head = next(a.node_id for a in cluster.actors(job_id) if a.class_name == "RolloutRayActor")
    (victim,) = [a for a in cluster.actors(job_id) if a.class_name == "PolicyModelActor" and a.node_id != head]
    os.kill(victim.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("the job hung after the DeepSpeed rank on node 2 was killed")
    assert cluster.status(job_id) == "FAILED"
    reasons = [line for line in cluster.logs(job_id).splitlines() if line.startswith(PROG_ERROR)]
    assert len(reasons) == 1, cluster.logs(job_id)[-4000:]
    assert f"PolicyModelActor (pid {victim.pid}) died" in reasons[0]  # which worker, not just "an actor died"
    assert f"checkpoints under {save / 'ckpt'} are as last saved" in reasons[0]


def test_no_job_rebuilt_deepspeeds_ops(cluster, first_job, ops_before):
    """Setup built fused_adam and shm_comm; the ranks of both jobs, on both nodes, loaded them as built. (Two ninja
    versions rewriting each other's build log made every run rebuild both, ~5 minutes of a 13-minute run.)"""
    tmp, _, _, job_id, _ = first_job
    assert cluster.status(job_id) == "SUCCEEDED"
    assert built_ops() == ops_before
    assert "build log version is too old" not in cluster.logs(job_id)
