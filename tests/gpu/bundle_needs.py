"""What the GPU suite's bundle carries (tests/gpu/build_bundle.sh): `python tests/gpu/bundle_needs.py REPORT HAVE`
prints `name==version` per package, one a line, from a pip --report that resolved the suite's imports for the node,
less what the node has (HAVE: a package list or `pip freeze`), then openrlhf and deepspeed (added without their
dependencies).

Two exceptions to "less what the node has": torch and what it brings (CUDA libraries, triton) are never packed, since
a CUDA build is gigabytes (the suite runs with the node's, and run.sh says which); transformers is always packed, at
requirements.txt's pin, since it is pure Python and the suite must run the transformers a GPU user installs, not the
node's (the first GPU runs had the node's 5.17, the pin is 5.15.0), and with it every package it bounds from above
(`bounded_by_always`: tokenizers<=0.23.0, huggingface-hub<2.0), since the node's may be past the bound: the node's
tokenizers 0.23.2 made the pinned transformers refuse to import on the H200 on 2026-11-27
(docs/gpu-runs/2026-11-27-h200-run4-pins-tokenizers.log)."""

from __future__ import annotations

import json
import re
import sys
from typing import Iterable, List

#: Never packed: the node's (a CUDA build of torch, and what comes with it).
NODE_ONLY = ("torch", "triton")
#: Always packed, whatever the node has: requirements.txt's pin wins on the path.
ALWAYS = ("transformers",)
#: Added without their dependencies (openrlhf's pins torch and flash-attn are the node's business).
NO_DEPS = ("openrlhf==0.11.2", "deepspeed==0.19.6")


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def node_has(lines: Iterable[str]) -> set:
    """The normalized names of a package list or `pip freeze` output."""
    return {norm(re.split(r"[=<>@ ]", line.strip())[0]) for line in lines if line.strip() and not line.startswith("#")}


def bounded_by_always(report: dict) -> set:
    """The normalized names of the packages that an `ALWAYS` package requires with an upper bound (<, <=, ==, ~=):
    the node's version of them may not be one the pinned package accepts, so they travel with it."""
    bounded = set()
    for item in report["install"]:
        if norm(item["metadata"]["name"]) not in ALWAYS:
            continue
        for requirement in item["metadata"].get("requires_dist") or []:
            spec, _, marker = requirement.partition(";")
            if "extra ==" in marker:
                continue
            name = re.split(r"[\[<>=!~ (]", spec.strip(), maxsplit=1)[0]
            if re.search(r"<|==|~=", spec):
                bounded.add(norm(name))
    return bounded


def needs(report: dict, have: set) -> List[str]:
    out = []
    always = set(ALWAYS) | bounded_by_always(report)
    for item in report["install"]:
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        n = norm(name)
        if n in NODE_ONLY or n.startswith("nvidia-"):
            continue
        if n in always or n not in have:
            out.append(f"{name}=={version}")
    return out + list(NO_DEPS)


if __name__ == "__main__":
    with open(sys.argv[1]) as f, open(sys.argv[2]) as h:
        print("\n".join(needs(json.load(f), node_has(h))))
