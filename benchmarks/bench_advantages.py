"""Cost of COPO's advantage step against OpenRLHF's group_norm, measured side by side in one run.

    .venv/bin/python benchmarks/bench_advantages.py                       # 512 x 6 and 2048 x 16
    .venv/bin/python benchmarks/bench_advantages.py --batches 512x6 --response_tokens 2048 --step_seconds 300

Two levels, each on the same random 0/1 rewards and answer ids:

- core: `openrlhf_copo.core.copo_advantages` on a [B, G] tensor against OpenRLHF's group_norm formula;
- step: the whole advantage step as the PPO controller runs it, on real OpenRLHF `Experience` micro-batches
  (`split_rollout_samples`, --rollout_micro_batch responses each, --response_tokens action tokens each):
  OpenRLHF 0.11.2's own `compute_advantages_and_returns` with group_norm against the patched one with COPO
  (regrouping by prompt, entropy, global statistics, the per-response columns, the group check).

The step time is printed as a share of a training step of --step_seconds (an input, not a measurement: the
controller's advantage step runs once per rollout batch, between generation and training, on one CPU core;
no GPU step of these sizes was timed here).
"""

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from openrlhf_copo.core import copo_advantages  # noqa: E402


def group_norm(rewards):
    """OpenRLHF 0.11.2's group_norm, as in experience_maker.compute_advantages_and_returns."""
    return (rewards - rewards.mean(-1, keepdim=True)) / (rewards.std(-1, keepdim=True) + 1e-9)


def median_seconds(fn, repeats, setup=lambda: None):
    times = []
    for _ in range(repeats):
        state = setup()
        t = time.perf_counter()
        fn(state)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def rollout(rewards, ids, response_tokens, micro_batch, estimator):
    """The experience maker and its micro-batched experiences for one rollout batch of [B, G] rewards and
    answer ids (no model involved)."""
    from openrlhf.trainer.ppo_utils.experience import Experience
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController
    from openrlhf.utils.deepspeed import DeepspeedStrategy

    from openrlhf_copo.cli.train_ppo_ray import load_args

    prompts, samples = rewards.shape
    args = load_args(["--advantage_estimator", estimator, "--actor.model_name_or_path", "unused",
                      "--reward.remote_url", "unused.py", "--rollout.n_samples_per_prompt", str(samples),
                      "--rollout.batch_size", str(prompts), "--rollout.micro_batch_size", str(micro_batch),
                      "--train.batch_size", str(prompts * samples), "--algo.kl.use_loss", "--algo.kl.init_coef", "0",
                      "--algo.kl.estimator", "k3"])

    class _Tokenizer:
        pad_token_id = 0

    maker = RemoteExperienceMaker(None, None, None, None, FixedKLController(0.0), DeepspeedStrategy(args=args),
                                  tokenizer=_Tokenizer())
    prompt_tokens = 16  # the prompt's length does not enter the advantage step
    T = prompt_tokens + response_tokens
    action_mask = torch.zeros(1, T - 1, dtype=torch.long)
    action_mask[0, prompt_tokens - 1:] = 1
    sequences = torch.ones(1, T, dtype=torch.long)
    samples_list = [
        Experience(sequences=sequences, attention_mask=torch.ones(1, T, dtype=torch.long), action_mask=action_mask,
                   rewards=rewards[b, i].reshape(1), scores=rewards[b, i].reshape(1),
                   response_length=torch.tensor([response_tokens]), total_length=torch.tensor([T]),
                   prompts=[f"prompt {b}"], labels=["7"],
                   info={"copo_answer_id": ids[b, i].reshape(1), "copo_correct": rewards[b, i].reshape(1)})
        for b in range(prompts) for i in range(samples)]
    experiences = maker.split_rollout_samples(samples_list)
    for exp in experiences:
        exp.action_log_probs = torch.zeros(exp.action_mask.shape)
        exp.kl = torch.zeros(exp.action_mask.shape)
    return maker, experiences


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", nargs="+", default=["512x6", "2048x16"], help="prompts x responses per prompt")
    p.add_argument("--response_tokens", type=int, default=1024)
    p.add_argument("--rollout_micro_batch", type=int, default=16)
    p.add_argument("--step_seconds", type=float, default=300.0,
                   help="the training step to compare with (an assumption, printed as such)")
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()

    from openrlhf_copo.openrlhf_ext import runtime_patches

    runtime_patches.apply()
    torch.set_num_threads(1)  # the controller's share of a node
    print(f"torch {torch.__version__}, 1 thread, median of {a.repeats}; {a.response_tokens} action tokens per "
          f"response, rollout micro-batches of {a.rollout_micro_batch}; step share against an assumed "
          f"{a.step_seconds:.0f} s step")
    for batch in a.batches:
        prompts, samples = (int(x) for x in batch.lower().split("x"))
        g = torch.Generator().manual_seed(0)
        rewards = (torch.rand(prompts, samples, generator=g) < 0.4).float()
        ids = torch.randint(0, 4, (prompts, samples), generator=g)
        core_grpo = median_seconds(lambda _: group_norm(rewards), a.repeats)
        core_copo = median_seconds(lambda _: copo_advantages(rewards, ids), a.repeats)

        step = {}
        for estimator in ("group_norm", "copo"):
            maker, experiences = rollout(rewards, ids, a.response_tokens, a.rollout_micro_batch, estimator)
            step[estimator] = median_seconds(lambda exps: maker.compute_advantages_and_returns(exps), a.repeats,
                                             setup=lambda: copy.deepcopy(experiences))
        print(f"\n{prompts} prompts x {samples} = {prompts * samples} responses")
        print(f"  core  group_norm {core_grpo * 1e3:9.2f} ms   copo {core_copo * 1e3:9.2f} ms   "
              f"ratio {core_copo / core_grpo:7.3f}x")
        print(f"  step  group_norm {step['group_norm'] * 1e3:9.2f} ms   copo {step['copo'] * 1e3:9.2f} ms   "
              f"ratio {step['copo'] / step['group_norm']:7.3f}x   copo = "
              f"{100 * step['copo'] / a.step_seconds:.3f}% of a {a.step_seconds:.0f} s step")


if __name__ == "__main__":
    main()
