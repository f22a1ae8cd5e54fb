"""OpenRLHF's Ray PPO pipeline on a machine without CUDA: every CPU adaptation, in one place.

Nothing here runs unless the driver decided the CPU path (`--copo.device`, `device.py`): only then does it
export `OPENRLHF_COPO_CPU=1` to the workers, and only then does any worker install these patches.

What a CPU run changes, in the order unmodified OpenRLHF 0.11.2 breaks without it
(docs: field notes, section 4):

1. Ray: the pipeline asks for GPUs (`num_gpus`, placement bundles `{"GPU": 1, "CPU": 1}`).
   The CPU path starts Ray on 127.0.0.1 with one logical "GPU" slot per DeepSpeed rank and
   vLLM engine (`ray_init_kwargs`): Ray's GPU resource is a counter here; no CUDA is touched.
   Ray, vLLM and gloo are kept on the loopback address (`loopback_env`).
2. CUDA device calls on the training path (`torch.cuda.set_device`, `synchronize`,
   `current_device`, `current_stream`, the "cuda" device mesh, the replay buffer's
   `cuda:N` target device) become their CPU meaning (`apply_torch_device_path`).
3. Weight sync actor -> vLLM: OpenRLHF builds a NCCL communicator whatever
   `--vllm.sync_backend` says; here both sides build a gloo group instead (`_GlooBroadcaster`).
4. vLLM-CPU repacks linear weights, so per-tensor `load_weights` fails: the vLLM worker
   buffers the broadcast tensors and reloads them once per sync (`_cpu_update_weight`).
5. With tied embeddings vLLM-CPU keeps a stale packed `lm_head` after a reload (a silent
   logprob error): it is re-packed after every reload.
6. vLLM runs its model in processes it spawns itself, which Ray's worker hook never reaches:
   the patches arrive there as a vLLM general plugin (`vllm_plugin`, entry point in
   pyproject.toml), active only when the driver exported `OPENRLHF_COPO_CPU=1`.
7. `--ds.param_dtype fp32` (CPU path only): OpenRLHF knows bf16 and fp16, and a CPU without bf16
   units runs bf16 matmuls in slow software paths (SmolLM2-135M, 8 x 160 tokens, forward + backward:
   bf16 255 s, fp32 8 s on this project's 2-core CI machine). With fp32 the actor (and reference)
   load in float32, DeepSpeed trains in fp32 (neither its bf16 nor fp16 section is enabled) and the
   vLLM engines, which OpenRLHF always builds in bfloat16, run in float32 too, so the weight sync
   carries one dtype end to end (`apply_fp32`; `ray_init_kwargs` sets `OPENRLHF_COPO_VLLM_DTYPE`).
   Without ZeRO (stage 0), DeepSpeed clips fp32 gradients but drops the norm it computed, so OpenRLHF would
   log `actor_grad_norm` 0 at every step; the engine now keeps it.
8. DeepSpeed's CPU ops (fused_adam, shm_comm) are compiled on first use by torch's JIT builder, which runs
   whichever `ninja` is first on PATH in a cache shared by every Python environment of the user
   (~/.cache/torch_extensions). Two ninja versions (the system's 1.11 and the pip wheel's 1.13, say) rewrite
   each other's build log ("build log version is too old; starting over") and a build tree made for another
   environment's torch has other include paths: both rebuild the ops, about 70 s per op on 2 cores, with
   every rank waiting on the build lock. So setup and every process of a run use this environment's own
   ninja and its own build folder (`use_this_environments_op_builds`).
"""

from __future__ import annotations

import functools
import os
import sys
from typing import List

from openrlhf_copo.contract import CPU_ENV, ROLLOUT_SEED_ENV
from openrlhf_copo.openrlhf_ext.device import cluster_address, cuda_available
from openrlhf_copo.vllm_cpu import vllm_cpu_env

#: The dtype the vLLM engines of a CPU run are built with instead of OpenRLHF's fixed bfloat16.
VLLM_DTYPE_ENV = "OPENRLHF_COPO_VLLM_DTYPE"
#: `--ds.param_dtype` values: OpenRLHF's, plus the CPU path's fp32.
FP32 = "fp32"
_APPLIED = False


def cpu_problems(args) -> List[str]:
    """Settings that cannot work on the CPU path, one line each."""
    from openrlhf_copo.openrlhf_ext.kernels import cuda_attention_flag, flash_attn_flag

    p = []
    v, ds = args.vllm, args.ds
    if getattr(v, "sync_with_ray", False):
        p.append("--vllm.sync_with_ray fails on the CPU (Ray's collective group cannot pair gloo ranks here): drop it")
    if getattr(v, "enable_sleep", False) or getattr(ds, "enable_sleep", False):
        p.append("--vllm.enable_sleep / --ds.enable_sleep: vLLM sleep mode is not supported on the CPU platform")
    if getattr(v, "sync_backend", "nccl") != "gloo":
        p.append(f"--vllm.sync_backend {v.sync_backend}: NCCL needs CUDA; add --vllm.sync_backend gloo")
    flash = flash_attn_flag(args) or cuda_attention_flag(args)
    if flash:
        p.append(f"{flash} needs flash-attention, which has no CPU kernels: use --ds.attn_implementation sdpa (or "
                 "eager) without packing")
    if getattr(ds, "use_liger_kernel", False):
        p.append("--ds.use_liger_kernel: liger's Triton kernels need CUDA")
    if getattr(ds, "load_in_4bit", False):
        p.append("--ds.load_in_4bit: bitsandbytes 4-bit needs CUDA")
    if getattr(args.train, "enable_ema", False):
        p.append("--train.enable_ema: OpenRLHF moves the EMA model to cuda; not supported on the CPU path")
    if getattr(v, "tensor_parallel_size", 1) > 1:
        p.append("--vllm.tensor_parallel_size > 1 is not supported on the CPU path")
    return p


def extend_parser(parser) -> None:
    """`--ds.param_dtype` also accepts fp32 (the CPU path's; refused on a GPU by `gpu_problems`)."""
    for action in parser._actions:
        if action.dest == "ds.param_dtype" and action.choices and FP32 not in action.choices:
            action.choices = list(action.choices) + [FP32]
            action.help = (action.help or "") + "; fp32: CPU path only (openrlhf_copo)"


def gpu_problems(args) -> List[str]:
    """Settings only the CPU path understands, on a machine that takes the GPU path; and a run that needs
    flash-attn's kernels where only its import-only stand-in is installed (`kernels.stand_in_problems`)."""
    if getattr(args.ds, "param_dtype", None) == FP32:
        return ["--ds.param_dtype fp32 is the CPU path's (OpenRLHF on a GPU trains in bf16 or fp16): drop it"]
    from openrlhf_copo.openrlhf_ext.kernels import stand_in_problems

    return stand_in_problems(args)


def device_slots(args) -> int:
    """How many logical GPU slots the run's Ray placement asks for (one per rank / engine)."""
    n = args.actor.num_nodes * args.actor.num_gpus_per_node
    if args.algo.kl.init_coef > 0:
        n += args.ref.num_nodes * args.ref.num_gpus_per_node
    if getattr(args.critic, "model_name_or_path", None):
        n += args.critic.num_nodes * args.critic.num_gpus_per_node
    if args.vllm.num_engines:
        n += args.vllm.num_engines * args.vllm.tensor_parallel_size
    return max(1, n)


def loopback_env() -> dict:
    """Environment of a CPU run, set in the driver before Ray starts and inherited by every worker:
    take the CPU path, and keep Ray, vLLM and the process groups on 127.0.0.1."""
    env = {
        CPU_ENV: "1",
        # Ray's own switch for a loopback-only, single-machine cluster (node address 127.0.0.1).
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "VLLM_HOST_IP": "127.0.0.1",
        **vllm_cpu_env(),
        "TOKENIZERS_PARALLELISM": "false",
        # DeepSpeed's accelerator, decided here rather than guessed on import (the guess prints a warning in every
        # process: `openrlhf_copo.noise`).
        "DS_ACCELERATOR": "cpu",
        # Ray sets OMP_NUM_THREADS=1 in an actor that asks for one CPU, as OpenRLHF's do: torch would train
        # on one core. The pipeline's phases take turns (generate, score, train), so each may use them all.
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS") or str(len(os.sched_getaffinity(0))),
    }
    if os.path.exists("/sys/class/net/lo"):
        env["GLOO_SOCKET_IFNAME"] = "lo"
    return env


def prepare_driver() -> None:
    """The CPU path's environment in the driver, before OpenRLHF's `ray.init`. (Ray reads its cluster switch when
    imported, which is why the driver also starts a local cluster on 127.0.0.1 explicitly: `ray_init_kwargs`.)"""
    for key, value in loopback_env().items():
        os.environ.setdefault(key, value)


def ray_init_kwargs(args, kwargs: dict) -> dict:
    """`ray.init` arguments for a CPU run: a local cluster with one logical GPU slot per rank / engine."""
    kwargs = dict(kwargs)
    env = dict(kwargs.get("runtime_env") or {})
    dtype = {VLLM_DTYPE_ENV: "float32"} if getattr(args.ds, "param_dtype", None) == FP32 else {}
    env["env_vars"] = {**loopback_env(), **dtype, **dict(env.get("env_vars") or {})}
    kwargs["runtime_env"] = env
    if cluster_address() is None and "address" not in kwargs:
        # No cluster to join (RAY_ADDRESS unset, no `ray start` cluster on this machine: the one `--copo.device auto`
        # asked, when it asked one): a cluster of its own, address "local".
        slots = device_slots(args)
        kwargs.update(address="local", num_cpus=max(8, 2 * slots + 4), num_gpus=slots,
                      _node_ip_address="127.0.0.1", include_dashboard=False)
    return kwargs


# ---------------------------------------------------------------------------------------------
# In-process patches (every Ray worker through the setup hook; vLLM's own processes through the plugin).


class _GlooBroadcaster:
    """The actor -> vLLM weight-sync group on gloo, with the `broadcast(tensor, src, stream)` that
    OpenRLHF calls on its NCCL communicator. Ranks are the group's own (0 = DeepSpeed rank 0)."""

    def __init__(self, master_address, master_port, rank, world_size):
        from vllm.distributed.utils import stateless_init_torch_distributed_process_group

        self.pg = stateless_init_torch_distributed_process_group(
            master_address, master_port, rank, world_size, backend="gloo")

    def broadcast(self, tensor, src=0, stream=None):
        self.pg.broadcast(tensor, src).wait()


def _gloo_stateless_init_process_group(master_address, master_port, rank, world_size, device=None):
    return _GlooBroadcaster(master_address, master_port, rank, world_size)


def _cpu_update_weight(self, name, dtype, shape, empty_cache=False):
    """vLLM worker side of one broadcast tensor. OpenRLHF sends the parameters one by one and marks
    the last with ``empty_cache=True``; vLLM-CPU can only reload them all at once (it repacks
    linear weights), so tensors are buffered and reloaded on the last one."""
    import torch

    if dtype != self.model_config.dtype:
        raise RuntimeError(f"weight sync dtype mismatch for {name}: actor {dtype}, vLLM {self.model_config.dtype}")
    weight = torch.empty(shape, dtype=dtype)
    self._model_update_group.broadcast(weight, src=0)
    pending = self.__dict__.setdefault("_copo_pending_weights", [])
    pending.append((name, weight))
    if empty_cache:
        model = self.model_runner.get_model()
        _filter_expected_reload_warnings(model)
        self.model_runner.reload_weights(weights_iterator=iter(pending), is_checkpoint_format=True)
        _repack_tied_lm_head(model)
        pending.clear()


#: The logger of vLLM's layer-wise reload, which warns "<layer class>: Failed to load weights" for every layer that
#: has loadable tensors but received none, and puts that layer's previous tensors back.
VLLM_RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"


class _ExpectedReloadWarnings:
    """Drops the reload warnings that are true of every sync and harmless, so that a real one stands out:

    - rotary embeddings (`RotaryEmbedding` and its variants): their cos/sin cache is computed, never part of a
      checkpoint or of OpenRLHF's broadcast, so the previous one (the right one) is put back;
    - a tied `ParallelLMHead`: OpenRLHF sends the shared embedding once, as the embedding's weight; the head's own
      packed copy is put back stale and then re-packed from the synced embedding (`_repack_tied_lm_head`, checked by
      the end-to-end test's logprob gap after a sync).
    """

    def __init__(self, tied_lm_head: bool) -> None:
        self.tied_lm_head = tied_lm_head

    def filter(self, record) -> bool:
        if record.getMessage().endswith(": Failed to load weights") and record.args:
            layer = str(record.args[0])
            if "RotaryEmbedding" in layer or (layer == "ParallelLMHead" and self.tied_lm_head):
                return False
        return True


def _filter_expected_reload_warnings(model) -> None:
    import logging

    logger = logging.getLogger(VLLM_RELOAD_LOGGER)
    if any(isinstance(f, _ExpectedReloadWarnings) for f in logger.filters):
        return
    config = getattr(model, "config", None)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    logger.addFilter(_ExpectedReloadWarnings(tied))
    print("openrlhf_copo: vLLM reloads the synced weights at once on the CPU; its 'Failed to load weights' warnings "
          "for rotary embeddings (a computed cache, never synced)" + (" and the tied LM head (re-packed from the "
          "synced embedding)" if tied else "") + " are expected and not shown; any other layer's still is",
          file=sys.stderr, flush=True)


def _repack_tied_lm_head(model) -> None:
    """With tied embeddings, vLLM-CPU's packed copy of lm_head survives a reload unchanged: re-pack it."""
    lm_head = getattr(model, "lm_head", None)
    method = getattr(lm_head, "quant_method", None)
    if lm_head is not None and method is not None and hasattr(method, "process_weights_after_loading"):
        method.process_weights_after_loading(lm_head)


def _replace(owner, name: str, replacement) -> None:
    """``owner.name = replacement``, for an OpenRLHF symbol: each one is listed in `versions.PATCHED_SYMBOLS`, whose
    check reads the original's signature (kept as the replacement's ``__wrapped__``, as `functools.wraps` does)."""
    import inspect

    replacement.__wrapped__ = inspect.unwrap(getattr(owner, name))
    setattr(owner, name, replacement)


def apply_torch_device_path() -> None:
    """CUDA device calls of OpenRLHF's training path, given their CPU meaning (this process only)."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh

    import openrlhf.trainer.ppo_utils.replay_buffer as replay_buffer
    import openrlhf.trainer.ray.ppo_actor as ppo_actor
    import openrlhf.utils.deepspeed.deepspeed as ds_strategy
    import openrlhf.utils.distributed_util as distributed_util

    cpu = torch.device("cpu")
    torch.cuda.set_device = lambda device=None: None
    torch.cuda.synchronize = lambda device=None: None
    torch.cuda.current_device = lambda: cpu  # used as `.to(...)` / `device=` targets
    torch.cuda.current_stream = lambda device=None: None
    _replace(ds_strategy, "init_device_mesh", lambda _device_type, *a, **k: init_device_mesh("cpu", *a, **k))

    original_buffer_init = replay_buffer.NaiveReplayBuffer.__init__

    @functools.wraps(original_buffer_init)
    def buffer_init(self, *args, **kwargs):
        torch.cuda.current_device = lambda: 0  # its f"cuda:{...}" needs an index; the target becomes the CPU below
        try:
            original_buffer_init(self, *args, **kwargs)
        finally:
            torch.cuda.current_device = lambda: cpu
        self.target_device = cpu

    _replace(replay_buffer.NaiveReplayBuffer, "__init__", buffer_init)
    _replace(distributed_util, "stateless_init_process_group", _gloo_stateless_init_process_group)
    _replace(ppo_actor, "stateless_init_process_group", _gloo_stateless_init_process_group)


def apply_vllm_worker_path() -> None:
    """The vLLM worker extension's weight loading, for vLLM-CPU (in the process that holds the model)."""
    from openrlhf.trainer.ray import vllm_worker_wrap

    _replace(vllm_worker_wrap.WorkerWrap, "update_weight", _cpu_update_weight)


def apply_fp32() -> None:
    """`--ds.param_dtype fp32`: OpenRLHF's dtype lookup learns "fp32"; vLLM engines are built in
    ``$OPENRLHF_COPO_VLLM_DTYPE`` (set by the driver for an fp32 run) instead of OpenRLHF's bfloat16. The same
    engine-config hook schedules prefills whole under `--copo.seeded_rollouts` (see below)."""
    import torch

    import openrlhf.utils.utils as orl_utils

    original = orl_utils.convert_to_torch_dtype
    if not getattr(original, "__openrlhf_copo_patched__", False):
        @functools.wraps(original)
        def convert_to_torch_dtype(param_dtype: str):
            return torch.float32 if param_dtype == FP32 else original(param_dtype)

        convert_to_torch_dtype.__openrlhf_copo_patched__ = True
        _replace(orl_utils, "convert_to_torch_dtype", convert_to_torch_dtype)

    from vllm.engine.arg_utils import EngineArgs

    original_config = EngineArgs.create_engine_config
    if getattr(original_config, "__openrlhf_copo_patched__", False):
        return

    @functools.wraps(original_config)
    def create_engine_config(self, *args, **kwargs):
        dtype = os.environ.get(VLLM_DTYPE_ENV)
        if dtype:
            self.dtype = dtype
        if os.environ.get(ROLLOUT_SEED_ENV) is not None:
            # vLLM rewinds a seeded request's generator (`set_offset`) when its prompt's prefill is split over
            # steps (chunked prefill); a CPU generator has no offset, and the engine dies ("CPU Generator does
            # not use offset"). With --copo.seeded_rollouts on the CPU, prefills are scheduled whole.
            self.enable_chunked_prefill = False
        return original_config(self, *args, **kwargs)

    create_engine_config.__openrlhf_copo_patched__ = True
    EngineArgs.create_engine_config = create_engine_config
    _keep_fp32_grad_norm()


def _keep_fp32_grad_norm() -> None:
    """DeepSpeed 0.19.6 clips fp32 gradients without ZeRO in `DeepSpeedEngine.clip_fp32_gradients`, which drops the
    norm `clip_grad_norm_` returns: `get_global_grad_norm()` stays None and OpenRLHF logs a gradient norm of 0 at
    every step (bf16, fp16 and every ZeRO stage keep theirs). The same clipping, keeping the norm."""
    from deepspeed.runtime.engine import DeepSpeedEngine
    from deepspeed.runtime.utils import clip_grad_norm_

    if getattr(DeepSpeedEngine.clip_fp32_gradients, "__openrlhf_copo_patched__", False):
        return

    def clip_fp32_gradients(self):
        self._global_grad_norm = clip_grad_norm_(parameters=self.module.parameters(),
                                                 max_norm=self.gradient_clipping(), mpu=self.mpu)

    clip_fp32_gradients.__openrlhf_copo_patched__ = True
    DeepSpeedEngine.clip_fp32_gradients = clip_fp32_gradients


def torch_extensions_dir() -> str:
    """Where this Python environment's JIT-built ops live: $TORCH_EXTENSIONS_DIR if set, else a folder inside the
    environment (a virtualenv's own, not the user-wide ~/.cache/torch_extensions)."""
    return os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.join(sys.prefix, "torch_extensions")


def use_this_environments_op_builds() -> None:
    """This process builds and finds DeepSpeed's JIT ops in `torch_extensions_dir()`, with the `ninja` of this
    environment first on PATH when it has one (field 8 of the module docstring). Setup calls it before building
    the ops, every process of a CPU run before using them."""
    os.environ["TORCH_EXTENSIONS_DIR"] = torch_extensions_dir()
    bin_dir = os.path.dirname(sys.executable)
    path = os.environ.get("PATH", "").split(os.pathsep)
    if os.path.exists(os.path.join(bin_dir, "ninja")) and path[:1] != [bin_dir]:
        os.environ["PATH"] = os.pathsep.join([bin_dir] + [p for p in path if p != bin_dir])


def install() -> None:
    """Install the CPU path in this process (idempotent). Workers call this when the driver chose the CPU
    path (`OPENRLHF_COPO_CPU=1`): the choice is the driver's, made once, never a worker's CUDA query."""
    global _APPLIED
    if not _APPLIED:
        from openrlhf_copo.openrlhf_ext.runtime_patches.versions import (CPU_PATH, PATCHED_SYMBOLS, check_symbol,
                                                                         check_vllm)

        for (module, qualname), (_, patch) in PATCHED_SYMBOLS.items():
            if patch == CPU_PATH:
                check_symbol(module, qualname)  # an openrlhf whose symbols moved fails here, in one line
        check_vllm(CPU_PATH)  # and a vLLM without the gloo group, the engine config hook or the weight reload
        use_this_environments_op_builds()
        apply_torch_device_path()
        apply_vllm_worker_path()
        apply_fp32()
        _APPLIED = True


def apply() -> bool:
    """In the driver (and tests): install the CPU path if this machine has no CUDA. Returns whether it is active."""
    if cuda_available():
        return False
    install()
    return True


def vllm_plugin() -> None:
    """vLLM general plugin (entry point `vllm.general_plugins`): runs in every process vLLM starts,
    including the spawned engine-core/worker processes that Ray's hook never reaches. A no-op
    unless the driver chose the CPU path."""
    if os.environ.get(CPU_ENV) == "1":
        install()
