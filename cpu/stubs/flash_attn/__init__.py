"""CPU stand-in for flash-attn (installed only by scripts/setup_cpu.sh, never on a GPU machine).

OpenRLHF imports flash-attn at module level (models/ring_attn_utils.py) although only packed
samples and ring attention use it. Its compiled CUDA kernels cannot exist on a CPU, so this
package provides the imported names and raises if any of them is ever called. The CPU path
refuses --ds.packing_samples and ring attention, so nothing calls them.
"""

__version__ = "0.0.0+cpu-stand-in"
CPU_STAND_IN = True


def _unavailable(name):
    def fail(*args, **kwargs):
        raise RuntimeError(
            f"flash_attn.{name} was called, but this is the CPU stand-in for flash-attn (no CUDA kernels). "
            "Packed samples / ring attention need a GPU: drop --ds.packing_samples and --ds.ring_attn_size."
        )

    fail.__name__ = name
    return fail


flash_attn_func = _unavailable("flash_attn_func")
flash_attn_varlen_func = _unavailable("flash_attn_varlen_func")
