"""Helpers of scripts/setup_gpu.sh and scripts/check_gpu_install.sh (standard library, plus `packaging` where named).

    python scripts/gpu_install.py openrlhf-deps [--report REPORT]   openrlhf's requirements with its [vllm] extra,
        flash-attn left out, one a line: read from the installed openrlhf (setup_gpu.sh FLASH_ATTN=stub, after
        `pip install --no-deps openrlhf`), or from a pip --report that resolved it (check_gpu_install.sh); needs
        `packaging`
    python scripts/gpu_install.py summary REPORT                     the resolved versions of a pip --report
    python scripts/gpu_install.py drop-stand-in SITE                 remove SITE/flash_attn if it is the import-only
        stand-in (an earlier FLASH_ATTN=stub), before the compile; a compiled flash-attn stays (setup_gpu.sh rerun)
"""

from __future__ import annotations

import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository: its kernels.py
from openrlhf_copo.openrlhf_ext.kernels import STAND_IN_ATTRS  # noqa: E402  (standard library only)

#: The packages whose resolved versions the check prints, in this order.
SHOWN = ("torch", "vllm", "openrlhf", "deepspeed", "ray", "transformers", "flash-attn", "math-verify")
FLASH_ATTN = "flash-attn"


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _report(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def _resolved(report: dict) -> dict:
    """{normalized name: (version, metadata)} of what a pip --report would install."""
    return {_norm(item["metadata"]["name"]): (item["metadata"]["version"], item["metadata"])
            for item in report.get("install", [])}


def openrlhf_deps(report_path: str | None = None, extra: str = "vllm") -> list:
    from packaging.requirements import Requirement

    if report_path:
        requires = _resolved(_report(report_path))["openrlhf"][1].get("requires_dist") or []
    else:
        import importlib.metadata as metadata

        requires = metadata.requires("openrlhf") or []
    lines = []
    for text in requires:
        req = Requirement(text)
        if _norm(req.name) == FLASH_ATTN:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        req.marker = None
        lines.append(str(req))
    return lines


def summary(report_path: str) -> list:
    resolved = _resolved(_report(report_path))
    lines = [f"{name} {resolved[name][0] if name in resolved else '(not in the resolution)'}" for name in SHOWN]
    cuda = sorted(f"{n} {v}" for n, (v, _) in resolved.items() if n.startswith("nvidia-cuda-runtime"))
    lines.append(f"CUDA runtime wheels: {', '.join(cuda) or 'none'}")
    lines.append(f"packages: {len(resolved)}")
    return lines


def drop_stand_in(site: str) -> str:
    """Remove ``site``/flash_attn if it is the import-only stand-in (its `__init__.py` carries a `STAND_IN_ATTRS`
    mark; read, not imported), and say what was done. A compiled flash-attn, or none, is left as it is.

    Why: the compile step used to remove `flash_attn` unconditionally, to clear a stand-in left by FLASH_ATTN=stub.
    Rerun on a working install, that deleted the compiled package while its metadata stayed: pip then found
    flash-attn "already satisfied" and the final import failed."""
    init = os.path.join(site, "flash_attn", "__init__.py")
    try:
        with open(init) as f:
            text = f.read()
    except OSError:
        return f"no flash_attn in {site}"
    if not any(f"{attr} = True" in text for attr in STAND_IN_ATTRS):
        return f"{os.path.dirname(init)} is not the stand-in: kept"
    shutil.rmtree(os.path.dirname(init))
    return f"removed the flash-attn stand-in from {site}"


def main(argv: list) -> int:
    if argv[:1] == ["openrlhf-deps"]:
        report = argv[2] if argv[1:2] == ["--report"] else None
        print("\n".join(openrlhf_deps(report)))
    elif argv[:1] == ["summary"] and len(argv) == 2:
        print("\n".join(summary(argv[1])))
    elif argv[:1] == ["drop-stand-in"] and len(argv) == 2:
        print(drop_stand_in(argv[1]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
