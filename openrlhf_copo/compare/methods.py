"""The methods a comparison runs, and what every run of them shares.

    METHODS          each method's train_ppo_ray flags: everything else of a run is the same for every method
    METHOD_HELP      what each method is, in one line (compare --help)
    SAMPLE_FACTOR    the methods that draw a multiple of the comparison's G per prompt (a budget control)
    STEP_FACTOR      the methods that train a multiple of the comparison's steps (a budget control); run_setting
    PAIRED           the flags of every run that make the runs of one seed comparable
    BASELINE         what every method is compared with
    method_record    what a run records of its method (done.json), and a rerun or a report compares
    sampling_budget  the responses per prompt a method that samples adaptively may draw (the plan's cost)
    draw_factor      the responses per prompt, x G, that a method keeping G at random draws (the plan's cost)
    stops_early      whether a method may end a run before --steps by design (DAPO's dynamic filtering)
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from openrlhf_copo.compare.setting import Setting
from openrlhf_copo.core import rho_keeping_every_split  # noqa: F401 (METHODS' notes name it here)


#: Each method's flags: everything else of a run is the same for every method.
METHODS: Dict[str, List[str]] = {
    "grpo": ["--advantage_estimator", "copo", "--copo.mode", "grpo"],
    "copo": ["--advantage_estimator", "copo"],
    # OpenRLHF's own group_norm with dynamic filtering (all-equal groups dropped and replaced by later prompts, so
    # DAPO makes fewer steps from the same prompts) and clip-higher; COPO refuses dynamic filtering
    "dapo": ["--advantage_estimator", "group_norm", "--algo.dynamic_filtering_enable",
             "--actor.eps_clip_low_high", "0.2", "0.28"],
    "go_only": ["--advantage_estimator", "go_only"],
    # COPO without any loss on all-incorrect prompts / GRPO plus the global term alone on them (issue 31)
    "copo_selective": ["--advantage_estimator", "copo_selective"],
    "go_selective": ["--advantage_estimator", "go_selective"],
    # the global term only where all responses agree on correctness, the local term alone elsewhere
    "copo_gated": ["--advantage_estimator", "copo_gated"],
    # COPO-Selective with rho 0.5: at G = 4 every mixed split keeps w_local ~ 1, so the global term acts on
    # all-correct prompts alone (`rho_keeping_every_split` gives the rho for another G)
    "copo_selective_rho05": ["--advantage_estimator", "copo_selective", "--copo.rho", "0.5"],
    # the same at G = 6: rho 0.4 keeps 5+1 (0.650 bits) at w_local 0.993 (`rho_keeping_every_split(6)`: 0.42)
    "copo_selective_rho04": ["--advantage_estimator", "copo_selective", "--copo.rho", "0.4"],
    # GRPO with the zero-variance groups' tokens out of the loss and its token-mean denominator (AGPO's loss mask):
    # the control for what any method gains over GRPO only because dead groups shrink GRPO's token-mean step
    "grpo_masked": ["--advantage_estimator", "copo", "--copo.mode", "grpo", "--copo.mask_zero_advantage"],
    # sequence-mean aggregation (the released code's seq-mean-token-mean) for COPO and for GRPO, its control
    "copo_seqmean": ["--advantage_estimator", "copo", "--actor.loss_agg_mode", "seq-mean-token-mean"],
    "grpo_seqmean": ["--advantage_estimator", "copo", "--copo.mode", "grpo", "--actor.loss_agg_mode",
                     "seq-mean-token-mean"],
    # the field's other answers to zero-variance groups, each with its paper's clip range
    "ngrpo": ["--advantage_estimator", "ngrpo", "--actor.eps_clip_low_high", "0.16", "0.24"],
    "rl_zvp": ["--advantage_estimator", "rl_zvp", "--actor.entropy_coef", "0", "--actor.eps_clip_low_high", "0.2",
               "0.28"],
    "dr_grpo": ["--advantage_estimator", "copo", "--copo.mode", "dr_grpo"],
    # Reinforce-Ada: more sampling rounds for unresolved prompts, G kept balanced, the pool's baseline; its defaults
    # (balanced exit, rounds of 8, 32 responses per prompt at most, no std division) and its script's clip-higher
    "reinforce_ada": ["--advantage_estimator", "reinforce_ada", "--actor.eps_clip_low_high", "0.2", "0.28"],
    # the same with COPO's global term of the pools' success rates, blended as mode copo blends (issue 52, part 4)
    "reinforce_ada_copo": ["--advantage_estimator", "reinforce_ada_copo", "--actor.eps_clip_low_high", "0.2", "0.28"],
    # the authors' released COPO (their run_copo.sh: soft-with-zero, gamma 5, rho 1, their conventions)
    "copo_released": ["--advantage_estimator", "copo", "--copo.gamma", "5", "--copo.rho", "1", "--copo.zero_control",
                      "response", "--copo.incorrect", "reward", "--copo.std", "unbiased", "--copo.answer_buckets",
                      "string", "--actor.dual_clip", "3", "--actor.loss_agg_mode", "seq-mean-token-mean"],
    # plain GRPO at 4 x the comparison's G (`SAMPLE_FACTOR`): Reinforce-Ada's generation budget given to GRPO
    "grpo_4xg": ["--advantage_estimator", "copo", "--copo.mode", "grpo"],
    # plain GRPO for 4 x the comparison's steps (`STEP_FACTOR`): the same budget spent on more steps of G
    "grpo_4xsteps": ["--advantage_estimator", "copo", "--copo.mode", "grpo"],
    # Reinforce-Ada's selection control (issue 69): it draws as grpo_4xg does (4G per prompt, whatever they are) and
    # trains as Reinforce-Ada does (G kept, the pool's baseline r - p, its clip), but keeps G at random. Reinforce-Ada
    # minus it is what its adaptive rounds and balanced keep add beyond drawing about as much (`regimes.CONTROLS`)
    "reinforce_ada_uniform": ["--advantage_estimator", "reinforce_ada_uniform", "--actor.eps_clip_low_high", "0.2",
                              "0.28"],
    # Knapsack RL (issue 69): GRPO's P x G responses a step, allocated over its prompts by value (a pilot of 2 each,
    # then the rest), GRPO's advantage over each group of its own size; GRPO's clip, so that the allocation is the
    # only difference
    "knapsack": ["--advantage_estimator", "knapsack"],
}



#: What each method is, in one line: `compare --help` lists them (the flags above say how).
METHOD_HELP: Dict[str, str] = {
    "grpo": "GRPO through COPO's path (the local term alone): the baseline every method is paired with",
    "copo": "the paper's COPO: the local term blended with the global one by the consistency entropy, zero control",
    "dapo": "OpenRLHF's group_norm with dynamic filtering (all-equal groups dropped) and clip-higher 0.28",
    "go_only": "the global term alone (the paper's Table 3 ablation)",
    "copo_selective": "COPO without any loss on all-incorrect prompts",
    "go_selective": "the global term alone on all-incorrect prompts, the local term alone elsewhere (Table 3)",
    "copo_gated": "the global term only on prompts whose rewards all agree, the local term alone elsewhere",
    "copo_selective_rho05": "copo_selective at rho 0.5: at G = 4 every mixed split keeps the local term",
    "copo_selective_rho04": "copo_selective at rho 0.4: the same at G = 6",
    "grpo_masked": "GRPO with zero-variance groups out of the loss and its token-mean (a control)",
    "copo_seqmean": "COPO with sequence-mean aggregation (the released code's seq-mean-token-mean)",
    "grpo_seqmean": "GRPO with sequence-mean aggregation (copo_seqmean's control)",
    "ngrpo": "NGRPO: a virtual reward-1 response in each group's statistics, its clip 0.16 / 0.24",
    "rl_zvp": "RL-ZVP: token-entropy advantages on zero-variance groups, its clip 0.2 / 0.28",
    "dr_grpo": "Dr. GRPO: r - mean_G r, no std",
    "reinforce_ada": "Reinforce-Ada: more sampling rounds for unresolved prompts (up to 32 each), G kept balanced, "
                     "the pool's success rate as baseline; draws more tokens than GRPO",
    "reinforce_ada_copo": "reinforce_ada plus COPO's global term of the pools' success rates",
    "copo_released": "the authors' released COPO preset (gamma 5, rho 1, their zero control and std)",
    "grpo_4xg": "GRPO drawing and training on 4 x G per prompt (a budget control for reinforce_ada)",
    "grpo_4xsteps": "GRPO for 4 x --steps (a budget control: the same tokens spent on more steps)",
    "reinforce_ada_uniform": "reinforce_ada's selection control: 4 x G drawn, G kept at random, its training",
    "knapsack": "Knapsack RL: GRPO's B x G responses allocated over the step's prompts by value (a pilot of 2 each)",
}


#: The methods that draw a multiple of the comparison's G per prompt, and train on all of them in ONE optimizer step
#: per rollout batch, as every method does at P x G (`run_argv` scales --rollout.n_samples_per_prompt and
#: --train.batch_size; `samples_per_prompt`). A method's flags cannot say it: the tool's G and train batch come after
#: them and win. `grpo_4xg` is the budget control of Reinforce-Ada (issue 52), which drew 3.75x GRPO's tokens per
#: step in `hard` (its budget: 32 per prompt). Matched with Reinforce-Ada: the prompts, steps, optimizer steps and lr;
#: not matched: the responses trained on (Reinforce-Ada keeps G of its pool, this trains on 4G, so a lower-variance
#: step) and the clip (Reinforce-Ada's 0.2 / 0.28, GRPO's 0.2); tokens differ with response lengths, so the cost
#: that counts is the one measured (docs/benchmarks.md, "The budget control").
SAMPLE_FACTOR: Dict[str, int] = {"grpo_4xg": 4}



#: The methods that train a multiple of the comparison's steps, as every method trains a step (P prompts x G, one
#: optimizer step), evaluated every --steps steps (`run_setting`): uniform GRPO's accuracy at 1, 2, ... k times the
#: tokens of a comparison's run, the other budget control. Matched with a method that draws more: the prompts' file,
#: G, the responses trained on per step and the lr; not matched: the number of optimizer steps (k x) and, where the
#: file holds just the comparison's prompts (the CPU regimes), how often each prompt is seen (k passes).
STEP_FACTOR: Dict[str, int] = {"grpo_4xsteps": 4}


def run_setting(setting: Setting, method: str) -> Setting:
    """The setting a run of ``method`` trains with: the comparison's, but for a method of `STEP_FACTOR` k: k x
    --steps steps (its prompts from the same training file, `prompts.prompt_plan`: the same prompts passed k times
    where the file holds just the comparison's, else more of its prompts), evaluated every --steps steps, so at each
    multiple of the comparison's steps (where the report reads its tokens against the other methods'). What the run
    records as its settings stays the comparison's (`setting.settings_of`), with its factor (`method_record`)."""
    from dataclasses import replace

    k = STEP_FACTOR.get(method, 1)
    return setting if k == 1 else replace(setting, steps=setting.steps * k, eval_every=setting.steps)


#: Flags of every run: the same draws from the same weights, the same pipeline for OpenRLHF's own estimators, an
#: evaluation at the end of every run, and the loss terms' pushes (the mechanism's diagnostics).
PAIRED = ["--copo.seeded_rollouts", "--copo.eval_after_train", "--copo.same_pipeline", "--copo.push_metrics"]



#: What every method is compared with.
BASELINE = "grpo"



def samples_per_prompt(setting: Setting, method: str) -> int:
    """The responses a run of ``method`` draws per prompt and trains on: the comparison's G, times the method's
    `SAMPLE_FACTOR`."""
    return setting.samples_per_prompt * SAMPLE_FACTOR.get(method, 1)



def method_record(method: str) -> dict:
    """What a run records of its method (started.json, done.json), and a rerun or a report compares: its flags, and
    its sample or step factor where it has one (a method without records none, as every run did before factors
    existed)."""
    factor, steps = SAMPLE_FACTOR.get(method, 1), STEP_FACTOR.get(method, 1)
    return {"method_flags": METHODS[method], **({"sample_factor": factor} if factor != 1 else {}),
            **({"step_factor": steps} if steps != 1 else {})}



def _adaptive_setting(method: str, extra: Sequence[str], name: str, random_keep: bool) -> Optional[int]:
    """``--copo.<name>`` of a run of ``method`` (its flags or those after --, read by train_ppo_ray's parser:
    ``--copo.ada_budget=64`` too; else the default) when its mode samples adaptively and keeps G at random or not as
    ``random_keep`` says; else None. Read from the registry's facts (`core.Mode`), not from the method's name."""
    from openrlhf_copo.compare.train_flags import given
    from openrlhf_copo.core import DEFAULTS, mode_info, modes

    flags, _ = given(list(METHODS[method]) + list(extra))
    mode = (flags.get("copo.mode") or flags["algo.advantage.estimator"]).value
    if mode not in modes() or not mode_info(mode).adaptive_sampling or mode_info(mode).random_keep != random_keep:
        return None
    return flags[f"copo.{name}"].value if f"copo.{name}" in flags else getattr(DEFAULTS, name)


def sampling_budget(method: str, extra: Sequence[str]) -> Optional[int]:
    """The responses a run of ``method`` may draw per prompt and step when its mode draws Reinforce-Ada's rounds (G
    first, then rounds up to ``--copo.ada_budget``); None when it draws G, or keeps G at random (`draw_factor`)."""
    return _adaptive_setting(method, extra, "ada_budget", random_keep=False)


def draw_factor(method: str, extra: Sequence[str]) -> Optional[int]:
    """The responses a run of ``method`` draws per prompt and step, as a multiple of G, when its mode draws one uniform
    pool and keeps G of it at random (Reinforce-Ada's selection control: ``--copo.ada_draw_factor``); else None."""
    return _adaptive_setting(method, extra, "ada_draw_factor", random_keep=True)


def stops_early(method_flags: Sequence[str]) -> bool:
    """Whether a method with these flags may end a run before --steps by design: DAPO's dynamic filtering
    (`--algo.dynamic_filtering_enable`) drops all-equal groups and refills the batch from later prompts, so it draws
    more prompts a step and the run ends when the prompts run out (OpenRLHF has no flag that draws more)."""
    from openrlhf_copo.compare.train_flags import given

    flags, _ = given(list(method_flags))
    return bool(flags.get("algo.dynamic_filtering_enable") and flags["algo.dynamic_filtering_enable"].value)
