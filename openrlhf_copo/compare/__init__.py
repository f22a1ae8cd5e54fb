"""Paired comparison of advantage methods on one model and data set: `python -m openrlhf_copo.cli.compare`.

    runs (method x seed, resumable)  ->  each run's metrics file  ->  each method minus GRPO, paired, over seeds

Every run is `python -m openrlhf_copo.cli.train_ppo_ray` with the same flags but the method's (`METHODS`), and the
flags that make runs of one seed comparable (`PAIRED`): the same start weights, the same prompts in the same order
(`--copo.same_pipeline` puts OpenRLHF's own estimators, DAPO's, on the same seeded prompt order), the same first
rollout batch (`--copo.seeded_rollouts`), and an evaluation after the last step (`--copo.eval_after_train`) on the
same held-out prompts, decoded greedily, whose per-prompt verdicts (`--copo.eval_greedy`) are compared prompt by
prompt. The step-0 evaluation is the same model on the same prompts for every method of a seed: the seed's first
run makes it, and the others share it.

A method's difference from the baseline (GRPO) is, per seed, the mean of the per-prompt differences of the final
greedy verdicts; over seeds, their mean with a 95% t-interval over seeds (training randomness included; Student's t,
scipy's), beside what those seeds could detect and the seeds a given difference would need (`detectable`); with
one seed, the interval is over its prompts, and says so. It is given pooled over every held-out prompt and per
held-out source (OpenRLHF evaluates each ``datasource`` apart), and at equal generated tokens: beside a uniform
baseline that spent the method's tokens, the baseline itself or a budget control (`SAMPLE_FACTOR`, `STEP_FACTOR`),
with each method's tokens against the baseline's and a plot of accuracy against them (`tokens`). What each run saw at
its first step (the share of zero-variance groups, of all-incorrect ones, of responses with a gradient) is reported
beside it: the regime the comparison was made in.

Each run records its settings (`settings_of`, by the flag that sets each) and the content of its files (`content_of`)
in its ``done.json`` (`SCHEMA`; `read_record` reads older runs into today's shape): a rerun keeps a finished run only
if they are the command's, and a report pairs only runs whose settings agree (files by content), naming the flag that
differs otherwise; the method's flags (``method_flags``) likewise. Every run draws steps x prompts per step prompts,
as many distinct ones as the data and the steps allow (`prompt_plan`). Flags after -- that would redefine a method or
one of the tool's settings, or that train_ppo_ray does not know, are refused before any run (`check_extra`; every
command line is read by train_ppo_ray's own parser, `train_flags`); `plan` is the whole sweep, each command checked
with the refusals it would meet on this machine, printed before anything runs (--dry_run). A run saves a checkpoint
every `Setting.save_every` steps; one that stopped goes on from its newest on a rerun, and one that failed is recorded
while the others go on (`run_one`, `run_all`; the process side in `openrlhf_copo.processes`).

The package, one concern a module:

    methods      METHODS, SAMPLE_FACTOR, STEP_FACTOR (the budget controls), PAIRED, BASELINE; what a run records of
                 its method; a step control's setting; sampling budgets and draw factors; the methods that stop early
                 by design
    setting      Setting (one comparison), run_dir, FLAGS (what a run records of its setting), the sweep and the
                 evaluations each run makes
    prompts      the prompts every run draws (prompt_plan), the file they train on (train_file), the held-out sources
    train_flags  train_ppo_ray's own parser, which reads every command line of the tool, and the refusals a run
                 would meet at its start (the dry run's checks)
    command      each run's train_ppo_ray command line (run_argv, TOOL_FLAGS) and the checks of the flags after --
    provenance   what a run records of how it was made (done.json, its schema, read_record), its files by content,
                 and which runs may be kept or paired
    runner       run_one, run_all, resuming from a run's checkpoints, a finished run's steps checked
    plan         the plan and its cost, before anything runs (--dry_run)
    stats        the paired difference over seeds: t-intervals, what the seeds could detect
    report       read_run, report (every column of a row over its paired seeds; runs stopped short refused),
                 markdown
    tokens       accuracy against generated tokens: each method's tokens beside the baseline's, each method minus
                 a uniform baseline that spent its tokens (the equal-tokens column), the curves and their plot

The CPU benchmark's settings are presets of this (benchmarks/learning_curve.py); on a GPU cluster the same tool
takes your model, data, G, prompts per step, steps, learning rate, start checkpoint and any OpenRLHF flag. It has
run on the CPU only (the tiny model in tests/e2e/test_compare_cpu.py, SmolLM2 in the benchmark); not on a GPU.
"""

from openrlhf_copo.compare.command import (TOOL_FLAGS, check_extra, checkpoint_flags, extra_conflicts, run_argv,
                                           step_control_flags)
from openrlhf_copo.compare.methods import (BASELINE, METHOD_HELP, METHODS, PAIRED, SAMPLE_FACTOR, STEP_FACTOR,
                                           draw_factor, method_record, rho_keeping_every_split, run_setting,
                                           samples_per_prompt, sampling_budget, stops_early)
from openrlhf_copo.compare.plan import RECIPE_STEP, plan, plan_text
from openrlhf_copo.compare.prompts import held_out_sources, prompt_plan, train_file, whole_passes
from openrlhf_copo.compare.provenance import (FILE_FLAGS, PACKAGES, SCHEMA, check_finished_run,
                                              check_same_environment, check_same_method_flags, check_same_settings,
                                              check_same_start, content_of, environment, environment_differs,
                                              file_sha256, finished_runs, is_finished, method_flags_differ,
                                              model_fingerprint, read_marker, read_record, records_differ,
                                              reward_sha256, start_fingerprint)
from openrlhf_copo.compare.report import (FIRST_STEP_KEYS, final_point, first_step_regime, markdown, read_run, report,
                                          samples_per_prompt_of)
from openrlhf_copo.compare.runner import (FAILED, STARTED, RunFailed, check_steps, checkpoint_tags, comparison_lock,
                                          failed_runs, has_every_row, prepare_run_folder, record_failure, resume_step,
                                          run_all, run_one)
from openrlhf_copo.compare.setting import (FLAGS, STEP0_FLAG, Setting, due_evaluations, evaluations, run_dir,
                                           settings_of, sweep)
from openrlhf_copo.compare.stats import (POWER, TARGET_DIFFERENCES, detectable, mean_se, paired_over_seeds,
                                         t_quantile)
from openrlhf_copo.compare.tokens import (CONTROL_KIND, CONTROL_REACH, SAME_TOKENS, equal_tokens, equal_tokens_cell,
                                          plot_tokens, token_curve, token_summary, tokens_markdown)

__all__ = ["BASELINE", "CONTROL_KIND", "CONTROL_REACH", "SAME_TOKENS", "STEP_FACTOR", "equal_tokens",
           "equal_tokens_cell", "plot_tokens", "run_setting", "step_control_flags", "token_curve", "token_summary",
           "tokens_markdown", "FAILED", "FILE_FLAGS", "FIRST_STEP_KEYS", "FLAGS", "METHODS", "PACKAGES", "PAIRED", "POWER",
           "RECIPE_STEP", "SAMPLE_FACTOR", "SCHEMA", "STARTED", "STEP0_FLAG", "TARGET_DIFFERENCES",
           "TOOL_FLAGS", "check_extra", "check_finished_run", "check_same_environment",
           "check_same_method_flags", "check_same_settings", "check_same_start", "check_steps",
           "checkpoint_flags", "checkpoint_tags", "comparison_lock", "content_of", "detectable", "draw_factor",
           "due_evaluations",
           "environment", "environment_differs", "evaluations", "extra_conflicts", "failed_runs",
           "file_sha256", "final_point", "finished_runs", "first_step_regime", "has_every_row",
           "held_out_sources", "is_finished", "markdown", "mean_se", "method_flags_differ", "method_record",
           "model_fingerprint", "paired_over_seeds", "plan", "plan_text", "prepare_run_folder",
           "prompt_plan", "read_marker", "read_record", "read_run", "record_failure", "records_differ",
           "report", "resume_step", "reward_sha256", "rho_keeping_every_split", "run_all", "run_argv", "run_dir", "run_one",
           "RunFailed", "samples_per_prompt", "samples_per_prompt_of", "sampling_budget", "Setting",
           "settings_of", "start_fingerprint", "stops_early", "sweep", "t_quantile", "train_file",
           "whole_passes"]
