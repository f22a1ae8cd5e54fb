"""Ray's `worker_process_setup_hook` for COPO runs: safe on GPU nodes whatever the import order.

Ray runs the hook when a worker process starts, *before* it narrows `CUDA_VISIBLE_DEVICES` to the
GPUs of the actor that process will host. Anything that initialises CUDA there (a call of
`torch.cuda.is_available()` without `PYTORCH_NVML_BASED_CUDA_CHECK`, which DeepSpeed happens to set
on import) fixes the process's view of the GPUs too early: an actor given GPU 1 would see GPU 0,
and on a multi-GPU node OpenRLHF's actors would pile onto one GPU.

So this module imports nothing but the standard library, and the hook does these things only:

1. silences pynvml's deprecation warning in the worker and the processes it starts (`openrlhf_copo.noise`, standard
   library only): a worker of a cluster joined from elsewhere did not inherit the driver's filter;
2. registers a post-import hook: when the actor itself first imports one of OpenRLHF's patched
   modules (by then Ray has narrowed its GPUs, and OpenRLHF's own imports touch CUDA anyway), the
   COPO patch for that module is installed right after the module has run (`runtime_patches/`);
3. on a CPU run, which the driver chose and announced in `OPENRLHF_COPO_CPU=1` (no CUDA to
   touch there), installs the CPU device path (`cpu.py`). No CUDA query decides anything here;
4. rewrites a `TORCH_CUDA_ARCH_LIST` that DeepSpeed cannot parse (`deepspeed_arch_list`), before the actor's
   DeepSpeed JIT-builds its fused Adam.
"""

from __future__ import annotations

import importlib.abc
import os
import re
import sys
import threading

from openrlhf_copo.contract import CPU_ENV, RAY_WORKER_SETUP_HOOK
from openrlhf_copo.noise import silence_pynvml_deprecation

#: Module -> the function of `openrlhf_copo.openrlhf_ext.runtime_patches` that patches it once it is loaded.
POST_IMPORT_PATCHES = {
    "openrlhf.trainer.ppo_utils.experience_maker": "install_experience_maker",
    "openrlhf.trainer.ray.ppo_actor": "install_ppo_actor",
    "openrlhf.trainer.ppo_trainer": "install_ppo_trainer",
    "openrlhf.utils.agent": "install_agent",
}


def _run_patch(module) -> None:
    from openrlhf_copo.openrlhf_ext import runtime_patches

    getattr(runtime_patches, POST_IMPORT_PATCHES[module.__name__])(module)
    # One line per patched module and worker: Ray prefixes it with the actor and its pid, so a job's log
    # shows which workers, on which nodes, run with the patches.
    print(f"openrlhf_copo: patched {module.__name__}", file=sys.stderr, flush=True)


class _PatchingLoader(importlib.abc.Loader):
    """The module's own loader, then our patch of the freshly executed module."""

    def __init__(self, loader) -> None:
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        _run_patch(module)

    def __getattr__(self, name):  # get_source, is_package, resource readers, ...
        return getattr(self._loader, name)


class PostImportPatcher(importlib.abc.MetaPathFinder):
    """Finds the patched modules with the other finders and wraps their loaders."""

    _local = threading.local()

    def find_spec(self, fullname, path, target=None):
        if fullname not in POST_IMPORT_PATCHES or getattr(self._local, "busy", False):
            return None
        self._local.busy = True  # the other finders may import; do not recurse into ourselves
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    if spec.loader is not None:
                        spec.loader = _PatchingLoader(spec.loader)
                    return spec
            return None
        finally:
            self._local.busy = False


def install_post_import_patches() -> None:
    """Patch each OpenRLHF module when it is first imported (at once if it already is). Idempotent."""
    if not any(isinstance(f, PostImportPatcher) for f in sys.meta_path):
        sys.meta_path.insert(0, PostImportPatcher())
    for name in POST_IMPORT_PATCHES:
        if name in sys.modules:
            _run_patch(sys.modules[name])


def deepspeed_arch_list(environ=os.environ) -> None:
    """Drop the arch suffixes of `TORCH_CUDA_ARCH_LIST` ("9.0a" -> "9.0") in ``environ``, saying so on stderr.

    Hopper images set "9.0a" (the arch-specific features); DeepSpeed 0.19.6 JIT-builds FusedAdam, OpenRLHF's
    optimizer on CUDA, for the archs listed there and parses each as integers, so the actor's first step fails with
    `ValueError: invalid literal for int() with base 10: '0a'` (seen on an H200 on 2026-11-26,
    docs/gpu-runs/). The suffix only adds arch-specific instructions, which fused Adam does not use."""
    archs = environ.get("TORCH_CUDA_ARCH_LIST", "")
    plain = re.sub(r"(\d+\.\d+)[af]", r"\1", archs)
    if plain != archs:
        environ["TORCH_CUDA_ARCH_LIST"] = plain
        print(f"openrlhf_copo: TORCH_CUDA_ARCH_LIST {archs!r} -> {plain!r} (DeepSpeed's JIT builds cannot parse an "
              "arch suffix)", file=sys.stderr, flush=True)


def ray_worker_setup() -> None:
    """Ray `worker_process_setup_hook`: runs in every Ray worker process before its first task."""
    silence_pynvml_deprecation()
    install_post_import_patches()
    deepspeed_arch_list()
    if os.environ.get(CPU_ENV) == "1":
        from openrlhf_copo.openrlhf_ext import cpu

        cpu.install()


assert RAY_WORKER_SETUP_HOOK == f"{__name__}.ray_worker_setup", "contract.RAY_WORKER_SETUP_HOOK names this hook"
