"""Which openrlhf the patches were written against, and the checks that refuse any other.

Every patch module reads `PATCHED_ATTR` (the mark a patched class or function carries, also set by a fork that
carries patches/) from here; `check_openrlhf` runs in the driver, so that an unsupported openrlhf fails there
in one line rather than in a Ray worker.
"""

from __future__ import annotations

import importlib.metadata
import inspect

from packaging.specifiers import SpecifierSet
from packaging.version import Version


#: OpenRLHF releases whose patched symbols were read and tested.
SUPPORTED_OPENRLHF = SpecifierSet(">=0.11.2,<0.12")


PATCHED_ATTR = "__openrlhf_copo_patched__"


EXPECTED_ADVANTAGES = ["self", "experiences"]


EXPECTED_TRAINING_STEP = ["self", "experience", "kl_ctl", "step", "loss_batch_info"]


EXPECTED_POLICY_LOSS = ["self", "log_probs", "old_log_probs", "advantages", "action_mask", "rollout_log_probs"]


class OpenRLHFVersionError(RuntimeError):
    """The installed openrlhf is not one whose internals these patches were written against."""


def check_version() -> str:
    """The installed openrlhf version (package metadata only: imports nothing); raises if untested."""
    version = importlib.metadata.version("openrlhf")
    if Version(version) not in SUPPORTED_OPENRLHF:
        raise OpenRLHFVersionError(
            f"openrlhf {version} is installed; openrlhf_copo patches openrlhf{SUPPORTED_OPENRLHF} only "
            "(pip install 'openrlhf==0.11.2'), or apply patches/ to your fork"
        )
    return version


def check_signature(cls, name: str, expected) -> None:
    """Raises `OpenRLHFVersionError` if ``cls.name`` no longer takes the parameters the patch was written for."""
    fn = getattr(cls, name, None)
    params = list(inspect.signature(fn).parameters)[: len(expected)] if fn is not None else None
    if params != expected:
        raise OpenRLHFVersionError(
            f"openrlhf {check_version()}: {cls.__module__}.{cls.__name__}.{name} has moved or changed "
            f"(expected parameters {expected}, found {params}); openrlhf_copo cannot patch it"
        )


def check_openrlhf() -> str:
    """The installed openrlhf version; raises `OpenRLHFVersionError` if untested or if a patched symbol moved."""
    version = check_version()
    from openrlhf.models import PolicyLoss
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
    from openrlhf.trainer.ray.ppo_actor import ActorPPOTrainer

    check_signature(RemoteExperienceMaker, "compute_advantages_and_returns", EXPECTED_ADVANTAGES)
    check_signature(ActorPPOTrainer, "training_step", EXPECTED_TRAINING_STEP)
    check_signature(PolicyLoss, "forward", EXPECTED_POLICY_LOSS)
    return version
