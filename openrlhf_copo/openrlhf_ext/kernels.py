"""flash-attn's compiled kernels: which settings of a run need them, and whether this environment has them.

OpenRLHF 0.11.2 imports `flash_attn` at module level (`models/ring_attn_utils.py`) although only packed samples,
ring attention and a flash attention implementation call into it. An environment without the compiled package
(the CPU environment; a GPU environment set up with `FLASH_ATTN=stub bash scripts/setup_gpu.sh`) carries the
import-only stand-in `cpu/stubs/flash_attn`, which raises if called. Both the CPU path's refusals (`cpu.py`) and
the stand-in's (`stand_in_problems`, on the CUDA path) ask `flash_attn_flag` which flag needs the kernels.
"""

from __future__ import annotations

import importlib
from typing import List, Optional

#: The `--ds.attn_implementation` values for which transformers imports flash-attn 2's package (`flash_attn`): in
#: transformers 5.15 to 5.19, `modeling_flash_attention_utils._lazy_imports` imports `flash_attn` for
#: "flash_attention_2" (and `PreTrainedModel` strips the deprecated "paged|" prefix first). "flash_attention_3"
#: imports `flash_attn_interface` (the flash-attn-3 package), "flash_attention_4" `flash_attn.cute` (flash-attn-4's),
#: and a hub kernel ("kernels-community/vllm-flash-attn3", ...) loads through the `kernels` package: none of them
#: calls flash-attn 2, so none of them is refused for its stand-in.
FLASH_ATTN_2_IMPLEMENTATIONS = ("flash_attention_2", "paged|flash_attention_2")

#: The attributes that mark the import-only stand-in (cpu/stubs/flash_attn/__init__.py; CPU_STAND_IN in copies
#: installed before the stand-in served GPU environments too).
STAND_IN_ATTRS = ("__openrlhf_copo_stand_in__", "CPU_STAND_IN")


def flash_attn_flag(args) -> Optional[str]:
    """The flag of this run that needs flash-attn 2's compiled kernels, as a user types it, or None.

    On OpenRLHF's final arguments: `--ds.ring_attn_size` > 1 and `--train.dynamic_batch_enable` turn on
    `--ds.packing_samples`, which turns the attention implementation to flash_attention_2; the flag named is
    the one the user gave."""
    ds, train = args.ds, args.train
    if getattr(ds, "ring_attn_size", 1) > 1:
        return f"--ds.ring_attn_size {ds.ring_attn_size}"
    if getattr(train, "dynamic_batch_enable", False):
        return "--train.dynamic_batch_enable (it turns on --ds.packing_samples)"
    if getattr(ds, "packing_samples", False):
        return "--ds.packing_samples"
    if getattr(ds, "attn_implementation", None) in FLASH_ATTN_2_IMPLEMENTATIONS:
        return f"--ds.attn_implementation {ds.attn_implementation}"
    return None


def cuda_attention_flag(args) -> Optional[str]:
    """The `--ds.attn_implementation` of this run that has kernels for CUDA only (any flash attention, a hub kernel),
    as a user types it, or None: the CPU path runs sdpa and eager."""
    implementation = str(getattr(args.ds, "attn_implementation", ""))
    if "flash" in implementation or "/" in implementation:
        return f"--ds.attn_implementation {implementation}"
    return None


def flash_attn_is_stand_in() -> bool:
    """Whether `import flash_attn` gives the import-only stand-in (False where no flash_attn imports at all)."""
    try:
        module = importlib.import_module("flash_attn")
    except ImportError:
        return False
    return any(getattr(module, attr, False) for attr in STAND_IN_ATTRS)


def stand_in_problems(args) -> List[str]:
    """On the CUDA path: a run that needs flash-attn's kernels while this environment has the stand-in, one line."""
    flag = flash_attn_flag(args)
    if flag and flash_attn_is_stand_in():
        return [f"{flag} needs flash-attn's compiled kernels, and this environment has its import-only stand-in "
                "(FLASH_ATTN=stub): run with --ds.attn_implementation sdpa and no packing, or compile flash-attn "
                "(bash scripts/setup_gpu.sh)"]
    return []
