"""A Ray actor given a GPU by Ray sees exactly that GPU after our worker hook ran.

Ray runs `worker_process_setup_hook` before it narrows CUDA_VISIBLE_DEVICES to the actor's GPUs: a hook
that initialised CUDA there would fix the process's view too early. On a one-GPU machine Ray is told of two
GPUs; the actor given id 1 (which does not exist) must see no CUDA device at all."""

import os

import pytest
import ray

from openrlhf_copo.openrlhf_ext import driver, runtime_patches


@ray.remote(num_gpus=1)
class GpuProbe:
    def view(self):
        import torch

        import openrlhf.trainer.ray.ppo_actor  # noqa: F401  (the actor's own import: patches arrive now)
        from openrlhf_copo.openrlhf_ext import runtime_patches as p

        return ray.get_gpu_ids(), os.environ.get("CUDA_VISIBLE_DEVICES"), torch._C._cuda_getDeviceCount(), \
            p.is_applied()


def test_each_actor_sees_only_its_gpu(cuda):
    import torch

    if torch.cuda.device_count() != 1:
        pytest.fail("this check is written for a machine with one GPU (Ray is told of two)")
    # PYTORCH_NVML_BASED_CUDA_CHECK empty in every worker: DeepSpeed's setdefault of it on import (which made
    # an early CUDA query harmless by luck) is neutralised, so only the hook's own behaviour is tested.
    ray.init(num_cpus=4, num_gpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
             runtime_env=driver.with_worker_hook({"env_vars": {"PYTORCH_NVML_BASED_CUDA_CHECK": ""}}))
    try:
        views = ray.get([a.view.remote() for a in (GpuProbe.remote(), GpuProbe.remote())])
    finally:
        ray.shutdown()
    by_id = {str(ids[0]): (visible, count, patched) for ids, visible, count, patched in views}
    assert set(by_id) == {"0", "1"}, views
    assert by_id["0"][:2] == ("0", 1) and by_id["1"][:2] == ("1", 0), views
    assert all(patched for _, _, patched in by_id.values())
