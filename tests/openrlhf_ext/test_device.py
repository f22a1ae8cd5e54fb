"""`--copo.device`: where the actors run is decided from where they will run, not from the driver's own CUDA
(`openrlhf_ext/device.py`, step 6 of `openrlhf_ext/driver.py`): under `auto`, what the cluster declares. A real
cluster is read here and in tests/e2e/test_two_nodes.py; on a GPU, tests/gpu/."""

import contextlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from openrlhf_copo.contract import CPU_ENV
from openrlhf_copo.openrlhf_ext import cpu, device, driver
from tests_support import RayNodes, copo_argv, free_port, ray_start_ports

ADDRESS = "10.0.0.1:6379"
CPU_OK = ("--vllm.sync_backend", "gloo", "--ds.attn_implementation", "sdpa")


def never(*_):
    raise AssertionError("not to be asked here")


def declared(gpus: float, logical: float = 0):
    def slots(address):
        assert address == ADDRESS
        return device.ClusterSlots(gpus=gpus, logical=logical)
    return slots


@pytest.mark.parametrize("requested, address, local, slots, expected, reason", [
    # said outright: neither this machine nor the cluster is asked
    ("cuda", None, never, never, "cuda", "--copo.device cuda"),
    ("cuda", ADDRESS, never, never, "cuda", "--copo.device cuda"),
    ("cpu", ADDRESS, never, never, "cpu", "--copo.device cpu"),
    # auto, no cluster to join: this machine decides
    ("auto", None, lambda: False, never, "cpu", "no Ray cluster to join (RAY_ADDRESS unset, no `ray start` cluster on "
                                                "this machine), and this machine has no CUDA"),
    ("auto", None, lambda: True, never, "cuda", "this machine sees CUDA"),
    # auto, joining a cluster (a CPU-only head node: the driver's CUDA is never asked): what the cluster declares
    ("auto", ADDRESS, never, declared(8), "cuda", f"the Ray cluster at {ADDRESS} declares 8 GPU slot(s), none marked "
                                                  "logical (resource logical_gpu)"),
    ("auto", ADDRESS, never, declared(5, 5), "cpu", f"the Ray cluster at {ADDRESS} marks all its 5 GPU slot(s) logical"),
    # no GPU slot yet (an autoscaling cluster whose GPU nodes are at zero): OpenRLHF's placement waits for them
    ("auto", ADDRESS, never, declared(0), "cuda", "declares 0 GPU slot(s), none marked logical (resource logical_gpu); "
                                                  "the rule: CUDA unless every slot is marked logical"),
])
def test_the_device_is_decided_where_the_actors_run(requested, address, local, slots, expected, reason):
    decision = device.decide(requested, address=address, local_cuda=local, slots=slots)
    assert decision.device == expected and decision.cpu_path == (expected == "cpu")
    assert reason in decision.reason
    assert decision.line().startswith("openrlhf_copo: the actors run on " + ("CUDA: " if expected == "cuda" else
                                                                               "the CPU path (no CUDA touched): "))


def test_the_flag_and_its_default(load_args):
    assert load_args(copo_argv()).copo.device == "auto"
    assert load_args(copo_argv("--copo.device", "cuda")).copo.device == "cuda"
    with pytest.raises(SystemExit):
        load_args(copo_argv("--copo.device", "gpu"))
    with pytest.raises(device.DeviceError, match="--copo.device tpu: choose one of auto, cuda, cpu"):
        device.decide("tpu")


def test_a_cuda_less_driver_told_cuda_does_not_take_the_cpu_path(load_args, monkeypatch, capsys):
    """The head node of KubeRay / Slurm+Ray has no GPU; its workers do. `--copo.device cuda`: the CPU path's
    refusals do not apply (NCCL sync is fine), nothing of it is installed or exported, Ray is not started locally."""
    assert not device.cuda_available()  # this machine: the CUDA-less driver
    monkeypatch.setattr(cpu, "install", never)
    monkeypatch.setattr(cpu, "prepare_driver", never)
    args = load_args(copo_argv("--copo.device", "cuda", "--vllm.sync_backend", "nccl"))
    capsys.readouterr()  # what parsing printed (the blending regime): the device decision's line is what follows
    decision = driver.decide_device(args)
    driver.install_cpu_path(decision)  # on CUDA: nothing
    assert decision.device == "cuda"
    assert capsys.readouterr().err.strip() == "openrlhf_copo: the actors run on CUDA: --copo.device cuda"
    kwargs = driver.ray_init_kwargs(args, {"runtime_env": {"env_vars": {"NCCL_DEBUG": "WARN"}}}, decision)
    assert CPU_ENV not in kwargs["runtime_env"]["env_vars"] and "address" not in kwargs and "num_gpus" not in kwargs
    assert kwargs["runtime_env"]["env_vars"]["NCCL_DEBUG"] == "WARN"


def test_a_cluster_with_some_slots_marked_is_refused():
    """Some slots marked logical, some not: CUDA and CPU nodes in one cluster, which no single device path serves. One
    line naming the fix. (A cluster with no GPU slot at all is CUDA since issue 44: an autoscaler adds GPU nodes.)"""
    with pytest.raises(device.DeviceError, match="marks 2 of its 4 GPU slots logical.*say --copo.device cuda"):
        device.decide("auto", address=ADDRESS, local_cuda=never, slots=declared(4, 2))


@contextlib.contextmanager
def ray_start_head(root: Path, *flags: str):
    """`ray start --head` as a user runs it on the driver's machine, in a Ray temp dir of its own (`RAY_TMPDIR=root`:
    its address file, root/ray/ray_current_cluster, is what a bare `ray.init()` reads here). Yields its GCS port.
    Ended by killing its process group (`RayNodes.stop`): `ray stop` would end every Ray cluster of the machine."""
    port = free_port()
    env = {**os.environ, "RAY_TMPDIR": str(root)}
    env.pop("RAY_ADDRESS", None)
    nodes = RayNodes(str(Path(sys.executable).parent / "ray"))
    try:
        nodes.start("--head", "--port", str(port), "--node-ip-address", "127.0.0.1", "--num-cpus", "1",
                    "--include-dashboard", "false", *ray_start_ports(), "--temp-dir", str(root / "ray"),
                    "--disable-usage-stats", *flags, env=env, log=root / "start.log")
        yield port
    finally:
        nodes.stop()


@pytest.mark.heavy(group=2)  # `ray start` clusters, each in a temp dir and on ports of its own
@pytest.mark.parametrize("flags, expected, reason", [
    # the case: until issue 44 taken as "no Ray cluster to join", and the run went to the CPU path
    (["--num-gpus", "1"], "cuda", "declares 1 GPU slot(s), none marked logical"),
    # an autoscaling cluster whose GPU nodes are at zero: until issue 44 refused ("no GPU resource")
    (["--num-gpus", "0"], "cuda", "declares 0 GPU slot(s), none marked logical (resource logical_gpu); the rule: CUDA"),
    # a CPU machine's logical slots, marked: the CPU path, which joins that cluster rather than starting its own
    (["--num-gpus", "2", "--resources", '{"logical_gpu": 2}'], "cpu", "marks all its 2 GPU slot(s) logical"),
])
def test_auto_finds_a_ray_start_cluster_of_this_machine_as_ray_does(load_args, monkeypatch, flags, expected, reason):
    """A cluster started with `ray start --head` on the driver's machine, RAY_ADDRESS unset: OpenRLHF's bare
    `ray.init()` joins it, so `--copo.device auto` asks it (the driver's step, on a real local cluster)."""
    root = Path(tempfile.mkdtemp(prefix="copo-", dir="/tmp"))  # short: Ray's socket paths live under it
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(root))
    assert device.cluster_address() is None  # nothing started yet: OpenRLHF would start Ray here
    try:
        with ray_start_head(root, *flags) as port:
            address = device.cluster_address()
            assert address.endswith(f":{port}")  # its GCS, as Ray wrote it in the address file
            args = load_args(copo_argv(*CPU_OK))
            decision = driver.decide_device(args)
            assert decision.device == expected and f"the Ray cluster at {address}" in decision.reason
            assert reason in decision.reason, decision.reason
            if expected == "cpu":
                assert "address" not in driver.ray_init_kwargs(args, {}, decision)  # joins the cluster it asked
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_auto_follows_the_cluster_and_every_cpu_refusal_follows_the_decision(load_args, monkeypatch, capsys):
    monkeypatch.setenv("RAY_ADDRESS", ADDRESS)
    monkeypatch.setattr(device, "cuda_available", never)  # the driver's own CUDA decides nothing when joining
    # the cluster declares GPUs: NCCL weight sync is accepted, fp32 (the CPU path's) is refused
    monkeypatch.setattr(device, "cluster_slots", declared(8))
    monkeypatch.setattr(cpu, "install", never)
    args = load_args(copo_argv("--vllm.sync_backend", "nccl"))
    assert driver.decide_device(args).device == "cuda"
    with pytest.raises(driver.DriverError, match=r"the actors run on CUDA \(--copo.device auto: the Ray cluster .*"
                                                 r"\), where --ds.param_dtype fp32 is the CPU path's"):
        driver.decide_device(load_args(copo_argv(*CPU_OK, "--ds.param_dtype", "fp32")))
    # every slot marked logical: the CPU path, whose refusals name the decision
    monkeypatch.setattr(device, "cluster_slots", declared(4, 4))
    with pytest.raises(driver.DriverError, match=r"the actors run on the CPU path \(--copo.device auto: .* no CUDA "
                                                 r"behind them.*\), where --vllm.sync_backend nccl: NCCL needs CUDA"):
        driver.decide_device(load_args(copo_argv("--vllm.sync_backend", "nccl")))
    assert "the actors run on the CPU path" in capsys.readouterr().err


def test_every_setting_the_device_cannot_run_is_said_at_once(load_args, capsys):
    """Two settings the CPU path cannot run: one message after the decision names both."""
    args = load_args(copo_argv("--copo.device", "cpu", "--vllm.sync_backend", "nccl", "--train.enable_ema"))
    with pytest.raises(driver.DriverError) as e:
        driver.decide_device(args)
    lines = str(e.value).splitlines()
    assert lines[0] == "the actors run on the CPU path (--copo.device cpu), where 2 settings are refused:", lines
    assert lines[1].startswith("  - --vllm.sync_backend nccl: NCCL needs CUDA") and len(lines) == 3, lines
    assert lines[2].startswith("  - --train.enable_ema: OpenRLHF moves the EMA model to cuda"), lines


def test_the_cpu_decision_exports_the_cpu_path_to_the_workers(load_args, monkeypatch):
    """On the CPU path the workers learn it from the runtime env, and a cluster being joined keeps its address."""
    monkeypatch.setenv("RAY_ADDRESS", ADDRESS)
    monkeypatch.setattr(device, "cluster_slots", declared(4, 4))
    args = load_args(copo_argv(*CPU_OK))
    decision = driver.decide_device(args)
    assert decision.device == "cpu"
    kwargs = driver.ray_init_kwargs(args, {}, decision)
    assert kwargs["runtime_env"]["env_vars"][CPU_ENV] == "1" and "address" not in kwargs


@pytest.mark.heavy(group=2)  # a two-node Ray cluster (`scripts/ray_cluster.sh`: its heads are all in group 2)
def test_auto_on_a_real_cluster_whose_gpus_are_all_held_decides_without_waiting(tmp_path):
    """A real two-node cluster (`scripts/ray_cluster.sh`, its slots marked logical) whose every GPU slot is held by
    another job's actor: `auto` reads what the cluster declares and decides at once (the earlier probe waited up to
    120 s for a free slot and then refused)."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    from tests_support import REPO, free_port

    port = free_port()
    env = {**os.environ, "RAY": str(Path(sys.executable).parent / "ray"), "COPO_RAY_DIR": f"/tmp/copo-ray-held-{os.getpid()}",
           "COPO_RAY_PORT": str(port), "COPO_RAY_DASHBOARD_PORT": str(free_port()), "COPO_RAY_HEAD_GPUS": "1",
           "COPO_RAY_WORKER_GPUS": "1", "COPO_RAY_CPUS": "2"}
    script = [str(REPO / "scripts" / "ray_cluster.sh")]
    holder = f"""
import ray, time
ray.init(address="127.0.0.1:{port}", logging_level="ERROR")
@ray.remote(num_gpus=1, num_cpus=0)
class Hold:
    def ready(self):
        return True
held = [Hold.remote() for _ in range(2)]
ray.get([h.ready.remote() for h in held])
print("held", flush=True)
time.sleep(600)
"""
    started = subprocess.run(["bash", *script, "start"], env=env, capture_output=True, text=True, timeout=300)
    hold = None
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        hold = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True, env=env)
        assert hold.stdout.readline().strip() == "held"  # every GPU slot of the cluster is taken
        t0 = time.time()
        decision = device.decide("auto", address=f"127.0.0.1:{port}")
        took = time.time() - t0
        assert decision.device == "cpu" and "marks all its 2 GPU slot(s) logical" in decision.reason
        assert took < 60, took  # reading the declaration: no wait for a slot
    finally:
        if hold is not None:
            hold.kill()
        subprocess.run(["bash", *script, "stop"], env=env, capture_output=True, text=True, timeout=180)


def test_seeded_rollouts_reach_every_worker_as_the_runs_seed(load_args):
    """`--copo.seeded_rollouts` travels to the vLLM engine processes as ROLLOUT_SEED_ENV = --train.seed; without
    it the variable is not set, and the engines draw as OpenRLHF's do."""
    from openrlhf_copo.contract import ROLLOUT_SEED_ENV

    on_cuda = device.DeviceDecision(device.CUDA, "--copo.device cuda")
    args = load_args(copo_argv("--copo.seeded_rollouts", "--train.seed", "7"))
    assert driver.ray_init_kwargs(args, {}, on_cuda)["runtime_env"]["env_vars"][ROLLOUT_SEED_ENV] == "7"
    args = load_args(copo_argv())
    assert ROLLOUT_SEED_ENV not in driver.ray_init_kwargs(args, {}, on_cuda)["runtime_env"].get("env_vars", {})


def test_a_run_with_copo_and_device_refusals_names_them_all_in_one_message(load_args):
    """A run (not load_args) refused for a COPO setting and for settings the CPU path cannot run: one message names
    all three, each device one with the device it would get, so the user fixes them in one try (issue 68: the device
    refusals came only after the COPO one was fixed)."""
    args = load_args(copo_argv("--copo.device", "cpu", "--vllm.sync_backend", "nccl", "--train.enable_ema"))
    args.copo.eps = -1.0  # what copo_problems refuses (load_args itself would have refused it first)
    with pytest.raises(driver.DriverError) as e:
        driver.after_parse(args, driver.CLI)
    lines = str(e.value).splitlines()
    assert lines[0] == "3 settings are refused:" and len(lines) == 4, lines
    assert "--copo.eps -1.0 must be >= 0" in lines[1], lines
    assert lines[2].startswith("  - --vllm.sync_backend nccl: NCCL needs CUDA"), lines
    assert lines[2].endswith("(the actors would run on the CPU path: --copo.device cpu)"), lines
    assert lines[3].startswith("  - --train.enable_ema: OpenRLHF moves the EMA model to cuda"), lines
    with pytest.raises(driver.DriverError) as e:  # the argument checks alone ask no device
        driver.after_parse(args, driver.LOAD_ARGS)
    assert "NCCL" not in str(e.value) and "--copo.eps -1.0 must be >= 0" in str(e.value)
