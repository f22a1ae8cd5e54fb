"""Writing and reading files safely: one helper each, for every caller in the package.

- `atomic_path` / `write_atomic`: a reader sees the old file (or none) or the complete new one, never a
  half-written one (checkpoint settings, evaluation results, prepared data, the demo's models and prompts);
- `folder_lock`: one process at a time builds into a folder (the demo's model cache);
- `jsonl_rows`: JSON-lines rows with their line numbers; a bad line names the file and the line.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
import json
from typing import Iterator, Tuple, Type

__all__ = ["atomic_path", "folder_lock", "write_atomic", "jsonl_rows"]


@contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on `folder` (created if missing) for the block: a second process asking for the same
    lock waits until the first one's block ends. The lock is on the folder itself (`flock` on its descriptor), so
    nothing is left behind, and the kernel drops it if the holder dies."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


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


def write_atomic(path, text: str) -> None:
    """Replace the file at ``path`` with ``text`` in one rename (see `atomic_path`)."""
    with atomic_path(Path(path)) as tmp:
        tmp.write_text(text, encoding="utf-8")


def jsonl_rows(path, error: Type[Exception] = ValueError, *, partial_last_line: bool = False) -> Iterator[Tuple[int, dict]]:
    """(line number, row) of each non-blank line of a JSON-lines file. A line that is not JSON raises
    ``error("<path>:<line>: not JSON (...)")``; with ``partial_last_line`` a bad *last* line is skipped
    instead (a file another process is appending to right now). Read lazily, one line at a time."""
    with open(path, encoding="utf-8") as f:  # line by line: a file of millions of rows is never held whole
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield n, json.loads(line)
            except ValueError as e:
                if partial_last_line and not f.read():
                    return  # the last line: still being written
                raise error(f"{path}:{n}: not JSON ({e})") from None
