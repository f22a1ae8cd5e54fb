"""A probe of the regime before a run: `python -m openrlhf_copo.cli.probe`.

    train_ppo_ray --copo.probe FILE (the first rollout batch, then stop)  ->  FILE  ->  the report

What it measures: G responses to each of N training prompts from the start model, drawn, rewarded and put through the
advantage step exactly as step 1 of a training run with the same flags and seed, and no training. Its report: the
shares of mixed, all-correct and all-incorrect groups; the consistency entropy of each group's answers and which
answer splits keep the local term at this G, gamma and rho; the nearest regime of the which-method-when table
(benchmarks/regimes.py, README) with that table's measured results there; the time it took.

Why it is a training run that stops, and not a sampler of its own: its groups must be the ones step 1 of a run would
train on, and a run's first batch depends on the whole path: the prompt order by --train.seed (runtime patch 10), the
chat template, the vLLM engines with their per-response seeds (--copo.seeded_rollouts, patch 7: however their seeds
are derived), the reward file in the engines' agent, the grouping and the answer ids of the advantage step. A second
path would have to copy each and would drift. So the probe is `python -m openrlhf_copo.cli.train_ppo_ray` with
`--copo.probe FILE`: the advantage step computes everything it computes at step 1, then raises `ProbeFinished`
carrying the batch's record (built by `batch_record` from its own tensors: the answer ids it reads, the shares it
logs); the driver writes the record to FILE and ends the run, exit status 0 (`driver.run_training`). What it costs
beyond the rollout: the run's start (Ray, the vLLM engines, the actor loaded under DeepSpeed). It skips the models'
forwards before the advantage step (`runtime_patches.copo.probe_experience_batch`, which a fork carrying patches/
calls too), the optimizer step, the weight sync and the final save. Its shares and batch metrics equal step 1's
of a run with the same flags and --train.seed (tests/e2e/test_probe_cpu.py).

Offline difficulty filtering: `filtered_rows` leaves out of the training file the probed prompts that every response
solved (the field's pass-rate-1 filter, done once before training instead of per step as DAPO does).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence

from openrlhf_copo.contract import (ALL_CORRECT, ALL_INCORRECT, CORRECT, ENTROPY, MIXED_LOCAL_LOST, W_LOCAL, ZERO_STD)

REPO = Path(__file__).resolve().parents[1]
#: What `benchmarks/regimes.py report` writes: every regime's runs, as the which-method-when table reads them.
REGIMES_JSON = REPO / "benchmarks" / "results" / "regimes.json"
REGIMES_SCRIPT = REPO / "benchmarks" / "regimes.py"
#: Up to this G the split table lists every answer split of G (22 at G = 8); beyond, the splits the batch showed.
ALL_SPLITS_UP_TO = 8
#: w_local below which a split trains on the global term alone (the start-up line's and `copo_mixed_local_lost`'s).
LOCAL_LOST = 0.05


class ProbeFinished(Exception):
    """Raised by the advantage step under `--copo.probe` once it has measured the first rollout batch: the run stops
    there, before any optimizer step. Carries the batch's record (`batch_record`) back to the driver through Ray
    (which hands the driver a copy of it), so the record reaches the driver's machine whichever node ran the step."""

    def __init__(self, record: dict):
        super().__init__(f"probe: the first rollout batch ({len(record.get('groups', []))} prompts) measured")
        self.record = record

    def __reduce__(self):  # pickled by its record, not by its message
        return ProbeFinished, (self.record,)


def finished_record(error: BaseException) -> Optional[dict]:
    """The record of a `ProbeFinished`, also as Ray wraps it (a RayTaskError whose ``cause`` it is); None for any
    other error."""
    for candidate in (error, getattr(error, "cause", None)):
        if isinstance(candidate, ProbeFinished):
            return candidate.record
    return None


def answer_split(answer_ids: Sequence[int]) -> List[int]:
    """A group's answer split: how many responses gave each distinct answer, largest first ([5, 1]: five agree)."""
    counts: Dict[int, int] = {}
    for a in answer_ids:
        counts[a] = counts.get(a, 0) + 1
    return sorted(counts.values(), reverse=True)


#: The per-prompt columns of the advantage step (`contract`) that a group's record keeps (each the group's mean).
GROUP_COLUMNS = (ZERO_STD, ALL_CORRECT, ALL_INCORRECT, ENTROPY, W_LOCAL, MIXED_LOCAL_LOST)


def batch_record(columns: Dict[str, "object"], groups, rewards, correct, answer_ids, prompts: List[str],
                 labels: List[str], settings: dict, G: int) -> dict:
    """What the probe keeps of a rollout batch, from the advantage step's own flat [N] tensors and their prompt
    groups (`core.Groups`): per group its prompt, label, rewards, correctness, answer split and its columns
    (`GROUP_COLUMNS`); for the batch, every column's mean over its responses (what the step's log shows: OpenRLHF
    averages them over the responses), the run's G (--rollout.n_samples_per_prompt; a group's own size is its
    number of rewards) and the settings."""
    records = []
    for b, (start, size) in enumerate(zip(groups.starts.tolist(), groups.sizes)):
        group = slice(start, start + size)
        records.append({"prompt": prompts[b], "label": labels[b], "rewards": rewards[group].tolist(),
                        "correct": [bool(c) for c in correct[group].tolist()],
                        "split": answer_split(answer_ids[group].tolist()),
                        **{k: columns[k][group].float().mean().item() for k in GROUP_COLUMNS}})
    metrics = {k: v.float().mean().item() for k, v in columns.items()}
    metrics[CORRECT] = correct.float().mean().item()
    return {"groups": records, "metrics": metrics, "G": int(G), "settings": settings}


def shares(groups: List[dict]) -> Dict[str, float]:
    """The shares of the batch's groups: mixed (rewards differ: GRPO's signal), all correct, all incorrect, and
    zero-variance (rewards all equal: mixed's complement; under a 0/1 reward all correct plus all incorrect)."""
    n = len(groups)
    zero = sum(g[ZERO_STD] for g in groups) / n
    return {"mixed": 1.0 - zero, "all_correct": sum(g[ALL_CORRECT] for g in groups) / n,
            "all_incorrect": sum(g[ALL_INCORRECT] for g in groups) / n, "zero_variance": zero}


def split_table(groups: List[dict], G: int, gamma: float, rho: float, base: float) -> List[dict]:
    """One row per answer split (every split of G up to `ALL_SPLITS_UP_TO`, else those the batch showed), by rising
    entropy: its entropy and sigmoid weight (the advantage step's functions, `config.attainable_blends`), what
    that weight does (`LOCAL_LOST`), and how many of the batch's groups, and of its mixed ones, showed it."""
    from openrlhf_copo.openrlhf_ext.config import attainable_blends

    seen = {tuple(g["split"]) for g in groups}
    patterns = None if G <= ALL_SPLITS_UP_TO else sorted(seen)
    rows = []
    for pattern, h, w in sorted(attainable_blends(G, gamma, rho, base, patterns), key=lambda row: row[1]):
        mine = [g for g in groups if tuple(g["split"]) == tuple(pattern)]
        term = ("one answer: no local signal" if len(pattern) == 1 else "global term alone" if w < LOCAL_LOST
                else "local term kept" if w >= 1 - LOCAL_LOST else "blend of both")
        rows.append({"split": "+".join(map(str, pattern)), "entropy": h, "w_local": w, "term": term,
                     "groups": len(mine), "mixed": sum(1 for g in mine if not g[ZERO_STD])})
    return rows


def nearest_regimes(probed: Dict[str, float], regimes: Dict[str, dict],
                    regime_of: Callable[[str], str] = lambda column: column) -> List[tuple]:
    """The columns of the which-method-when table nearest to the probe's shares: (distance, name) of every column at
    the least distance (two columns of one start tie), the distance being Euclidean over the shares of mixed,
    all-correct and all-incorrect groups, each column's from step 1 of its GRPO runs (mean over seeds); with them, every
    other column of the same regime (``regime_of``: the regime measured on other versions, whose GRPO runs drew other
    responses and so other shares), nearest first. Why: the nearest regime's results are all its columns, not only
    those of the version set whose draws happened to land nearer."""
    def distance(res):
        first = res["table"]["grpo"]["first_step"]
        theirs = {"mixed": 1 - first["copo_zero_std"], "all_correct": first["copo_all_correct"],
                  "all_incorrect": first["copo_all_incorrect"]}
        return math.sqrt(sum((probed[k] - v) ** 2 for k, v in theirs.items()))

    scored = sorted((round(distance(res), 6), name) for name, res in regimes.items() if "grpo" in res["table"])
    nearest = {regime_of(name) for dist, name in scored if dist == scored[0][0]}
    return [(dist, name) for dist, name in scored if regime_of(name) in nearest]


def regimes_script():
    """benchmarks/regimes.py, loaded by path (a script beside the package, not part of it): its `which_method_when`
    draws the table as the README shows it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("openrlhf_copo_benchmark_regimes", REGIMES_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def regime_section(probed: Dict[str, float], G: int, regimes_json: Path = REGIMES_JSON) -> List[str]:
    """The report's lines on the nearest regime: its step-1 shares and the which-method-when table's column for it, as
    `benchmarks/regimes.py report` writes it into the README."""
    if not Path(regimes_json).exists():
        return [f"No which-method-when table to compare with: {regimes_json} (written by `benchmarks/regimes.py "
                "report`) is not in this checkout."]
    regimes = json.loads(Path(regimes_json).read_text())
    script = regimes_script()
    nearest = nearest_regimes(probed, regimes, script.regime_of)
    if not nearest:
        return [f"No regime of {regimes_json} has GRPO runs to compare with."]
    lines, shown = [], {name for _, name in nearest}
    for dist, name in nearest:
        res = regimes[name]
        first = res["table"]["grpo"]["first_step"]
        lines.append(f"Nearest regime: **{script.column(name, res)}**, distance {dist:.2f} (step 1 of its GRPO runs: "
                     f"mixed {1 - first['copo_zero_std']:.2f}, all correct {first['copo_all_correct']:.2f}, all "
                     f"incorrect {first['copo_all_incorrect']:.2f})" +
                     (f"; its G is {res['G']}, this probe's {G}" if res["G"] != G else "") + ".")
    lines += ["", "Its measured results (the which-method-when table, on the CPU with SmolLM2-135M):", "",
              script.which_method_when({name: res for name, res in regimes.items() if name in shown},  # README order
                                       diagnostics=False)]
    return lines


def report(record: dict, wall_seconds: float, regimes_json: Path = REGIMES_JSON) -> str:
    """The probe's report (markdown): shares, the entropy by answer split, the nearest regime, the time."""
    groups, G, s = record["groups"], record["G"], record["settings"]
    share = shares(groups)
    n = len(groups)

    def count(key):
        return round(share[key] * n)

    lines = [f"# Probe: {n} prompts x G = {G}, seed {record.get('seed', '?')}, {wall_seconds:.0f} s", "",
             "| groups | share | prompts |", "|---|---|---|",
             f"| mixed (rewards differ) | {share['mixed']:.2f} | {count('mixed')} |",
             f"| all correct | {share['all_correct']:.2f} | {count('all_correct')} |",
             f"| all incorrect | {share['all_incorrect']:.2f} | {count('all_incorrect')} |", ""]
    if abs(share["all_correct"] + share["all_incorrect"] - share["zero_variance"]) > 1e-9:
        lines += ["The reward is not 0/1 here: groups whose rewards differ can still be all incorrect (e.g. formatted "
                  "and unformatted wrong answers), so the shares overlap.", ""]
    entropies = sorted(g[ENTROPY] for g in groups)
    mixed = [g for g in groups if not g[ZERO_STD]]
    lost = sum(1 for g in mixed if g[MIXED_LOCAL_LOST])
    lines += [f"Consistency entropy H(q) of the groups' answers (bits in base {s['entropy_base']:g}): mean "
              f"{sum(entropies) / n:.3f}, median {entropies[n // 2]:.3f}, range {entropies[0]:.3f}-"
              f"{entropies[-1]:.3f}. "
              f"By answer split, with w_local = sigmoid(gamma (H - rho)) at gamma {s['gamma']:g}, rho {s['rho']:g} "
              f"(mode {s['mode']}):", "",
              "| answer split | H | w_local | at this gamma and rho | groups | of them mixed |",
              "|---|---|---|---|---|---|"]
    for row in split_table(groups, G, s["gamma"], s["rho"], s["entropy_base"]):
        lines.append(f"| {row['split']} | {row['entropy']:.3f} | {row['w_local']:.3g} | {row['term']} | "
                     f"{row['groups']} | {row['mixed']} |")
    from openrlhf_copo.core import rho_keeping_every_split

    lines += ["", f"Mixed groups whose local term is gone (w_local < {LOCAL_LOST}): {lost} of {len(mixed)}. Every "
              f"mixed split keeps w_local >= 0.99 at rho <= {rho_keeping_every_split(G, s['gamma'], s['entropy_base'])}"
              f" (gamma {s['gamma']:g}). Under zero control (--copo.zero_control {s['zero_control']}) an all-incorrect "
              "group's w_local is 0 whatever its split.", ""]
    lines += regime_section({k: share[k] for k in ("mixed", "all_correct", "all_incorrect")}, G, regimes_json)
    lines += ["", f"Took {wall_seconds:.0f} s: the run's start (Ray, vLLM, the actor under DeepSpeed), generating "
              f"{n} x {G} responses, their rewards and the advantage step; no model forward, no training."]
    return "\n".join(lines)


def solved(groups: Iterable[dict]) -> set:
    """(prompt, label) of every probed group whose responses are all correct."""
    return {(g["prompt"], g["label"]) for g in groups if g[ALL_CORRECT]}


def filtered_rows(rows: Iterable[dict], templated, groups: List[dict]) -> tuple:
    """(kept rows, dropped count): ``rows`` of the training file less those whose prompt every probed response solved.
    ``templated(row)`` gives a row's (prompt, label) as the run saw it (`templater`), the key the groups carry."""
    done = solved(groups)
    kept, dropped = [], 0
    for row in rows:
        if templated(row) in done:
            dropped += 1
        else:
            kept.append(row)
    return kept, dropped


def templater(model: str, input_key: str, label_key: str, input_template: Optional[str] = None):
    """A row's (prompt, label) as OpenRLHF's PromptDataset makes them under --data.apply_chat_template (its own
    `preprocess_data`, with the model's tokenizer), which is what the advantage step's groups record."""
    from openrlhf.datasets.prompts_dataset import preprocess_data
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model, trust_remote_code=True)

    def templated(row: dict) -> tuple:
        return preprocess_data(row, input_template, input_key, label_key, tokenizer.apply_chat_template)

    return templated


def probe_argv(model: str, train: Path, record: Path, scratch: Path, prompts: int, samples_per_prompt: int, seed: int,
               reward: str, input_key: str, label_key: str, device: str, extra: Sequence[str]) -> List[str]:
    """The train_ppo_ray command line of a probe: step 1 of a comparison's run (`compare.run_argv`: the same data
    flags, seeded rollouts, no KL, so no reference model) with --copo.probe; ``extra`` (the flags after --) follows
    and wins, then the seed."""
    return ["--advantage_estimator", "copo", "--copo.probe", str(record), "--copo.seeded_rollouts",
            "--actor.model_name_or_path", model, "--reward.remote_url", str(reward),
            "--data.prompt_dataset", str(train), "--data.input_key", input_key, "--data.label_key", label_key,
            "--data.apply_chat_template", "--rollout.batch_size", str(prompts),
            "--rollout.n_samples_per_prompt", str(samples_per_prompt), "--train.batch_size",
            str(prompts * samples_per_prompt), "--algo.kl.use_loss", "--algo.kl.init_coef", "0",
            "--train.num_episodes", "1", "--ckpt.save_steps", "-1", "--ckpt.path", str(scratch / "ckpt"),
            "--ckpt.output_dir", str(scratch / "model"), "--copo.device", device, *extra, "--train.seed", str(seed)]


def run(argv: List[str], out: Path) -> tuple:
    """Runs the probe's train_ppo_ray (log: ``out``/probe.log); (its record, the wall seconds). A run that ends
    without its record stops here with one line naming the log."""
    record_path = out / "probe.json"
    record_path.unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with open(out / "probe.log", "w") as log:
        rc = subprocess.call([sys.executable, "-m", "openrlhf_copo.cli.train_ppo_ray", *argv], stdout=log,
                             stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    wall = time.time() - t0
    if rc != 0 or not record_path.exists():
        raise SystemExit(f"the probe's run failed (exit {rc}) before its first rollout batch was measured; log: "
                         f"{out / 'probe.log'}")
    return json.loads(record_path.read_text()), wall
