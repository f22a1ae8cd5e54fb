"""Cost of COPO's loss step against OpenRLHF's own PolicyLoss on the same micro-batch, measured side by side in one run.

    .venv/bin/python benchmarks/bench_loss.py                  # the demo's micro-batch and the paper's sizes
    .venv/bin/python benchmarks/bench_loss.py --sizes 8x4096 --repeats 20

For each micro-batch size (responses x action tokens), on the same random log-probs, advantages and mask, one
loss step is the loss's forward and its backward into the log-probs, with the step normalizers OpenRLHF's
`training_step` passes (dp_size, batch_num_tokens, global_batch_size):

- `openrlhf`: OpenRLHF 0.11.2's PolicyLoss on the local advantage (what GRPO costs);
- `copo`: `CopoPolicyLoss` as a COPO run uses it by default (two PolicyLoss terms, the logged term means, the
  clip ratio chosen on the device);
- `copo+push`: with `--copo.push_metrics` (each term's push on the sampled tokens: two more PolicyLoss evaluations
  and two elementwise backwards).

The three are timed interleaved, repeat by repeat, and each line prints the median seconds and the ratio to
`openrlhf` measured in the same run. The model's forward and backward, which dominate a real training step, are
not part of any of them: the ratios are of the loss alone, an upper bound on what the loss adds to a step. Run on
this repository's CPU (no GPU was lent to the session that wrote it): the ratios on a GPU are not measured.
Run with PYTHONPATH pointing at an older checkout, the same script times that checkout's loss (`copo` is then
whatever its loss did by default; `copo+push` is skipped when the loss has no such switch).
"""

import argparse
import inspect
import statistics
import sys
import time

import torch
from openrlhf.models.loss import PolicyLoss

from openrlhf_copo.openrlhf_ext.loss import CopoPolicyLoss

#: The demo's training micro-batch (2 prompts x 6 samples, up to 48 new tokens) and the paper's scale (micro-batches
#: of 4-8 responses of up to 4,096 tokens).
DEFAULT_SIZES = ["12x48", "4x4096", "8x4096"]


def micro_batch(rows: int, tokens: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(tokens // 4, tokens + 1, (rows,), generator=g)
    mask = (torch.arange(tokens).view(1, -1) < lengths.view(-1, 1)).float()
    old = -torch.rand(rows, tokens, generator=g) * 2
    logp = old + 0.05 * torch.randn(rows, tokens, generator=g)  # a little off-policy: some tokens clip
    local = torch.randn(rows, 1, generator=g).expand(rows, tokens) * mask
    weighted_global = torch.randn(rows, generator=g)
    normalizers = {"dp_size": 1, "batch_num_tokens": mask.sum() * 4, "global_batch_size": torch.tensor(4.0 * rows)}
    return logp, old, local, weighted_global, mask, normalizers


def make_losses():
    losses = {"openrlhf": PolicyLoss(), "copo": CopoPolicyLoss(PolicyLoss())}
    if "push_metrics" in inspect.signature(CopoPolicyLoss.__init__).parameters:
        losses["copo+push"] = CopoPolicyLoss(PolicyLoss(), push_metrics=True)
    return losses


def one_step(loss, batch) -> float:
    logp, old, local, weighted_global, mask, normalizers = batch
    x = logp.clone().requires_grad_(True)
    if isinstance(loss, CopoPolicyLoss):
        loss.global_advantages = weighted_global
    t0 = time.perf_counter()
    out = loss(x, old, local, action_mask=mask, **normalizers)
    out[0].backward()
    if isinstance(loss, CopoPolicyLoss):  # what after_training_step reads, as OpenRLHF's ppo_train logs it
        [v.item() for v, _ in loss.last_terms.values()]
    return time.perf_counter() - t0


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="+", default=DEFAULT_SIZES, help="micro-batches as RESPONSESxTOKENS")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier on a shared machine)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    losses = make_losses()
    import openrlhf_copo

    print(f"loss step (forward + backward into the log-probs), median of {args.repeats}, torch "
          f"{torch.__version__}, {args.threads} thread(s), openrlhf_copo from {openrlhf_copo.__file__}")
    for size in args.sizes:
        rows, tokens = (int(v) for v in size.lower().split("x"))
        batch = micro_batch(rows, tokens)
        times = {name: [] for name in losses}
        for name, loss in losses.items():  # warm-up
            one_step(loss, batch)
        for _ in range(args.repeats):
            for name, loss in losses.items():
                times[name].append(one_step(loss, batch))
        base = statistics.median(times["openrlhf"])
        cells = [f"{name} {statistics.median(t) * 1e3:.2f} ms ({statistics.median(t) / base:.2f}x)"
                 for name, t in times.items()]
        print(f"{rows} x {tokens} tokens: " + ", ".join(cells), flush=True)


if __name__ == "__main__":
    sys.exit(main())
