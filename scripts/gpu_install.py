"""Helpers of scripts/setup_gpu.sh and scripts/check_gpu_install.sh (standard library, plus `packaging` where named).

    python scripts/gpu_install.py openrlhf-deps [--report REPORT]   openrlhf's requirements with its [vllm] extra,
        flash-attn left out, one a line: read from the installed openrlhf (setup_gpu.sh FLASH_ATTN=stub, after
        `pip install --no-deps openrlhf`), or from a pip --report that resolved it (check_gpu_install.sh); needs
        `packaging`
    python scripts/gpu_install.py summary REPORT                     the resolved versions of a pip --report
"""

from __future__ import annotations

import json
import sys

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


def main(argv: list) -> int:
    if argv[:1] == ["openrlhf-deps"]:
        report = argv[2] if argv[1:2] == ["--report"] else None
        print("\n".join(openrlhf_deps(report)))
    elif argv[:1] == ["summary"] and len(argv) == 2:
        print("\n".join(summary(argv[1])))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
