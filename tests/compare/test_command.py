"""`compare.command`: each run's command line, and the flags after -- that would redefine a method or a setting."""

from pathlib import Path

import pytest

from compare_support import _data, setting
from openrlhf_copo import compare


def test_each_run_is_the_method_the_paired_flags_the_setting_then_the_users_flags(load_args, tmp_path):
    s = setting(tmp_path, samples_per_prompt=6, prompts_per_step=8, steps=3, lr=2e-6, eval_every=2,
                start=str(tmp_path / "plateau-start"),
                extra=["--rollout.max_new_tokens", "512", "--train.max_epochs", "2"])
    argv = compare.run_argv(s, "ngrpo", 3, tmp_path / "ngrpo-seed3", tmp_path / "train.jsonl", step0=True)
    a = load_args(argv)
    assert a.algo.advantage.estimator == "ngrpo" and tuple(a.actor.eps_clip_low_high) == (0.16, 0.24)
    assert a.copo.seeded_rollouts and a.copo.eval_after_train and a.copo.same_pipeline and a.copo.push_metrics
    assert a.copo.eval_greedy and a.copo.eval_before_train and a.train.seed == 3
    assert a.actor.model_name_or_path == str(tmp_path / "plateau-start")  # the start checkpoint, not the model
    assert (a.rollout.batch_size, a.rollout.n_samples_per_prompt, a.train.batch_size) == (8, 6, 48)
    assert a.rollout.max_new_tokens == 512 and a.train.max_epochs == 2  # the user's flags win over the defaults
    assert a.copo.metrics_file == str(tmp_path / "ngrpo-seed3" / "metrics.jsonl")
    assert a.ckpt.save_steps == 10 and a.ckpt.load_enable and Path(a.ckpt.output_dir).parent.name == "scratch"
    later = load_args(compare.run_argv(s, "dapo", 3, tmp_path / "dapo-seed3", tmp_path / "train.jsonl", step0=False))
    assert not later.copo.eval_before_train  # the seed's step-0 evaluation is made once
    # given after --, the step-0 flag is still the seed's first run's alone, and given once
    s.extra.append("--copo.eval_before_train")
    first = compare.run_argv(s, "grpo", 3, tmp_path / "grpo-seed3", tmp_path / "train.jsonl", step0=True)
    assert first.count("--copo.eval_before_train") == 1
    assert "--copo.eval_before_train" not in compare.run_argv(s, "dapo", 3, tmp_path / "dapo-seed3",
                                                              tmp_path / "train.jsonl", step0=False)
    assert later.algo.advantage.estimator == "group_norm" and later.copo.same_pipeline


def test_flags_after_the_separator_may_not_redefine_a_method_the_tool_or_another_methods_run(tmp_path):
    """`copo_selective_rho04 -- --copo.rho 1.5` trained at rho 1.5 and reported rho 0.4. Refused, naming both, in
    any spelling train_ppo_ray reads (--flag=value, an alias, several values; an abbreviation, which train_ppo_ray
    refuses, is refused as an unknown flag); the same value the
    method or the tool sets is harmless and kept; a flag of one method reaches the others' runs: refused."""
    _data(tmp_path)

    def conflicts(methods, *extra, seeds=(0,)):
        s = setting(tmp_path, prompts_per_step=3, steps=2, extra=list(extra))
        return compare.extra_conflicts(s, methods, list(seeds), tmp_path / "out")

    assert conflicts(["copo_selective_rho04"], "--copo.rho", "1.5") == \
        ["--copo.rho 1.5 would override method copo_selective_rho04, which sets --copo.rho 0.4"]
    assert conflicts(["copo_selective_rho04"], "--copo.rho=1.5") == \
        ["--copo.rho=1.5 would override method copo_selective_rho04, which sets --copo.rho 0.4"]
    assert conflicts(["copo_selective_rho04"], "--copo.rho", "0.4") == []  # what the method sets anyway
    for method, sets in (("ngrpo", "0.16 0.24"), ("rl_zvp", "0.2 0.28"), ("dapo", "0.2 0.28")):
        assert conflicts([method], "--actor.eps_clip_low_high", "0.1", "0.3") == \
            [f"--actor.eps_clip_low_high 0.1 0.3 would override method {method}, which sets "
             f"--actor.eps_clip_low_high {sets}"]
    assert conflicts(["grpo"], "--algo.advantage.estimator=group_norm") == \
        ["--algo.advantage.estimator=group_norm would override method grpo, which sets --advantage_estimator copo"]
    assert conflicts(["grpo", "copo"], "--copo.mode", "grpo") == \
        ["--copo.mode grpo is method grpo's flag (--copo.mode grpo): after -- it would reach the copo runs too"]
    # an abbreviation is no flag of train_ppo_ray's, which takes whole flags only: named, as the run would refuse it
    assert conflicts(["grpo"], "--rollout.n_samples_per", "8") == \
        ["train_ppo_ray does not know --rollout.n_samples_per (misspelt, or abbreviated: it takes whole flags only; "
         "`python -m openrlhf_copo.cli.train_ppo_ray --help` lists them)"]
    assert conflicts(["grpo"], "--train.seed", "0", seeds=(0, 1)) == \
        ["--train.seed 0 would override the tool's --seeds, which sets --train.seed 1"]
    assert conflicts(["grpo"], "--data.max_samples", "6") == \
        ["--data.max_samples 6 would override the tool's --steps x --prompts_per_step (the prompt file the tool "
         "writes)"]
    # the tool's defaults may change, and what every run has anyway is kept
    assert conflicts(["grpo", "copo"], "--algo.kl.init_coef", "0.01", "--train.num_episodes", "1",
                     "--copo.seeded_rollouts", "--copo.rho", "1.0") == []


def test_the_cli_refuses_a_redefining_flag_before_any_run_starts(tmp_path):
    from openrlhf_copo.cli import compare as cli

    _data(tmp_path)
    with pytest.raises(SystemExit, match=r"--copo.rho 1.5 would override method copo_selective_rho04, which sets "
                                         r"--copo.rho 0.4"):
        cli.main(["--model", "m", "--train_data", str(tmp_path / "train.jsonl"), "--eval_data",
                  str(tmp_path / "test.jsonl"), "--methods", "grpo", "copo_selective_rho04", "--seeds", "0",
                  "--prompts_per_step", "3", "--steps", "2", "--out", str(tmp_path / "out"), "--", "--copo.rho",
                  "1.5"])
    assert not list((tmp_path / "out").glob("*-seed*"))  # no run began


def test_the_cpu_presets_pass_no_flag_that_redefines_a_method(tmp_path):
    """The benchmark's presets (`job.compare_setting`: the demo's flags less the tool's) repeat only what the tool
    sets anyway (--train.num_episodes 1): every method of the regimes' screen and of the learning curve runs."""
    from openrlhf_copo.cpu_demo import job

    _data(tmp_path, rows=12)
    for G, overrides in ((6, {"--copo.eval_sampled_prompts": "48"}),
                         (4, {"--ds.zero_stage": "2", "--train.micro_batch_size": "8"})):
        s = job.compare_setting("model", tmp_path / "train.jsonl", tmp_path / "test.jsonl", 2, 2, G, overrides)
        assert compare.extra_conflicts(s, list(compare.METHODS), [0, 1], tmp_path / "out") == []
