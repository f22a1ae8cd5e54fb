"""`python -m openrlhf_copo.cli.compare`: a paired comparison of advantage methods on your model and data.

The command at the paper's size, on one 8-GPU node (its one copy, parsed by tests/compare/test_plan.py):
docs/gpu-recipe.md, "Comparing methods at the paper's size".

Each (method, seed) is one `train_ppo_ray` run with the same flags but the method's (`openrlhf_copo.compare`);
everything after `--` goes to every run as it is, and wins over the tool's defaults: no KL (--algo.kl.init_coef 0),
OpenRLHF's token-mean loss, one optimizer step per rollout batch (--train.batch_size = prompts x the method's G:
`compare.SAMPLE_FACTOR`), a constant lr, a checkpoint every --save_every steps (kept until the run finished, then
deleted with its final model). A flag after `--` that would redefine a method (`--copo.rho` of
copo_selective_rho04), the paired flags or one of the tool's own (`--rollout.n_samples_per_prompt` for
--samples_per_prompt) is refused before any run starts. Every run draws steps
x prompts per step prompts, from as many distinct ones as the data and the steps allow (`compare.prompt_plan`).
The flags after `--` are read by train_ppo_ray's own parser: one it does not know (misspelt, abbreviated) is refused.
`--dry_run` prints every run's command, each checked with that parser, OpenRLHF's and COPO's refusals and those of the
device the runs take on this machine (each refusal named under its command; then the exit status is 1), the prompts
and passes, the held-out sources, what the seeds' interval can be and the estimated cost, and starts nothing. Runs are
resumable: a finished run made with the same settings (its files compared by content) is kept, one made with others
(or with other method flags) is refused, naming the flag; a run that stopped goes on from its newest checkpoint.
SIGTERM or Ctrl-C to the command ends the running training child with its Ray cluster (SIGTERM to the child, which
shuts the cluster down; SIGKILL to whatever is left after 30 s) before it exits; killed outright, the command's child
gets SIGTERM from the kernel. While a comparison runs, a second one on the same --out is refused at once. A run
that fails, or stops short of --steps, is reported and the others go on; the command then exits 1, listing the failed
runs. The report (`report.md`, `report.json` under --out, with the runs' settings and prompts) gives each method minus
GRPO on the same held-out prompts, pooled and per source, per seed and with a 95% interval (over seeds, or over one
seed's prompts: each says which), at the same steps and at equal generated tokens (the uniform GRPO that spent the
method's tokens: GRPO itself, or the budget control grpo_4xg or grpo_4xsteps; `compare.tokens`), each method's tokens
beside GRPO's, and `report_tokens.png` (held-out accuracy against generated tokens), every column of a row over the
seeds it shares with GRPO, each run's final step
(DAPO's dynamic filtering may end a run early: said), what the seeds could detect and how many seeds a difference
would need, and what each method's runs saw at their first step. `--report_only` reports the finished runs under --out
at their recorded settings. Run on the CPU only so far (the tiny model in tests/e2e/test_compare_cpu.py); not on a GPU. The
cost of a run at the paper's size: docs/gpu-recipe.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import List, Optional

from openrlhf_copo import compare
from openrlhf_copo.processes import Stopped


class _Help(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """--help with each flag's default: argparse's, but where a flag's help says its default in words (a default
    resolved when running, such as --methods), that text alone; the methods' list after the flags kept line by
    line."""

    def _get_help_string(self, action):
        return action.help if "default:" in (action.help or "") else super()._get_help_string(action)


#: The default methods and seeds of a run; --report_only reports what is there instead.
METHODS, SEEDS = ["grpo", "copo"], [0, 1]


def _at_least(low: int):
    """An argparse type: an integer of at least ``low`` (argparse names the flag of a value it refuses)."""
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"{value}: must be {low} or more")
        return value
    parse.__name__ = f"integer >= {low}"
    return parse


def methods_epilog() -> str:
    """The methods --methods takes, one line each (`compare.METHOD_HELP`), after the flags."""
    import textwrap

    width = max(map(len, compare.METHODS))
    lines = [textwrap.fill(compare.METHOD_HELP[m], 100, initial_indent=f"  {m:<{width}}  ",
                           subsequent_indent=" " * (width + 4), break_on_hyphens=False) for m in compare.METHODS]
    return "methods (--methods):\n" + "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m openrlhf_copo.cli.compare", formatter_class=_Help,
                                description="Paired comparison of advantage methods (one train_ppo_ray run per "
                                            "method and seed); flags after -- go to every run, and may not redefine "
                                            "a method, the paired flags or one of this tool's own flags.",
                                epilog=methods_epilog())
    d = compare.Setting(model="", train=Path(), test=Path())
    p.add_argument("--model", help="HF model folder or name (--actor.model_name_or_path) (default: none; needed to "
                                   "run, not with --report_only)")
    p.add_argument("--start_checkpoint", default=None,
                   help="an HF model folder to start every run from instead of --model (e.g. a policy trained "
                        "before) (default: --model)")
    p.add_argument("--train_data", type=Path, help="training prompts, JSON lines (default: none; needed to run)")
    p.add_argument("--eval_data", type=Path, help="held-out prompts, JSON lines, or several files comma-separated "
                                                  "(their datasource: one report each) (default: none; needed to run)")
    p.add_argument("--input_key", default=d.input_key, help="the prompt's key in the rows (--data.input_key)")
    p.add_argument("--label_key", default=d.label_key, help="the answer's key in the rows (--data.label_key)")
    p.add_argument("--reward", default=d.reward, help="reward file (--reward.remote_url)")
    p.add_argument("--methods", nargs="+", default=None, choices=list(compare.METHODS), metavar="METHOD",
                   help=f"the methods, each compared with {compare.BASELINE} (run it too); each is described "
                        f"below the flags (default: {' '.join(METHODS)} when running; with --report_only, every "
                        "method found under --out)")
    p.add_argument("--seeds", nargs="+", type=int, default=None,
                   help=f"--train.seed of each run (default: {' '.join(map(str, SEEDS))} when running; with "
                        "--report_only, every seed found under --out)")
    p.add_argument("--samples_per_prompt", type=_at_least(1), default=None,
                   help=f"G, responses per prompt (default: {d.samples_per_prompt} when running; with --report_only, "
                        "the G the runs recorded)")
    p.add_argument("--prompts_per_step", type=_at_least(1), default=d.prompts_per_step,
                   help="prompts per rollout batch, one optimizer step each")
    p.add_argument("--steps", type=_at_least(1), default=d.steps,
                   help="training steps of every run (the prompts: see --dry_run)")
    p.add_argument("--lr", type=float, default=d.lr, help="learning rate (--actor.adam.lr), constant")
    p.add_argument("--eval_every", type=_at_least(1), default=d.eval_every,
                   help="held-out evaluation every N steps, and after the last")
    p.add_argument("--save_every", type=_at_least(0), default=d.save_every,
                   help="a checkpoint every this many steps (0: none), the two newest kept until the run finished: a "
                        "rerun of a run that stopped goes on from its newest")
    p.add_argument("--device", default=d.device, choices=["auto", "cuda", "cpu"], help="--copo.device of every run")
    p.add_argument("--target_difference", nargs="+", type=float, default=list(compare.TARGET_DIFFERENCES),
                   help="differences the report sizes the seeds for: how many seeds each would need at the runs' "
                        "spread (default: " + " ".join(map(str, compare.TARGET_DIFFERENCES)) + ")")
    p.add_argument("--out", type=Path, required=True,
                   help="one folder per run, and the report (default: none; required)")
    p.add_argument("--report_only", action="store_true", help="run nothing: the report of the finished runs under "
                                                              "--out, made with their recorded settings")
    p.add_argument("--dry_run", action="store_true", help="run nothing, write nothing: print every run's command, "
                                                          "the prompts and passes, the held-out sources and the "
                                                          "estimated cost")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    extra: List[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    args = parser().parse_args(argv)
    if args.methods is not None and compare.BASELINE not in args.methods:
        parser().error(f"--methods must include {compare.BASELINE}: every method is compared with it")
    if args.report_only:
        return report_only(args)
    # the baseline first: its run of each seed makes the seed's step-0 evaluation
    methods = [compare.BASELINE] + [m for m in args.methods or METHODS if m != compare.BASELINE]
    seeds = args.seeds if args.seeds is not None else SEEDS
    missing = [f for f in ("--model", "--train_data", "--eval_data") if getattr(args, f[2:]) is None]
    if missing:
        parser().error(f"{', '.join(missing)} required to run (not with --report_only)")
    setting = compare.Setting(
        model=args.model, start=args.start_checkpoint, train=args.train_data, test=args.eval_data,
        samples_per_prompt=compare.Setting.samples_per_prompt if args.samples_per_prompt is None
        else args.samples_per_prompt,
        prompts_per_step=args.prompts_per_step, steps=args.steps, lr=args.lr, eval_every=args.eval_every,
        reward=args.reward, input_key=args.input_key, label_key=args.label_key, device=args.device, extra=extra,
        save_every=args.save_every)
    if args.dry_run:
        plan = compare.plan(setting, methods, seeds, args.out)
        print(compare.plan_text(plan))
        return 1 if any(r["refused"] for r in plan["runs"]) else 0
    with compare.comparison_lock(args.out):  # one comparison at a time in a folder: a second is refused at once
        try:
            infos = compare.run_all(setting, methods, seeds, args.out)
        except Stopped as stop:
            print(f"compare: stopped by {stop.name}; each run's training child and Ray cluster were ended. The same "
                  "command goes on from each unfinished run's newest checkpoint", file=sys.stderr)
            raise
        if infos:
            write_report(args.out, infos, setting.samples_per_prompt, args.target_difference)
        return exit_status(compare.failed_runs(args.out, methods, seeds))


def exit_status(failed: List[dict]) -> int:
    """0, or 1 after listing the runs that failed (each with its exit code and log), the last lines of the output."""
    for f in failed:
        print(f"failed: {f['run']} (exit {f['returncode']}); log: {f['log']}", file=sys.stderr)
    if failed:
        print(f"{len(failed)} run(s) failed; the report covers the finished ones; rerun the command to go on from "
              "their checkpoints", file=sys.stderr)
    return 1 if failed else 0


def report_only(args) -> int:
    """The report of the runs under --out, all of them unless --methods / --seeds pick some (the rest named as left
    out), at the G they recorded."""
    everything = compare.finished_runs(args.out)
    chosen = compare.finished_runs(args.out, args.methods, args.seeds)
    left_out = [compare.run_dir(args.out, i["method"], i["seed"]).name for i in everything if i not in chosen]
    return write_report(args.out, chosen, args.samples_per_prompt, args.target_difference, left_out)


#: The plot of held-out accuracy against generated tokens the report writes beside report.md.
TOKENS_PLOT = "report_tokens.png"


def write_report(out: Path, infos: List[dict], samples_per_prompt: Optional[int],
                 targets=compare.TARGET_DIFFERENCES, left_out: List[str] = ()) -> int:
    if not infos:
        raise SystemExit(f"no finished run under {out}" + (f" of these --methods / --seeds (there: "
                                                           f"{', '.join(left_out)})" if left_out else ""))
    result = compare.report(out, infos, samples_per_prompt=samples_per_prompt, targets=targets, left_out=left_out)
    text = compare.markdown(result)
    flags = {i["method"]: i.get("method_flags", compare.METHODS.get(i["method"])) for i in infos}
    (out / "report.md").write_text(text + "\n")
    compare.plot_tokens({out.name: result}, out / TOKENS_PLOT)
    factors = {i["method"]: i["sample_factor"] for i in infos if "sample_factor" in i}
    steps = {i["method"]: i["step_factor"] for i in infos if "step_factor" in i}
    (out / "report.json").write_text(json.dumps({"methods": flags, "sample_factors": factors, "step_factors": steps,
                                                 "paired_flags": compare.PAIRED, **result}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
