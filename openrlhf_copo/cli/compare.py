"""`python -m openrlhf_copo.cli.compare`: a paired comparison of advantage methods on your model and data.

    python -m openrlhf_copo.cli.compare --model Qwen/Qwen2.5-3B-Instruct --train_data data/dapo_math_17k.jsonl \\
        --eval_data data/math500.jsonl --methods grpo copo --seeds 0 1 --samples_per_prompt 6 \\
        --prompts_per_step 512 --steps 60 --lr 1e-6 --eval_every 10 --out runs/compare -- \\
        --train.colocate_all --vllm.enable_sleep --ds.enable_sleep --actor.num_gpus_per_node 8 --vllm.num_engines 8

Each (method, seed) is one `train_ppo_ray` run with the same flags but the method's (`openrlhf_copo.compare`);
everything after `--` goes to every run as it is, and wins over the tool's own settings: no KL
(--algo.kl.init_coef 0), OpenRLHF's token-mean loss, one optimizer step per rollout batch (--train.batch_size =
prompts x G), a constant lr, a checkpoint every --save_every steps (kept until the run finished, then deleted with
its final model). More steps than one pass over the prompts are OpenRLHF episodes. Runs are resumable: a finished
run made with the same settings is kept, one made with others (or with other method flags) is refused, naming the
flag; a run that stopped goes on from its newest checkpoint. A run that fails is reported and the others go on; the
command then exits 1, listing the failed runs. The report (`report.md`, `report.json` under --out, with the runs'
settings) gives each method minus GRPO on the same held-out prompts, pooled and per source, per seed and over seeds
with a 95% interval, and what each method's runs saw at their first step. Run on the CPU only so far (the tiny
model in tests/test_compare.py); not on a GPU. The cost of a run at the paper's size: docs/gpu-recipe.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import List, Optional

from openrlhf_copo import compare


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m openrlhf_copo.cli.compare",
                                description="Paired comparison of advantage methods (one train_ppo_ray run per "
                                            "method and seed); flags after -- go to every run.")
    d = compare.Setting(model="", train=Path(), test=Path())
    p.add_argument("--model", help="HF model folder or name (--actor.model_name_or_path); not with --report_only")
    p.add_argument("--start_checkpoint", default=None,
                   help="an HF model folder to start every run from instead of --model (e.g. a policy trained before)")
    p.add_argument("--train_data", type=Path, help="training prompts, JSON lines")
    p.add_argument("--eval_data", type=Path, help="held-out prompts, JSON lines (their datasource: one report each)")
    p.add_argument("--input_key", default=d.input_key)
    p.add_argument("--label_key", default=d.label_key)
    p.add_argument("--reward", default=d.reward, help="reward file (--reward.remote_url); default: math_reward.py")
    p.add_argument("--methods", nargs="+", default=["grpo", "copo"], choices=list(compare.METHODS),
                   help=f"the methods; each is compared with {compare.BASELINE} (run it too)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1], help="--train.seed of each run")
    p.add_argument("--samples_per_prompt", type=int, default=d.samples_per_prompt, help="G")
    p.add_argument("--prompts_per_step", type=int, default=d.prompts_per_step)
    p.add_argument("--steps", type=int, default=d.steps)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--eval_every", type=int, default=d.eval_every)
    p.add_argument("--save_every", type=int, default=d.save_every,
                   help="a checkpoint every this many steps (0: none), the two newest kept until the run finished: a "
                        "rerun of a run that stopped goes on from its newest")
    p.add_argument("--device", default=d.device, choices=["auto", "cuda", "cpu"], help="--copo.device of every run")
    p.add_argument("--out", type=Path, required=True, help="one folder per run, and the report")
    p.add_argument("--report_only", action="store_true", help="run nothing: the report of the finished runs")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    extra: List[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    args = parser().parse_args(argv)
    if compare.BASELINE not in args.methods:
        parser().error(f"--methods must include {compare.BASELINE}: every method is compared with it")
    # the baseline first: its run of each seed makes the seed's step-0 evaluation
    methods = [compare.BASELINE] + [m for m in args.methods if m != compare.BASELINE]
    if args.report_only:
        return write_report(args.out, compare.finished_runs(args.out, methods, args.seeds), methods,
                            args.samples_per_prompt)
    missing = [f for f in ("--model", "--train_data", "--eval_data") if getattr(args, f[2:]) is None]
    if missing:
        parser().error(f"{', '.join(missing)} required to run (not with --report_only)")
    setting = compare.Setting(
        model=args.model, start=args.start_checkpoint, train=args.train_data, test=args.eval_data,
        samples_per_prompt=args.samples_per_prompt, prompts_per_step=args.prompts_per_step, steps=args.steps,
        lr=args.lr, eval_every=args.eval_every, reward=args.reward, input_key=args.input_key,
        label_key=args.label_key, device=args.device, extra=extra, save_every=args.save_every)
    infos = compare.run_all(setting, methods, args.seeds, args.out)
    if infos:
        write_report(args.out, infos, methods, args.samples_per_prompt)
    return exit_status(compare.failed_runs(args.out, methods, args.seeds))


def exit_status(failed: List[dict]) -> int:
    """0, or 1 after listing the runs that failed (each with its exit code and log), the last lines of the output."""
    for f in failed:
        print(f"failed: {f['run']} (exit {f['returncode']}); log: {f['log']}", file=sys.stderr)
    if failed:
        print(f"{len(failed)} run(s) failed; the report covers the finished ones; rerun the command to go on from "
              "their checkpoints", file=sys.stderr)
    return 1 if failed else 0


def write_report(out: Path, infos: List[dict], methods: List[str], samples_per_prompt: int) -> int:
    if not infos:
        raise SystemExit(f"no finished run under {out}")
    result = compare.report(out, infos, samples_per_prompt=samples_per_prompt)
    text = compare.markdown(result)
    (out / "report.md").write_text(text + "\n")
    (out / "report.json").write_text(json.dumps({"methods": {m: compare.METHODS[m] for m in methods},
                                                 "paired_flags": compare.PAIRED, **result}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
