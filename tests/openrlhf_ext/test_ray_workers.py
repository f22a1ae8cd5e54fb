"""The patches reach every Ray worker process (a driver-side monkeypatch does not), on a real local Ray cluster."""

import asyncio

import pytest
import ray

from openrlhf_copo.openrlhf_ext import driver, runtime_patches
from tests_support import REWARD_FILE

pytestmark = pytest.mark.heavy(group=2)  # a local Ray cluster: left out by `pytest --quick`; group 2 for balance


def start_ray(runtime_env=None):
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", runtime_env=runtime_env,
             log_to_driver=False)


@ray.remote(num_cpus=0)
class Probe:
    def patched(self):
        from openrlhf_copo.openrlhf_ext import runtime_patches as p

        return p.is_applied()

    def reward_in_threads(self, path):
        """Load the reward file by path and call it the way OpenRLHF's rollout actor does."""
        import importlib.util

        spec = importlib.util.spec_from_file_location("reward_func", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)

        async def calls():
            prompt = "Q: 1/2?\n"
            jobs = [asyncio.to_thread(module.reward_func, [prompt + r], [prompt], ["1/2"])
                    for r in ("\\boxed{0.5}", "\\boxed{3}", "no answer")]
            return await asyncio.gather(*jobs)

        outs = asyncio.run(calls())
        return [(o["rewards"].item(), o["extra_logs"]["copo_answer_id"].item()) for o in outs]


@ray.remote(num_cpus=0)
class AsyncProbe:
    async def patched(self):
        from openrlhf_copo.openrlhf_ext import runtime_patches as p

        return p.is_applied()


@pytest.fixture
def ray_cleanup():
    if ray.is_initialized():
        ray.shutdown()
    yield
    ray.shutdown()


def test_driver_monkeypatch_does_not_reach_actors(ray_cleanup):
    runtime_patches.apply()  # in the driver
    assert runtime_patches.is_applied()
    start_ray()
    assert ray.get(Probe.remote().patched.remote()) is False


def test_worker_hook_patches_every_worker(ray_cleanup):
    start_ray(runtime_env=driver.with_worker_hook({"env_vars": {"TOKENIZERS_PARALLELISM": "false"}}))
    actors = [Probe.remote(), Probe.options(max_concurrency=4).remote(), AsyncProbe.remote()]
    assert ray.get([a.patched.remote() for a in actors]) == [True, True, True]

    @ray.remote(num_cpus=0)
    def task():
        from openrlhf_copo.openrlhf_ext import runtime_patches as p

        return p.is_applied()

    assert ray.get(task.remote()) is True
    # the reward file works inside a threaded Ray actor, through asyncio.to_thread
    results = ray.get(actors[1].reward_in_threads.remote(str(REWARD_FILE)))
    assert [r for r, _ in results] == [1.0, 0.0, 0.0]
    assert len({i for _, i in results}) == 3


def test_a_foreign_setup_hook_is_refused():
    with pytest.raises(RuntimeError, match="worker_process_setup_hook"):
        driver.with_worker_hook({"worker_process_setup_hook": "somewhere.else"})
