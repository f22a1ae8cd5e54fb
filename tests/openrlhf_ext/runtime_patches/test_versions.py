"""`openrlhf_ext/runtime_patches/versions.py`: an openrlhf outside the tested range, or one whose patched functions moved, is
refused before anything is patched."""

import importlib.metadata
import json
import subprocess
import sys

import re

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
    # called by patch 11 on every response of Reinforce-Ada's later rounds, wrapped by 4 to count its tokens
    ("openrlhf.trainer.ppo_utils.samples_generator", "SamplesGenerator._process_response_into_experience", "4, 11"),
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


# ---------------------------------------------------------------------------------------------
# vLLM: every function the patches, the CPU path and the evaluation call (`VLLM_SYMBOLS`), checked like openrlhf's.

import vllm  # noqa: E402

from openrlhf_copo.openrlhf_ext.runtime_patches.versions import CPU_PATH, EVALUATION  # noqa: E402


def test_the_installed_vllm_passes():
    for users in ((), (CPU_PATH,), (EVALUATION,), ("7",), ("8",)):
        assert versions.check_vllm(*users) == vllm.__version__


def _async_wake_up_without_tags(self):
    return None


@pytest.mark.parametrize("owner, name, replacement, users, line", [
    (vllm.SamplingParams, "clone", None, ("7",),
     "vllm.SamplingParams.clone is gone; openrlhf_copo calls it in patch 7"),
    (vllm.AsyncLLMEngine, "wake_up", _async_wake_up_without_tags, ("8",),
     "vllm.AsyncLLMEngine.wake_up has no parameter tags; openrlhf_copo calls it in patch 8"),
    (vllm.AsyncLLMEngine, "sleep", lambda self, mode="abort": None, ("8",),
     "vllm.AsyncLLMEngine.sleep has no parameter level; openrlhf_copo calls it in patch 8"),
    (vllm.LLM, "generate", lambda self, sampling_params, prompts: None, (EVALUATION,),
     "vllm.LLM.generate takes ['self', 'sampling_params', 'prompts'] first, not ['self', 'prompts', "
     "'sampling_params']; openrlhf_copo calls it in the evaluation"),
])
def test_a_vllm_without_a_called_function_or_parameter_is_refused_in_one_line(monkeypatch, owner, name, replacement,
                                                                              users, line):
    if replacement is None:
        monkeypatch.delattr(owner, name)
    else:
        monkeypatch.setattr(owner, name, replacement)
    with pytest.raises(versions.VllmVersionError) as e:
        versions.check_vllm(*users)
    assert str(e.value) == f"vllm {vllm.__version__}: {line} (install the vllm of requirements.txt)"


def test_a_seed_no_longer_taken_is_refused(monkeypatch):
    """A keyword the evaluation and patch 7 pass by name (and read back as `.seed`): taken, or refused."""
    class SamplingParams:
        def __init__(self, n=1, temperature=1.0, top_p=1.0, max_tokens=16):
            pass

        def clone(self):
            return self

    monkeypatch.setattr(vllm, "SamplingParams", SamplingParams)
    with pytest.raises(versions.VllmVersionError, match=r"^vllm \S+: vllm.SamplingParams has no parameter seed; "
                                                        r"openrlhf_copo calls it in patch 7 and the evaluation"):
        versions.check_vllm(EVALUATION)


def test_the_cpu_paths_vllm_functions_are_checked_where_it_installs(monkeypatch):
    import vllm.distributed.utils as distributed_utils

    monkeypatch.setattr(distributed_utils, "stateless_init_torch_distributed_process_group",
                        lambda host, port, rank, world_size: None)
    with pytest.raises(versions.VllmVersionError, match="stateless_init_torch_distributed_process_group has no "
                                                        "parameter backend; openrlhf_copo calls it in the CPU path"):
        versions.check_vllm(CPU_PATH)
    versions.check_vllm()  # not the driver's check: it leaves the CPU path's to `cpu.install`


def test_the_driver_refuses_it_in_one_line(monkeypatch, capsys):
    from openrlhf_copo.cli import train_ppo_ray as cli
    from tests_support import copo_argv

    monkeypatch.delattr(vllm.SamplingParams, "clone")
    with pytest.raises(SystemExit) as exc:
        cli.main(copo_argv("--copo.device", "cuda"))
    assert exc.value.code == 2
    errors = [x for x in capsys.readouterr().err.splitlines() if ": error: " in x]
    assert errors == [f"python -m openrlhf_copo.cli.train_ppo_ray: error: vllm {vllm.__version__}: "
                      "vllm.SamplingParams.clone is gone; openrlhf_copo calls it in patch 7 (install the vllm of "
                      "requirements.txt)"]


def test_the_engine_process_refuses_it_where_patch_7_installs(monkeypatch):
    """Patch 7 installs in the vLLM engine actors (the worker hook, when the actor imports openrlhf.utils.agent)."""
    import openrlhf.utils.agent as agent

    from openrlhf_copo.openrlhf_ext.runtime_patches import rollout

    monkeypatch.delattr(vllm.SamplingParams, "clone")
    with pytest.raises(versions.VllmVersionError, match="vllm.SamplingParams.clone is gone"):
        rollout.patch_agent(agent)


def test_the_evaluation_refuses_it_before_building_an_engine(monkeypatch, tmp_path, capsys):
    """`python -m openrlhf_copo.cli.evaluate` checks vLLM before it reads a model or builds an engine (the check
    lives in the CLI: the evaluation package does not reach into the OpenRLHF glue, tests/test_imports.py)."""
    from openrlhf_copo.cli import evaluate as cli

    monkeypatch.setattr(vllm.LLM, "__init__", lambda self, model, dtype=None: None)
    assert cli.main(["--model", str(tmp_path / "no-model"), "--benchmark", "math500:x.jsonl"]) == 2
    assert re.search(r"^evaluate: error: vllm \S+: vllm.LLM has no parameter seed, enforce_eager, trust_remote_code; "
                     "openrlhf_copo calls it in the evaluation", capsys.readouterr().err)


def test_every_vllm_name_openrlhf_copo_imports_is_listed():
    """Whatever openrlhf_copo imports from vLLM (`from vllm... import X`) is in VLLM_SYMBOLS, so it is checked."""
    import ast
    from pathlib import Path

    package = Path(versions.__file__).parents[2]
    imported = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "vllm":
                imported |= {(node.module, alias.name) for alias in node.names}
    listed = {(module, qualname.split(".")[0]) for module, qualname in versions.VLLM_SYMBOLS}
    assert imported and imported <= listed, sorted(imported - listed)
