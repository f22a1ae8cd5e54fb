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
