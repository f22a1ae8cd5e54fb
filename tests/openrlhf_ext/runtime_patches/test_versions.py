"""`openrlhf_ext/runtime_patches/versions.py`: an openrlhf outside the tested range, or one whose patched functions moved, is
refused before anything is patched."""

import importlib.metadata
import json
import subprocess
import sys

import pytest

from openrlhf_copo.openrlhf_ext.runtime_patches import versions


def test_unsupported_openrlhf_is_refused(monkeypatch):
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.12.1")
    with pytest.raises(versions.OpenRLHFVersionError, match="openrlhf 0.12.1 is installed"):
        versions.check_openrlhf()


def test_moved_symbol_is_refused(monkeypatch):
    from openrlhf.trainer.ray.ppo_actor import ActorPPOTrainer

    monkeypatch.setattr(ActorPPOTrainer, "training_step", lambda self, experience, step: None)
    with pytest.raises(versions.OpenRLHFVersionError, match="ActorPPOTrainer.training_step has moved or changed"):
        versions.check_openrlhf()


@pytest.mark.parametrize("module, qualname, patch", [
    # called positionally by patch 8 (and wrapped by 11): a new parameter before `dynamic_filtering` would shift the
    # call's meaning
    ("openrlhf.trainer.ppo_utils.samples_generator", "SamplesGenerator._generate_vllm", "8, 11"),
    # called by patch 11 on every response of Reinforce-Ada's later rounds
    ("openrlhf.trainer.ppo_utils.samples_generator", "SamplesGenerator._process_response_into_experience", "11"),
    # patch 7 reads the engine as the sixth argument when it is not passed by keyword
    ("openrlhf.utils.agent", "SingleTurnAgentExecutor.execute", "7"),
    ("openrlhf.trainer.ppo_trainer", "prepare_datasets", "10"),
    ("openrlhf.trainer.ppo_trainer", "compute_eval_metrics", "5"),
])
def test_every_patched_symbol_is_checked(monkeypatch, module, qualname, patch):
    import importlib

    owner = importlib.import_module(module)
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    monkeypatch.setattr(owner, name, lambda self, moved_here, *rest: None)
    with pytest.raises(versions.OpenRLHFVersionError, match=rf"{qualname} has moved or changed .* patch {patch} "):
        versions.check_openrlhf()


def test_the_symbol_table_covers_every_patch_and_matches_openrlhf():
    """All eleven patches are covered, and the installed openrlhf passes (each patch's own install checks it too)."""
    covered = set()
    for _, patches in versions.PATCHED_SYMBOLS.values():
        covered |= {int(p) for p in patches.split(",") if p.strip().isdigit()}
    assert covered == set(range(1, 12))
    assert versions.check_openrlhf() == importlib.metadata.version("openrlhf")


#: In a fresh process: import every module of openrlhf, note every module attribute and every attribute of the classes
#: they define, install everything openrlhf_copo can install (the CPU path, patches 1-10 through the worker hook's
#: installers), and print which of them changed (new attributes included, but for the patched mark), with their
#: entries in PATCHED_SYMBOLS spelled the same way (a class member under the module that defines the class).
REPLACED = r"""
import importlib, inspect, json, pkgutil, sys
import openrlhf

for info in pkgutil.walk_packages(openrlhf.__path__, "openrlhf."):
    try:
        importlib.import_module(info.name)
    except Exception:
        pass  # a module that cannot import here is patched by nothing that runs here either

def attributes():
    seen = {}
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] != "openrlhf":
            continue
        for attr, value in list(vars(module).items()):
            seen[(name, attr)] = value
            if inspect.isclass(value) and value.__module__ == name:
                seen.update({(name, f"{attr}.{k}"): v for k, v in list(vars(value).items())})
    return seen

before = attributes()
from openrlhf_copo.openrlhf_ext import cpu, worker_hook
from openrlhf_copo.openrlhf_ext.runtime_patches import apply, versions
cpu.install()
apply()
worker_hook.install_post_import_patches()
after = attributes()
versions.check_openrlhf()  # passes with everything installed: each replacement keeps its original as __wrapped__
modules = {m for m, _ in before}
changed = sorted(f"{m}:{q}" for (m, q), v in after.items() if m in modules and not q.endswith(versions.PATCHED_ATTR)
                 and ((m, q) not in before or before[(m, q)] is not v))

def spelled(module, qualname):
    head, _, rest = qualname.partition(".")
    owner = getattr(importlib.import_module(module), head)
    return f"{owner.__module__}:{qualname}" if rest and inspect.isclass(owner) else f"{module}:{qualname}"

print("REPLACED " + json.dumps({"changed": changed,
                                "listed": sorted(spelled(m, q) for m, q in versions.PATCHED_SYMBOLS)}))
"""


def test_every_symbol_openrlhf_copo_replaces_is_listed_and_checked():
    """Whatever any module of openrlhf_copo replaces in openrlhf, found by installing it all and comparing, is in
    PATCHED_SYMBOLS, so that `check_openrlhf` refuses an openrlhf where it moved (the CPU path's six replacements were
    not: WorkerWrap.update_weight, stateless_init_process_group, ...). And the check still passes once it is all
    installed: each replacement keeps its original's signature reachable."""
    out = subprocess.run([sys.executable, "-c", REPLACED], capture_output=True, text=True, timeout=600)
    lines = [x for x in out.stdout.splitlines() if x.startswith("REPLACED ")]
    assert out.returncode == 0 and lines, out.stderr[-3000:]
    found = json.loads(lines[-1][len("REPLACED "):])
    assert "openrlhf.trainer.ray.vllm_worker_wrap:WorkerWrap.update_weight" in found["changed"]  # the CPU path ran
    assert "openrlhf.trainer.ppo_trainer:prepare_datasets" in found["changed"]  # and patches 1-10
    assert sorted(set(found["changed"]) - set(found["listed"])) == []
