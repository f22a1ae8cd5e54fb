"""Import-only stand-in: see flash_attn/__init__.py. `rearrange` is einops' own, as in the real module."""
from einops import rearrange  # noqa: F401

from flash_attn import _unavailable

index_first_axis = _unavailable("bert_padding.index_first_axis")
pad_input = _unavailable("bert_padding.pad_input")
unpad_input = _unavailable("bert_padding.unpad_input")
