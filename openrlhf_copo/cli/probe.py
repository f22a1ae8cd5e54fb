"""`python -m openrlhf_copo.cli.probe`: the regime of your model and data, before a run, with no training.

    python -m openrlhf_copo.cli.probe --model Qwen/Qwen2.5-3B-Instruct --train_data data/dapo_math_17k.jsonl \\
        --prompts_per_step 512 --samples_per_prompt 6 --out runs/probe -- --vllm.num_engines 8 ...

Samples G responses for N training prompts from the start model through the same vLLM engines, reward and advantage
step as training (step 1 of a `train_ppo_ray` run with --rollout.batch_size N and this --seed, which stops there:
`openrlhf_copo.probe`), and reports the shares of mixed, all-correct and all-incorrect groups, the consistency
entropy by answer split and which splits keep the local term at this G, gamma and rho, the nearest regime of the
which-method-when table with its measured results, and the time it took. The flags name the same things as
`openrlhf_copo.cli.compare`'s; everything after `--` goes to the run as it is (engines, lengths, --copo.gamma, ...).
With --filtered_train_data it also writes the training file without the probed prompts that every response solved.
Run on the CPU only (tests/e2e/test_probe_cpu.py; SmolLM2 in docs/gpu-recipe.md), not on a GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import List, Optional, Tuple

from openrlhf_copo import compare, probe


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Every flag's default in its help; a required flag says so instead."""

    def _get_help_string(self, action):
        return f"{action.help} (required)" if action.required else super()._get_help_string(action)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m openrlhf_copo.cli.probe", formatter_class=_Help,
                                usage="%(prog)s --model M --train_data FILE --out DIR [options] "
                                      "[-- train_ppo_ray flags]",
                                description="The regime of a model on its training prompts, with no training: step 1 "
                                            "of a train_ppo_ray run, stopped after its advantage step. Flags after -- "
                                            "go to that run (engines, lengths, --copo.gamma, --copo.rho, ...).")
    d = compare.Setting(model="", train=Path(), test=Path())
    p.add_argument("--model", required=True, help="HF model folder or name (--actor.model_name_or_path)")
    p.add_argument("--start_checkpoint", default=None,
                   help="an HF model folder to sample from instead of --model (e.g. a policy trained before)")
    p.add_argument("--train_data", type=Path, required=True, help="training prompts, JSON lines")
    p.add_argument("--input_key", default=d.input_key, help="the rows' prompt key (--data.input_key)")
    p.add_argument("--label_key", default=d.label_key, help="the rows' label key (--data.label_key)")
    p.add_argument("--reward", default=d.reward, help="reward file (--reward.remote_url)")
    p.add_argument("--samples_per_prompt", type=int, default=d.samples_per_prompt, help="G")
    p.add_argument("--prompts_per_step", type=int, default=64,
                   help="N: the prompts probed, the first rollout batch of a run with this many prompts per step "
                        "(--rollout.batch_size) over --train_data")
    p.add_argument("--seed", type=int, default=0, help="--train.seed: which prompts come first, and their draws")
    p.add_argument("--device", default=d.device, choices=["auto", "cuda", "cpu"], help="--copo.device")
    p.add_argument("--out", type=Path, required=True,
                   help="folder for the record (probe.json), the run's log (probe.log) and the report (report.md)")
    p.add_argument("--filtered_train_data", type=Path, default=None,
                   help="also write --train_data without the probed prompts that all G responses solved (offline "
                        "difficulty filtering)")
    return p


def split_at_dashes(argv: List[str]) -> Tuple[List[str], List[str]]:
    """(this command's flags, the flags after the first `--`, which go to the run as they are)."""
    i = argv.index("--") if "--" in argv else len(argv)
    return argv[:i], argv[i + 1:]


def main(argv: Optional[List[str]] = None) -> int:
    argv, extra = split_at_dashes(sys.argv[1:] if argv is None else list(argv))
    args = parser().parse_args(argv)
    rows = [row for _, row in probe_rows(args.train_data)]
    if args.samples_per_prompt < 2:
        parser().error(f"--samples_per_prompt {args.samples_per_prompt}: a group needs at least 2 responses")
    if len(rows) < args.prompts_per_step:
        parser().error(f"--prompts_per_step {args.prompts_per_step}: {args.train_data} has {len(rows)} prompts")
    model = args.start_checkpoint or args.model
    out = args.out.resolve()
    argv = probe.probe_argv(model, args.train_data.resolve(), out / "probe.json", out / "scratch",
                            args.prompts_per_step, args.samples_per_prompt, args.seed, args.reward, args.input_key,
                            args.label_key, args.device, extra)
    record, wall = probe.run(argv, out)
    text = probe.report(record, wall)
    if args.filtered_train_data:
        templated = probe.templater(model, args.input_key, args.label_key)
        kept, dropped = probe.filtered_rows(rows, templated, record["groups"])
        write_jsonl(args.filtered_train_data, kept)
        text += (f"\n\nWrote {args.filtered_train_data}: {len(kept)} of {len(rows)} prompts, without the {dropped} "
                 "that every response solved.")
    (out / "report.md").write_text(text + "\n")
    print(text)
    return 0


def probe_rows(path: Path):
    """The training file's rows; a missing or bad file is refused in one line naming it."""
    from openrlhf_copo.files import jsonl_rows

    if not Path(path).is_file():
        raise SystemExit(f"--train_data {path}: no such file")
    return list(jsonl_rows(path, SystemExit))


def write_jsonl(path: Path, rows: List[dict]) -> None:
    from openrlhf_copo.files import write_atomic

    write_atomic(path, "".join(json.dumps(row) + "\n" for row in rows))


if __name__ == "__main__":
    raise SystemExit(main())
