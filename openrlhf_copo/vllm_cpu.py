"""How a vLLM-CPU engine uses the machine: one setting, shared by the training pipeline's CPU path
(`openrlhf_ext.cpu`) and the standalone evaluation (`evaluation.evaluate`), neither of which imports the other.

Pure Python, standard library only.
"""

from __future__ import annotations

import os

#: vLLM-CPU sizes its KV cache from this (GiB); gpu_memory_utilization is ignored there.
KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"
#: The cores vLLM-CPU binds its model worker's OpenMP threads to ("auto": all but one, see `vllm_cpu_env`).
OMP_BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"


def vllm_cpu_env() -> dict:
    """How a vLLM-CPU engine uses the machine, unless the user's environment says otherwise: a 1 GiB KV cache,
    and its model worker on every core this process may use. vLLM's "auto" binding keeps one core for its
    scheduler process, which on a 2-core machine leaves the model one core: 480 greedy prompts of the demo took
    134 s bound to one core and 74 s bound to both, same tokens (`benchmarks/bench_vllm_cpu_binding.py`). The
    scheduler mostly waits on the worker, and the pipeline's phases take turns, so the cores are free."""
    cores = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
    return {KV_CACHE_ENV: os.environ.get(KV_CACHE_ENV) or "1", OMP_BIND_ENV: os.environ.get(OMP_BIND_ENV) or cores}
