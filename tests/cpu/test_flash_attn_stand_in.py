"""The CPU environment's flash-attn stand-in: importable by OpenRLHF, fails loudly if ever called."""

import importlib
import importlib.util

import pytest


def test_openrlhf_imports_it_and_it_is_the_stand_in():
    import flash_attn

    import openrlhf.models.ring_attn_utils  # noqa: F401  (imports flash_attn at module level)

    assert getattr(flash_attn, "CPU_STAND_IN", False), "expected the CPU stand-in, found a real flash-attn"


@pytest.mark.parametrize("module, name", [("flash_attn.bert_padding", "unpad_input"),
                                          ("flash_attn.bert_padding", "pad_input"),
                                          ("flash_attn.bert_padding", "index_first_axis"),
                                          ("flash_attn.utils.distributed", "all_gather"),
                                          ("flash_attn", "flash_attn_varlen_func")])
def test_every_entry_point_raises(module, name):
    fn = getattr(importlib.import_module(module), name)
    with pytest.raises(RuntimeError, match="stand-in for flash-attn.*--ds.packing_samples"):
        fn()


def test_transformers_does_not_mistake_it_for_flash_attention():
    from transformers.utils import is_flash_attn_2_available

    assert not is_flash_attn_2_available()


def test_no_triton_in_the_cpu_environment():
    # with triton installed, OpenRLHF's log_probs_from_logits picks a Triton kernel that needs CUDA
    assert importlib.util.find_spec("triton") is None
