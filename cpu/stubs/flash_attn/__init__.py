"""Import-only stand-in for flash-attn: the CPU environment's (scripts/setup_cpu.sh), and a GPU environment's
set up with `FLASH_ATTN=stub bash scripts/setup_gpu.sh` (no flash-attn compile).

OpenRLHF imports flash-attn at module level (models/ring_attn_utils.py) although only packed samples, ring
attention and a flash attention implementation use it. This package provides the imported names and raises if any
of them is ever called. The driver refuses those settings while it is installed (openrlhf_ext/kernels.py), so
nothing calls them. It has no package metadata, so transformers does not take it for flash-attn either.
"""

__version__ = "0.0.0+stand-in"
#: What `openrlhf_copo.openrlhf_ext.kernels.flash_attn_is_stand_in` looks for.
__openrlhf_copo_stand_in__ = True
CPU_STAND_IN = True  # the older name of the same mark


def _unavailable(name):
    def fail(*args, **kwargs):
        raise RuntimeError(
            f"flash_attn.{name} was called, but this is the import-only stand-in for flash-attn (no CUDA kernels). "
            "Packed samples / ring attention / flash attention need the real flash-attn: drop --ds.packing_samples "
            "and --ds.ring_attn_size, use --ds.attn_implementation sdpa, or compile it (bash scripts/setup_gpu.sh)."
        )

    fail.__name__ = name
    return fail


flash_attn_func = _unavailable("flash_attn_func")
flash_attn_varlen_func = _unavailable("flash_attn_varlen_func")
