"""Import-only stand-in: see flash_attn/__init__.py."""
from flash_attn import _unavailable

all_gather = _unavailable("utils.distributed.all_gather")
