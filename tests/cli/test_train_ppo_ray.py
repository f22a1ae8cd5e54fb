"""The entry point: OpenRLHF's parser with COPO's flags, the alias, and one-line refusals."""

import subprocess
import sys

import pytest

from openrlhf_copo.openrlhf_ext import runtime_patches
from openrlhf_copo.openrlhf_ext.config import copo_settings
from tests_support import cli_exit_here, copo_argv

OPENRLHF_ESTIMATORS = ["gae", "reinforce", "rloo", "reinforce_baseline", "group_norm", "dr_grpo", "flash_reinforce"]


def test_help_shows_alias_and_copo_flags(capfd):
    code, text, err = cli_exit_here(["--help"], capfd)
    assert code == 0, err
    assert "--advantage_estimator ESTIMATOR" in text and "--algo.advantage.estimator ESTIMATOR" in text
    for flag in ("--copo.gamma", "--copo.rho", "--copo.mode", "--copo.zero_control", "--copo.std", "--copo.eps",
                 "--copo.entropy_base"):
        assert flag in text
    assert "copo, go_selective, go_blended, go_only, copo_selective" in " ".join(text.split())
    assert "--rollout.n_samples_per_prompt" in text  # OpenRLHF's own flags are all still there
    flat = " ".join(text.split())
    # every --copo.* flag states its default, each read from CopoSettings
    for shown in ("released script: 5) (default: 20.0)", "(default: prompt)", "(default: auto)",
                  "(default: None)", "(default: off)", "(default: 0.5)"):
        assert shown in flat, shown
    assert flat.count("(default: ") >= 23


def test_paper_defaults(load_args):
    args = load_args(copo_argv())
    assert args.algo.advantage.estimator == "copo"
    assert copo_settings(args) == dict(mode="copo", gamma=20.0, rho=1.5, zero_control="prompt", std="population",
                                       eps=1e-6, entropy_base=2.0, global_coef=1.0, reward_coef=False, zvp_alpha=0.1)


@pytest.mark.parametrize("estimator", OPENRLHF_ESTIMATORS + ["copo", "go_selective", "go_blended", "go_only",
                                                             "copo_selective"])
def test_alias_spellings_for_every_estimator(load_args, estimator):
    base = copo_argv()[2:]  # without the estimator
    got = {load_args(base + [flag, estimator]).algo.advantage.estimator
           for flag in ("--advantage_estimator", "--advantage-estimator", "--algo.advantage.estimator")}
    assert got == {estimator}


def test_ablation_estimator_sets_the_mode(load_args):
    assert copo_settings(load_args(copo_argv()[2:] + ["--advantage_estimator", "go_only"]))["mode"] == "go_only"
    assert copo_settings(load_args(copo_argv("--copo.mode", "grpo")))["mode"] == "grpo"


def test_openrlhf_flags_keep_their_meaning(load_args):
    args = load_args(copo_argv("--actor.eps_clip", "0.28", "--rollout.temperature", "0.7"))
    assert args.actor.eps_clip_low_high == (0.28, 0.28)  # OpenRLHF's own post-parse step ran
    assert args.rollout.temperature == 0.7
    assert args.critic.model_name_or_path is None  # no critic for COPO (not gae)
    assert isinstance(args.reward.remote_url, list)


@pytest.mark.parametrize(
    "extra, reason",
    [
        (["--rollout.n_samples_per_prompt", "1"], "--rollout.n_samples_per_prompt 1: COPO needs at least 2"),
        (["--algo.dynamic_filtering_enable"], "--algo.dynamic_filtering_enable drops"),
        (["--algo.kl.init_coef", "0.01"], "without --algo.kl.use_loss folds a KL penalty"),
        (["--train.async_enable"], "--train.async_enable is not supported with COPO"),
        (["--copo.eps", "-1"], "--copo.eps -1.0 must be >= 0"),
        (["--copo.entropy_base", "1"], "--copo.entropy_base 1.0 must be positive"),
        (["--copo.max_verify_failed", "1.5"], "--copo.max_verify_failed 1.5 must be a share in [0, 1]"),
        (["--rollout.vllm_generate_batch_size", "2"],
         "--rollout.vllm_generate_batch_size 2 < --rollout.batch_size 4: OpenRLHF then trains each step on 2 prompts"),
        (["--copo.mode", "copo", "--advantage_estimator", "go_only"], "conflicts with --copo.mode copo"),
        (["--advantage_estimator", "rl_zvp"], "mode rl_zvp needs the policy's token entropy from OpenRLHF's training "
                                              "forward, which computes it only with an entropy coefficient: add "
                                              "--actor.entropy_coef 0"),
        (["--copo.mode", "dr_grpo", "--copo.std", "population"],
         "--copo.std population: mode dr_grpo is defined by std none; drop --copo.std"),
        (["--copo.global_coef", "-1"], "--copo.global_coef -1.0 must be >= 0"),
        (["--advantage_estimator", "reinforce_ada", "--copo.ada_budget", "3"],
         "--copo.ada_budget 3 < --rollout.n_samples_per_prompt 4: mode reinforce_ada draws the normal rollout's 4"),
        (["--advantage_estimator", "reinforce_ada", "--copo.ada_round_size", "0"],
         "--copo.ada_round_size 0 must be >= 1"),
    ],
)
def test_bad_settings_are_refused_with_one_line(load_args, capsys, extra, reason):
    argv = copo_argv()
    if "--algo.kl.init_coef" in extra:  # drop the default KL loss flags first
        argv = [a for a in argv if a != "--algo.kl.use_loss"]
    with pytest.raises(SystemExit) as exc:
        load_args(argv + extra)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and reason in err[0], err


def test_missing_reward_function_is_refused(load_args, capsys):
    argv = copo_argv()
    i = argv.index("--reward.remote_url")
    with pytest.raises(SystemExit):
        load_args(argv[:i] + argv[i + 2:])
    assert "--reward.remote_url" in capsys.readouterr().err


def test_unsupported_openrlhf_stops_the_cli_in_one_line(load_args, capsys, monkeypatch):
    def refuse():
        raise runtime_patches.OpenRLHFVersionError("openrlhf 0.12.1 is installed; openrlhf_copo patches openrlhf<0.12 only")

    monkeypatch.setattr(runtime_patches, "check_openrlhf", refuse)
    with pytest.raises(SystemExit):
        load_args(copo_argv())
    assert capsys.readouterr().err.strip().endswith("openrlhf_copo patches openrlhf<0.12 only")


def test_cpu_only_settings_are_refused_on_a_machine_without_cuda():
    """The quick tier's one run of `python -m openrlhf_copo.cli.train_ppo_ray` in a fresh Python (the other refusals
    run its `main` in the test's process, `cli_exit_here`): the module's entry, and the driver's steps up to the device
    decision in a process nothing else has patched."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")  # never in CI: CI machines have none
    out = subprocess.run([sys.executable, "-m", "openrlhf_copo.cli.train_ppo_ray", *copo_argv()],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    last = out.stderr.strip().splitlines()[-1]
    assert "the actors run on the CPU path (--copo.device auto: no Ray cluster to join" in last, last
    assert "--vllm.sync_backend gloo" in last
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("make, reason", [
    (lambda d: copo_argv(model=str(d / "missing-model")), "--actor.model_name_or_path {d}/missing-model does not exist"),
    (lambda d: copo_argv(model=str(d)), "--actor.model_name_or_path {d} is not a Hugging Face model folder"),
])
def test_preflight_model(tmp_path, make, reason):
    from openrlhf_copo.openrlhf_ext.preflight import PreflightError, preflight

    from openrlhf_copo.cli.train_ppo_ray import load_args

    with pytest.raises(PreflightError, match=reason.format(d=tmp_path).replace(".", r"\.")):
        preflight(load_args(make(tmp_path)))


@pytest.mark.parametrize("lines, reason", [
    (None, "--data.prompt_dataset {f} does not exist"),
    (['{"prompt": "1+1?", "label": "2"}', '{"prompt": "2+2?"}'], "{f}:2: no label in 'label'"),
    (['{"question": "1+1?", "label": "2"}'], "{f}:1: no 'prompt'"),
    (['{"prompt": "1+1?", "label": "2"}', '{"prompt": "x?", "label": "???"}'],
     "{f}:2: label '???' cannot be parsed by math-verify"),
    ([], "--data.prompt_dataset {f} has no rows"),
])
def test_preflight_dataset(tmp_path, tiny_model_dir, lines, reason):
    from openrlhf_copo.openrlhf_ext.preflight import PreflightError, preflight

    from openrlhf_copo.cli.train_ppo_ray import load_args

    f = tmp_path / "prompts.jsonl"
    if lines is not None:
        f.write_text("\n".join(lines) + ("\n" if lines else ""))
    args = load_args(copo_argv("--data.prompt_dataset", str(f), "--data.input_key", "prompt", "--data.label_key",
                               "label", model=tiny_model_dir))
    with pytest.raises(PreflightError) as exc:
        preflight(args)
    assert str(exc.value).startswith(reason.format(f=f)), str(exc.value)


def test_preflight_passes_good_input(tmp_path, tiny_model_dir):
    from openrlhf_copo.openrlhf_ext.preflight import preflight

    from openrlhf_copo.cli.train_ppo_ray import load_args

    f = tmp_path / "prompts.jsonl"
    f.write_text('{"prompt": "1+1?", "label": "2"}\n{"prompt": "half?", "label": "\\\\frac{1}{2}"}\n')
    preflight(load_args(copo_argv("--data.prompt_dataset", str(f), "--data.input_key", "prompt",
                                  "--data.label_key", "label", model=tiny_model_dir)))


def ada_run(tmp_path, reward_source, *extra):
    """The arguments of a Reinforce-Ada run scored by a reward file of ``reward_source`` (None: the shipped
    math_reward.py), as OpenRLHF hands them to train (its remote_url split into a list)."""
    from openrlhf_copo.cli.train_ppo_ray import load_args

    argv = copo_argv("--advantage_estimator", "reinforce_ada", *extra)
    if reward_source is not None:
        reward = tmp_path / "my_reward.py"
        reward.write_text(reward_source)
        argv[argv.index("--reward.remote_url") + 1] = str(reward)
    return load_args(argv)


@pytest.mark.parametrize("threshold, counted", [("5", "no response"), ("1", "no response"), ("-0.5", "every response")])
def test_preflight_refuses_a_threshold_outside_the_rewards_the_reward_file_declares(tmp_path, threshold, counted):
    """--copo.ada_threshold 5 with 0/1 rewards: no response counts as correct, every prompt draws the whole budget and
    trains on its reward with no baseline. Refused before the run, in one line naming the flag and the file, when the
    reward file declares its range (contract.REWARD_RANGE, read from its source)."""
    from openrlhf_copo.openrlhf_ext.preflight import PreflightError, preflight

    args = ada_run(tmp_path, "REWARD_RANGE = (0.0, 1.0)\n", "--copo.ada_threshold", threshold)
    with pytest.raises(PreflightError) as exc:
        preflight(args)
    assert str(exc.value) == (
        f"--copo.ada_threshold {float(threshold):g} is outside the rewards of {tmp_path / 'my_reward.py'} "
        f"(REWARD_RANGE 0 to 1): {counted} would count as correct, so every prompt would draw the whole "
        "--copo.ada_budget and train on its reward with no baseline; give a threshold in [0, 1)")


def test_preflight_accepts_a_threshold_in_range_or_a_reward_file_without_one(tmp_path):
    from openrlhf_copo.openrlhf_ext.preflight import preflight

    preflight(ada_run(tmp_path, None, "--copo.ada_threshold", "0"))  # the shipped math_reward.py: [0, 1)
    preflight(ada_run(tmp_path, "REWARD_RANGE: tuple = (-1, 1)\n", "--copo.ada_threshold", "-1"))
    preflight(ada_run(tmp_path, "def reward_func(q, p, l):\n    pass\n", "--copo.ada_threshold", "5"))  # first step
    # a mode that samples once never reads the threshold (and a flag given there is refused before: copo_problems)
    args = ada_run(tmp_path, "REWARD_RANGE = (0.0, 1.0)\n")
    args.algo.advantage.estimator, args.copo.ada_threshold = "copo", 5.0
    preflight(args)


@pytest.mark.parametrize("source, reason", [
    ("REWARD_RANGE = (1.0, 0.0)\n", "{f}:1: REWARD_RANGE must be a literal pair of numbers"),
    ("import math\nREWARD_RANGE = (0, math.inf)\n", "{f}:2: REWARD_RANGE must be a literal pair of numbers"),
    ("REWARD_RANGE = [0, 1, 2]\n", "{f}:1: REWARD_RANGE must be a literal pair of numbers"),
    ("REWARD_RANGE: tuple\n", "{f}:1: REWARD_RANGE must be a literal pair of numbers"),
    ("def reward_func(:\n", "{f}:1: not Python"),
])
def test_preflight_names_a_bad_reward_range_declaration(tmp_path, source, reason):
    from openrlhf_copo.openrlhf_ext.preflight import PreflightError, preflight

    with pytest.raises(PreflightError) as exc:
        preflight(ada_run(tmp_path, source))
    assert str(exc.value).startswith(reason.format(f=tmp_path / "my_reward.py")), str(exc.value)


def test_the_shipped_reward_files_declare_the_rewards_they_give():
    from openrlhf_copo.openrlhf_ext.preflight import declared_reward_range
    from openrlhf_copo.rewards.math_reward import FORMAT_REWARD
    from tests_support import REPO

    rewards = REPO / "openrlhf_copo" / "rewards"
    for name in ("math_reward.py", "math_last_number_reward.py"):
        assert declared_reward_range(str(rewards / name)) == (0.0, 1.0)  # 0/1 correctness
    assert declared_reward_range(str(rewards / "math_format_reward.py")) == (min(FORMAT_REWARD), max(FORMAT_REWARD))
    for fixture in ("parity_reward.py", "uniform_reward.py", "recording_reward.py"):
        assert declared_reward_range(str(REPO / "tests" / "fixtures" / fixture)) == (0.0, 1.0)


def warnings_in(err: str) -> list:
    """The start-up warnings among stderr's lines (the regime line is not one)."""
    return [line for line in err.strip().splitlines() if "COPO regime" not in line]


def test_the_start_line_states_which_answer_splits_keep_the_local_term(load_args, capsys):
    """G = 4, gamma 20, rho 1.5 (the benchmark's): H of 3+1 = 0.811 bits -> w_local sigmoid(20 (0.811 - 1.5)) =
    1.0e-6; 2+2 = 1 bit -> sigmoid(-10) = 4.5e-5; 2+1+1 = 1.5 bits -> 0.5; 1+1+1+1 = 2 bits -> sigmoid(10) = 1.
    The released preset (gamma 5, rho 1) keeps the local term in every split: 3+1 -> sigmoid(5 (0.811 - 1)) = 0.28."""
    load_args(copo_argv())
    line = [x for x in capsys.readouterr().err.splitlines() if "COPO regime" in x]
    assert len(line) == 1
    assert ("keep the local term: 2+1+1 (H 1.5, w_local 0.5), 1+1+1+1 (H 2, w_local 1); that train on the global "
            "term alone (w_local < 0.05): 3+1 (H 0.811, w_local 1e-06), 2+2 (H 1, w_local 4.5e-05)") in line[0]
    load_args(copo_argv("--copo.gamma", "5", "--copo.rho", "1"))
    line = [x for x in capsys.readouterr().err.splitlines() if "COPO regime" in x][0]
    assert "3+1 (H 0.811, w_local 0.28)" in line and "global term alone (w_local < 0.05): none" in line
    load_args(copo_argv("--copo.mode", "grpo"))  # no blend: no regime to state
    assert "COPO regime" not in capsys.readouterr().err


def test_too_few_samples_for_rho_is_warned_at_start(load_args, capsys):
    """Warned from the entropies G can attain. G = 2: H is 0 or 1 bit, never above rho 1.5 (w_local at most
    sigmoid(-10)). G = 3: 0, 0.918 or 1.585 bits; only the all-different pattern passes rho, the next one gives
    w_local 9e-6, so every group that repeats an answer is GO-Only (the old log2(G) <= rho test missed it)."""
    load_args(copo_argv())  # G = 4: [2,1,1] is at H = 1.5 exactly, w_local 0.5
    assert "warning" not in capsys.readouterr().err
    load_args(copo_argv("--rollout.n_samples_per_prompt", "2"))
    err = warnings_in(capsys.readouterr().err)
    assert len(err) == 1 and "no answer pattern reaches w_local 0.05" in err[0] and "1+1: H 1 w_local 4.5e-05" in err[0]
    load_args(copo_argv("--rollout.n_samples_per_prompt", "3"))
    err = warnings_in(capsys.readouterr().err)
    assert len(err) == 1 and "only the all-different pattern (H 1.58)" in err[0], err
    assert "2+1: H 0.918 w_local 8.9e-06" in err[0] and "1 of 2 split patterns blend" in err[0]
    load_args(copo_argv("--rollout.n_samples_per_prompt", "3", "--copo.rho", "0.8"))  # 2+1 now blends
    assert "warning" not in capsys.readouterr().err
    load_args(copo_argv("--rollout.n_samples_per_prompt", "2", "--copo.mode", "grpo"))  # no blend: nothing to warn
    assert "warning" not in capsys.readouterr().err


def test_a_peer_mode_run_with_another_clip_than_its_paper_is_warned(load_args, capsys):
    load_args(copo_argv("--advantage_estimator", "ngrpo"))
    err = warnings_in(capsys.readouterr().err)
    assert len(err) == 1 and ("mode ngrpo: its paper clips the ratio to [1 - 0.16, 1 + 0.24], this run to [1 - 0.2, "
                              "1 + 0.2]: add --actor.eps_clip_low_high 0.16 0.24") in err[0]
    load_args(copo_argv("--advantage_estimator", "ngrpo", "--actor.eps_clip_low_high", "0.16", "0.24"))
    assert warnings_in(capsys.readouterr().err) == []
    load_args(copo_argv("--advantage_estimator", "rl_zvp", "--actor.entropy_coef", "0",
                        "--actor.eps_clip_low_high", "0.2", "0.28"))
    assert warnings_in(capsys.readouterr().err) == []


def test_a_reward_clip_range_is_warned_not_silently_ignored(load_args, capsys):
    load_args(copo_argv("--reward.clip_range", "-1", "1"))
    err = capsys.readouterr().err
    assert "--reward.clip_range -1 1 is not applied under COPO" in err


def test_every_setting_is_a_flag_with_its_declared_default(load_args):
    """CopoSettings declares each setting once; the parser, the defaults and the resume record come from it."""
    from dataclasses import fields

    from openrlhf_copo.core import DEFAULTS, modes
    from openrlhf_copo.openrlhf_ext.config import CopoSettings, copo_estimators, resume_record

    args = load_args(copo_argv())
    assert CopoSettings.from_args(args) == CopoSettings()
    assert set(vars(args.copo)) == {f.name for f in fields(CopoSettings)}
    assert set(copo_estimators()) == set(modes()) - {"grpo", "dr_grpo"}  # OpenRLHF's names stay OpenRLHF's
    record = resume_record(args)
    assert record == {"estimator": "copo", "mode": "copo", "gamma": 20.0, "rho": 1.5, "zero_control": "prompt",
                      "incorrect": "answer", "std": "population", "eps": 1e-6, "entropy_base": 2.0,
                      "answer_buckets": "equivalence", "global_coef": 1.0, "reward_coef": False}
    # the defaults are the core's, declared once; the std's default is the mode's own (the core's for COPO)
    assert {k: getattr(CopoSettings(), k) for k in vars(DEFAULTS) if k != "std"} == \
        {k: v for k, v in vars(DEFAULTS).items() if k != "std"}
    assert CopoSettings().std is None and resume_record(args)["std"] == DEFAULTS.std
    assert resume_record(load_args(copo_argv("--advantage_estimator", "ngrpo")))["std"] == "unbiased"
    rl_zvp = resume_record(load_args(copo_argv("--advantage_estimator", "rl_zvp", "--actor.entropy_coef", "0")))
    assert rl_zvp["zvp_alpha"] == 0.1 and "answer_buckets" not in rl_zvp and "gamma" not in rl_zvp
    # a setting the mode never reads is not part of what a resume must keep
    go_only = resume_record(load_args(copo_argv("--advantage_estimator", "go_only", "--copo.zero_control", "none")))
    assert "zero_control" not in go_only and "gamma" not in go_only and "rho" not in go_only
    assert resume_record(load_args(copo_argv("--copo.zero_control", "none")))["zero_control"] == "none"
    # the loss mask changes the step: kept on resume when on, and absent when off (as in checkpoints before it)
    assert resume_record(load_args(copo_argv("--copo.mask_zero_advantage")))["mask_zero_advantage"] is True


def test_reinforce_ada_resumes_only_with_its_sampling_settings(load_args, tmp_path):
    """The four --copo.ada_* settings change what is trained on: kept in the resume record of reinforce_ada (not of
    modes that never read them), and a resume with another exit rule is refused in one line."""
    from openrlhf_copo.openrlhf_ext.config import CopoConfigError, check_resume_settings, resume_record

    ckpt = tmp_path / "ckpt"
    argv = copo_argv("--advantage_estimator", "reinforce_ada", "--ckpt.path", str(ckpt), "--ckpt.load_enable",
                     "--ckpt.save_steps", "1")
    record = resume_record(load_args(argv))
    assert {k: record[k] for k in record if k.startswith("ada_")} == {
        "ada_exit": "balanced", "ada_round_size": 8, "ada_budget": 32, "ada_threshold": 0.7}
    assert record["std"] == "none" and "gamma" not in record  # their script's: no std division
    assert not any(k.startswith("ada_") for k in resume_record(load_args(copo_argv())))
    check_resume_settings(load_args(argv))  # the first run writes its record
    (ckpt / "_actor" / "global_step1").mkdir(parents=True)
    (ckpt / "_actor" / "latest").write_text("global_step1")
    check_resume_settings(load_args(argv))  # same settings: resumes
    with pytest.raises(CopoConfigError, match="ada_exit: 'balanced' -> 'positive_focused'"):
        check_resume_settings(load_args(argv + ["--copo.ada_exit", "positive_focused"]))


def test_knapsack_resumes_only_with_its_cap_and_refuses_a_rollout_cut_across_its_groups(load_args, capsys):
    """--copo.knapsack_max_n changes the allocation: kept in knapsack's resume record, not in another mode's. A
    --rollout.vllm_generate_batch_size other than the rollout batch would have OpenRLHF cut one rollout of groups of
    different sizes into steps of batch x n responses: refused in one line."""
    from openrlhf_copo.openrlhf_ext.config import resume_record

    record = resume_record(load_args(copo_argv("--advantage_estimator", "knapsack", "--copo.knapsack_max_n", "16")))
    assert record["knapsack_max_n"] == 16 and record["mode"] == "knapsack" and "gamma" not in record
    assert "knapsack_max_n" not in resume_record(load_args(copo_argv()))
    with pytest.raises(SystemExit):
        load_args(copo_argv("--advantage_estimator", "knapsack", "--rollout.vllm_generate_batch_size", "8"))
    assert ("--rollout.vllm_generate_batch_size 8 != --rollout.batch_size 4: mode knapsack allocates one step's "
            "responses over the prompts drawn together") in capsys.readouterr().err


def test_copos_checks_see_the_arguments_openrlhf_hands_to_train(load_args, monkeypatch):
    """COPO's checks run where OpenRLHF's main calls train(args), after its own adjustments: an agent function
    becomes remote_url ["agent"] there, so a COPO run with an agent function (whose step returns copo_answer_id) is
    accepted, not refused for a missing reward function; a dynamic batch has forced packing_samples. Neither
    argparse's parse_args nor ray.is_initialized is replaced for the process while OpenRLHF's main runs."""
    import argparse

    import ray

    from openrlhf_copo.openrlhf_ext import driver

    seen = []
    original = driver.copo_problems
    parse_args, is_initialized = argparse.ArgumentParser.parse_args, ray.is_initialized

    def recording(args):
        seen.append((args.reward.remote_url, args.ds.packing_samples,
                     argparse.ArgumentParser.parse_args is parse_args, ray.is_initialized is is_initialized))
        return original(args)

    monkeypatch.setattr(driver, "copo_problems", recording)
    argv = copo_argv("--train.agent_func_path", "my_agent.py", "--train.dynamic_batch_enable",
                     "--train.max_tokens_per_gpu", "4096", "--vllm.num_engines", "1")
    i = argv.index("--reward.remote_url")
    args = load_args(argv[:i] + argv[i + 2:])
    assert seen == [(["agent"], True, True, True)]
    assert args.reward.remote_url == ["agent"] and args.train.agent_func_path == "my_agent.py"


def test_openrlhfs_own_refusal_is_one_line(load_args, capsys):
    """An `assert` of OpenRLHF's main (here: too few sample batches for the actor ranks) ends the CLI in one line
    that names OpenRLHF's file and line, not a traceback."""
    with pytest.raises(SystemExit) as exc:
        load_args(copo_argv("--rollout.micro_batch_size", "64", "--actor.num_gpus_per_node", "8"))
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "OpenRLHF's train_ppo_ray refused the arguments (" in err[0] and "train_ppo_ray.py:" in err[0]
    assert "greater than or equal to the effective number of actor processes" in err[0]


@pytest.mark.parametrize("extra, flag", [
    (["--copo.mask_zero_advantage"], "--copo.mask_zero_advantage"),
    (["--copo.gamma", "5"], "--copo.gamma 5.0"),
    (["--copo.mode", "grpo"], "--copo.mode grpo"),
    (["--copo.zero_control", "none"], "--copo.zero_control none"),
    (["--copo.max_verify_failed", "0.9"], "--copo.max_verify_failed 0.9"),
])
def test_a_copo_flag_under_openrlhfs_own_estimator_is_refused_not_ignored(load_args, capsys, extra, flag):
    """`--advantage_estimator group_norm --copo.mask_zero_advantage` trained plain GRPO until issue 44: COPO's patches
    are not installed for OpenRLHF's estimators, so the flag did nothing. Every such flag is refused in one line naming
    it and the estimator; given at its default, or with one of COPO's estimators, it is accepted."""
    base = copo_argv()[2:]  # without the estimator
    with pytest.raises(SystemExit) as exc:
        load_args(base + ["--advantage_estimator", "group_norm"] + extra)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and (f"{flag} is read by COPO's estimators only, and --advantage_estimator group_norm is "
                              "OpenRLHF's own, which would ignore it: drop it") in err[0], err
    default = {"--copo.gamma": "20", "--copo.max_verify_failed": "0.5"}.get(extra[0])
    if default is not None:  # the flag given its default value changes nothing
        load_args(base + ["--advantage_estimator", "group_norm", extra[0], default])
    assert load_args(base + ["--advantage_estimator", "copo"] + extra).algo.advantage.estimator == "copo"


def test_flags_every_estimator_reads_are_accepted_under_openrlhfs_own(load_args, capsys, tmp_path):
    args = load_args(copo_argv()[2:] + ["--advantage_estimator", "group_norm", "--copo.seeded_rollouts",
                                        "--copo.same_pipeline", "--copo.metrics_file", str(tmp_path / "m.jsonl"),
                                        "--copo.eval_greedy", "--eval.dataset", "held-out.jsonl", "--copo.device",
                                        "cuda"])
    assert args.copo.same_pipeline and warnings_in(capsys.readouterr().err) == []


def said(capsys) -> list:
    """The start-up warnings, without the prefix ("<prog>: warning: ")."""
    return [line.split("warning: ", 1)[-1] for line in warnings_in(capsys.readouterr().err)]


def test_openrlhfs_own_estimator_of_a_copo_modes_name_and_log_only_flags_are_said_at_start(load_args, capsys):
    """`--advantage_estimator dr_grpo` stays OpenRLHF's own Dr. GRPO (what an OpenRLHF user expects); the start says
    which it is and how to get this package's mode. A flag that only adds COPO's logs (the benchmark gives it to every
    method) is accepted under OpenRLHF's estimators, with a line saying it logs nothing there."""
    args = load_args(copo_argv()[2:] + ["--advantage_estimator", "dr_grpo"])
    assert args.algo.advantage.estimator == "dr_grpo"
    assert said(capsys) == ["--advantage_estimator dr_grpo is OpenRLHF's own estimator; openrlhf_copo's mode of that "
                            "name is --advantage_estimator copo --copo.mode dr_grpo"]
    assert copo_settings(load_args(copo_argv("--copo.mode", "dr_grpo")))["mode"] == "dr_grpo"
    assert "OpenRLHF's own" not in capsys.readouterr().err
    load_args(copo_argv()[2:] + ["--advantage_estimator", "group_norm", "--copo.push_metrics"])
    assert said(capsys) == ["--copo.push_metrics logs COPO's two loss terms; --advantage_estimator group_norm "
                            "(OpenRLHF's own) has none, so it logs nothing"]


@pytest.mark.parametrize("flag, value", [("--copo.eval_greedy", None), ("--copo.eval_before_train", None),
                                         ("--copo.eval_after_train", None), ("--copo.eval_sampled_prompts", "50")])
@pytest.mark.parametrize("estimator", ["copo", "group_norm"])
def test_an_evaluation_flag_without_an_evaluation_is_refused_in_one_line(load_args, capsys, flag, value, estimator):
    """Without --eval.dataset OpenRLHF runs no held-out evaluation, so these flags changed nothing and said nothing."""
    extra = [flag] + ([value] if value else [])
    argv = copo_argv()[2:] + ["--advantage_estimator", estimator]
    with pytest.raises(SystemExit) as exc:
        load_args(argv + extra)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    shown = flag + (f" {value}" if value else "")
    assert err == [f"python -m openrlhf_copo.cli.train_ppo_ray: error: {shown} changes the held-out evaluation, "
                   "which runs only with --eval.dataset: add --eval.dataset, or drop it"], err
    assert load_args(argv + extra + ["--eval.dataset", "held-out.jsonl"]).eval.dataset == "held-out.jsonl"


@pytest.mark.parametrize("flag, value", [("--copo.ada_exit", "positive_focused"), ("--copo.ada_round_size", "4"),
                                         ("--copo.ada_budget", "16"), ("--copo.ada_threshold", "0.5")])
@pytest.mark.parametrize("mode, name", [([], "copo"), (["--copo.mode", "grpo"], "grpo"),
                                        (["--advantage_estimator", "go_only"], "go_only")])
def test_an_adaptive_sampling_flag_under_a_mode_that_samples_once_is_refused(load_args, capsys, flag, value, mode,
                                                                              name):
    """`--advantage_estimator copo --copo.ada_budget 16` trained COPO and drew G per prompt, saying nothing: the flag
    is read by Reinforce-Ada's rounds only. Refused in one line naming it and the mode; given at its default, or under
    a mode that samples adaptively, it is accepted."""
    argv = copo_argv() + mode
    with pytest.raises(SystemExit) as exc:
        load_args(argv + [flag, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    shown = f"{flag} {float(value) if flag == '--copo.ada_threshold' else value}"
    assert err == [f"python -m openrlhf_copo.cli.train_ppo_ray: error: {shown} is read by the modes that sample "
                   f"adaptively (reinforce_ada, reinforce_ada_copo) only, and mode {name} "
                   "draws G responses per prompt once, so it would ignore it: drop it, or run one of those modes"], err
    default = {"--copo.ada_exit": "balanced", "--copo.ada_round_size": "8", "--copo.ada_budget": "32",
               "--copo.ada_threshold": "0.7"}[flag]
    load_args(argv + [flag, default])
    for adaptive in ("reinforce_ada", "reinforce_ada_copo"):
        assert load_args(copo_argv("--advantage_estimator", adaptive, flag, value)).algo.advantage.estimator == adaptive


def test_an_abbreviated_flag_is_refused_not_taken_for_the_cpu_demo(monkeypatch, capsys):
    """`--actor.model_name_or_pat MODEL`: argparse took it for --actor.model_name_or_path, the CLI's "no model given"
    did not, and the CPU demo started, its defaults with the user's model at the end. Flags are written whole."""
    from openrlhf_copo.cli import train_ppo_ray as cli
    from openrlhf_copo.cpu_demo import job

    monkeypatch.setattr(job, "main", lambda argv: pytest.fail(f"the CPU demo started with {argv}"))
    with pytest.raises(SystemExit) as exc:
        cli.main(["--actor.model_name_or_pat", "some/model", "--rollout.batch_size", "4"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["python -m openrlhf_copo.cli.train_ppo_ray: error: unrecognized argument --actor.model_name_or_pat: "
                   "not a flag of OpenRLHF's train_ppo_ray or COPO's (flags are written whole; --help lists them)"], err


def test_an_abbreviated_flag_is_refused_with_a_model_given(load_args, capsys):
    with pytest.raises(SystemExit) as exc:
        load_args(copo_argv("--rollout.n_samples_per", "6"))
    assert exc.value.code == 2
    assert "unrecognized arguments: --rollout.n_samples_per 6" in capsys.readouterr().err


def test_the_demos_own_flags_and_whole_flags_start_it(monkeypatch):
    from openrlhf_copo.cli import train_ppo_ray as cli
    from openrlhf_copo.cpu_demo import job

    started = []
    monkeypatch.setattr(job, "main", lambda argv: started.append(argv) or 0)
    with pytest.raises(SystemExit) as exc:
        cli.main(["--copo.run_dir", "runs/x", "--rollout.batch_size", "4"])
    assert exc.value.code == 0 and started == [["--copo.run_dir", "runs/x", "--rollout.batch_size", "4"]]
