"""`openrlhf_ext/runtime_patches/versions.py`: an openrlhf outside the tested range, or one whose patched functions moved, is
refused before anything is patched."""

import importlib.metadata

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
    # called positionally by patch 8: a new parameter before `dynamic_filtering` would shift the call's meaning
    ("openrlhf.trainer.ppo_utils.samples_generator", "SamplesGenerator._generate_vllm", "8"),
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
    """All ten patches are covered, and the installed openrlhf passes (each patch's own install checks it too)."""
    covered = set()
    for _, patches in versions.PATCHED_SYMBOLS.values():
        covered |= {int(p) for p in patches.split(",")}
    assert covered == set(range(1, 11))
    assert versions.check_openrlhf() == importlib.metadata.version("openrlhf")
