"""Writing and reading files safely: one helper each, for every caller in the package.

- `atomic_path` / `write_atomic`: a reader sees the old file (or none) or the complete new one, never a
  half-written one (checkpoint settings, evaluation results, prepared data, the demo's models and prompts);
- `folder_lock`: one process at a time builds into a folder (the demo's model cache);
- `jsonl_rows`: JSON-lines rows with their line numbers; a bad line names the file and the line;
- `compact_finished_run` / `read_log`: a finished run's log stored compact (progress-bar redraws dropped, gzip), and
  read back whichever form is there; `write_json` and `save_figure`: generated reports as compact JSON and
  256-colour PNGs. The committed benchmark results travel with the working tree in one GPU call, beside the GPU
  suite's bundle (docs/multi-node-and-gpu.md, "the wheel bundle"); tests/test_tree_size.py keeps them within it.
"""

from __future__ import annotations

import errno
import fcntl
import gzip
import io
import json
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, List, Optional, Tuple, Type

__all__ = ["atomic_path", "folder_lock", "write_atomic", "jsonl_rows", "RUN_LOG", "COMPACT_SUFFIX",
           "compact_finished_run", "compact_log", "drop_progress_redraws", "read_log", "existing_log", "write_json",
           "save_figure", "compact_png"]


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


# ---------------------------------------------------------------------------------------------
# Compact results: what a finished run keeps, and the reports generated from the runs.

#: A run folder's log: the `train_ppo_ray` child's stdout and stderr (OpenRLHF's, Ray's, vLLM's and ours).
RUN_LOG = "train.log"
#: The suffix of a log's compact form (`compact_log`): gzip.
COMPACT_SUFFIX = ".gz"

#: Ray's prefix on a line a worker printed, colour codes included: `\x1b[36m(PPOTrainer pid=10998)\x1b[0m `.
_RAY_PREFIX = re.compile(r"(?:\x1b\[[0-9;]*m)?\([^()\n]*pid=\d+[^()\n]*\)(?:\x1b\[[0-9;]*m)? ?")
#: One tqdm render, alone on its piece: `desc: 40%|████      | 2/5 [00:01<00:01,  2.0it/s, loss=0.1]`, or without a
#: total `desc: 72 examples [00:00, 30680.68 examples/s]`, then spaces and cursor moves (`\x1b[A`, nested bars).
_TQDM_RENDER = re.compile(r"(?P<desc>[^\n]*?): *(?:\d{1,3}%\|[^|\n]*\| *)?(?P<n>\d+(?:\.\d+)?[kMG]?)"
                          r"(?:/(?P<total>\d+(?:\.\d+)?[kMG]?))?(?: [^\[\]\n]*)? \[[^\]\n]*\] *"
                          r"(?:\x1b\[[0-9;]*[A-Za-z])*")


def _tqdm_count(n: str) -> float:
    scale = {"k": 1e3, "M": 1e6, "G": 1e9}.get(n[-1], 1)
    return float(n.rstrip("kMG")) * scale


def drop_progress_redraws(text: str) -> str:
    """``text`` as a terminal would leave it, progress bar by progress bar: each tqdm bar keeps its last render of a
    run of redraws, every other line is kept whole.

    A redraw is a carriage return then the bar again; Ray forwards a worker's redraws as one line behind its
    `(Actor pid=N)` prefix. So each line is cut at its carriage returns into pieces (the Ray prefix, if any, kept on
    each), and a piece that is a bar render and nothing else is dropped when the next piece redraws the same bar: the
    same prefix, description and total, at a count no lower (a lower count is a new bar, and the old one's last
    render stays), with only empty lines between (where a nested bar redraws). A render with anything after it (a
    warning printed behind the bar) is never dropped."""
    pieces: List[Tuple[str, Optional[tuple], Optional[float], bool]] = []  # (piece, bar key, count, blank)
    for line in text.split("\n"):
        prefix_match = _RAY_PREFIX.match(line)
        prefix = prefix_match.group(0) if prefix_match else ""
        segments = [seg for seg in line[len(prefix):].split("\r") if seg.strip()] or [line[len(prefix):]]
        for seg in segments:
            render = _TQDM_RENDER.fullmatch(seg)
            key = (prefix, render.group("desc").strip(), render.group("total")) if render else None
            pieces.append((prefix + seg, key, _tqdm_count(render.group("n")) if render else None, not seg.strip()))
    dropped = set()
    for i, (_, key, count, _) in enumerate(pieces):
        if key is None:
            continue
        # a nested bar (tqdm's position=1) is redrawn below an empty line: the empty lines between go with it
        j = next((j for j in range(i + 1, len(pieces)) if not pieces[j][3]), None)
        if j is not None and pieces[j][1] == key and pieces[j][2] >= count:
            dropped.update(range(i, j))
    return "\n".join(piece for i, (piece, *_) in enumerate(pieces) if i not in dropped)


def compact_log(path) -> Path:
    """Replace the log at ``path`` by its compact form, ``path`` + `COMPACT_SUFFIX`: progress-bar redraws dropped
    (`drop_progress_redraws`), then gzip (no name or time in its header: the same log always gives the same bytes).
    Returns the compact file's path. A log already compacted (only the .gz there) is left as it is."""
    path = Path(path)
    compact = path.with_name(path.name + COMPACT_SUFFIX)
    if not path.exists():
        if compact.exists():
            return compact
        raise FileNotFoundError(f"{path}: no log to compact (nor {compact.name})")
    text = path.read_bytes().decode("utf-8", errors="surrogateescape")  # bytes as they are: no newline translation
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, compresslevel=9, mtime=0) as gz:
        gz.write(drop_progress_redraws(text).encode("utf-8", errors="surrogateescape"))
    with atomic_path(compact) as tmp:
        tmp.write_bytes(buffer.getvalue())
    path.unlink()  # only once the compact form is in place
    return compact


def existing_log(path) -> Path:
    """The log at ``path`` as it is on disk now: ``path`` itself, or its compact form when only that is there (a
    finished run's, `compact_finished_run`). Raises FileNotFoundError naming both when neither is."""
    path = Path(path)
    compact = path.with_name(path.name + COMPACT_SUFFIX)
    if path.exists() or not compact.exists():
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such log (nor {compact.name})")
        return path
    return compact


def read_log(path) -> str:
    """The text of the log at ``path``, or of its compact form (`existing_log`): one reader for a run still going and
    a finished one."""
    found = existing_log(path)
    data = gzip.decompress(found.read_bytes()) if found.name.endswith(COMPACT_SUFFIX) else found.read_bytes()
    return data.decode("utf-8", errors="replace")


def compact_finished_run(directory) -> None:
    """What a finished run keeps compact, called once it has finished (its `done.json` written; the comparison tool's
    runner, and scripts/compact_results.py for the runs made before): its log (`RUN_LOG`) as `compact_log` leaves it.
    A run whose log is compacted already, or that has none, is left as it is."""
    log = Path(directory) / RUN_LOG
    if log.exists():
        compact_log(log)


def write_json(path, data) -> None:
    """A generated report's JSON (regimes.json, learning_curve.json): one line, no indentation (it is read by code
    and by `python -m json.tool`, not by eye), written atomically."""
    write_atomic(path, json.dumps(data, separators=(",", ":")) + "\n")


def compact_png(path) -> None:
    """Rewrite the PNG at ``path`` with a palette of 256 colours (Pillow's median cut; a plot's antialiased lines
    make tens of thousands of RGBA shades that the eye does not tell apart), optimized: about a third of the size.
    An image already in palette mode is only re-saved."""
    from PIL import Image

    path = Path(path)
    with Image.open(path) as image:
        image.load()
    if image.mode != "P":
        image = image.convert("RGB").quantize(colors=256)
    with atomic_path(path) as tmp:
        image.save(tmp, format="PNG", optimize=True)


def save_figure(fig, path, dpi: int = 100) -> None:
    """A report's matplotlib figure as a compact PNG at ``dpi`` (`compact_png`)."""
    fig.savefig(path, dpi=dpi)
    compact_png(path)
