"""How a run that stops during training ends: one line naming what stopped it (`openrlhf_ext/failure.py`)."""

import pytest


def test_an_error_raised_in_a_ray_actor_ends_on_its_own_line():
    """The advantage step runs in OpenRLHF's PPOTrainer actor: Ray wraps what it raises. The last line names
    the original error, not Ray's wrapper."""
    from ray.exceptions import RayTaskError

    from openrlhf_copo.openrlhf_ext.failure import failure_line
    from openrlhf_copo.openrlhf_ext.advantages import RewardCheckError

    cause = RewardCheckError("math-verify failed on 64 of 64 responses of this rollout step (...)")
    wrapped = RayTaskError("PPOTrainer.fit", "Traceback ...", cause).as_instanceof_cause()
    assert str(wrapped).splitlines()[0] != str(cause)  # Ray's own first line
    assert failure_line(wrapped, None) == f"training stopped: RewardCheckError: {cause}"


@pytest.mark.heavy(group=2)  # a local Ray cluster (tests/quick_tier.py: one per group at a time)
def test_a_rank_killed_mid_collective_is_named_not_the_rank_that_noticed():
    """Seen in CI: with one DeepSpeed rank SIGKILLed, the other rank's gloo all-reduce failed first
    ("Connection reset by peer") and the last line named that RuntimeError, not the dead rank. Real Ray actors
    in a real gloo group: the survivor's own error goes in, the line names the killed worker. It goes through
    the CLI's ending (a first fix asked Ray's actor table after the CLI had already shut Ray down)."""
    import os
    import signal

    import ray

    from openrlhf_copo.openrlhf_ext.failure import failure_line, stop_on_failure
    from tests_support import free_port

    @ray.remote(num_cpus=0)
    class Rank:
        def __init__(self, rank, port):
            import torch.distributed as dist

            self.rank, self.port = rank, port
            self.dist = dist

        def join(self):
            self.dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{self.port}", rank=self.rank,
                                         world_size=2)
            return os.getpid()

        def all_reduce_forever(self):
            import torch

            while True:
                self.dist.all_reduce(torch.ones(1024))

    ray.init(address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1")
    try:
        port = free_port()
        survivor, victim, bystander = Rank.remote(0, port), Rank.remote(1, port), Rank.remote(0, 0)
        survivor_pid, victim_pid = ray.get([survivor.join.remote(), victim.join.remote()])
        ray.kill(bystander)  # killed on purpose: not a cause to report
        with pytest.raises(ray.exceptions.ActorDiedError):
            ray.get(bystander.join.remote(), timeout=60)  # its death is on record now
        assert failure_line(ValueError("bad reward"), None) == "training stopped: ValueError: bad reward"
        running = [survivor.all_reduce_forever.remote(), victim.all_reduce_forever.remote()]
        os.kill(victim_pid, signal.SIGKILL)
        with pytest.raises(Exception) as caught:
            ray.get(running[0], timeout=120)
        noticed = caught.value
        assert "Connection closed by peer" in str(noticed) or "Connection reset by peer" in str(noticed)
        line = stop_on_failure(noticed, None)  # as the CLI ends: the line first, then Ray shut down
        assert not ray.is_initialized()
        assert line.startswith(f"training stopped: ActorDiedError: Rank (pid {victim_pid}) died: its worker "
                               f"process has died (then RuntimeError: "), line
        assert str(survivor_pid) not in line and "\n" not in line
    finally:
        ray.shutdown()
