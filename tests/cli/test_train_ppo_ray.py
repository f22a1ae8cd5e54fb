"""The entry point: OpenRLHF's parser with COPO's flags, the alias, and one-line refusals."""

import os
import re
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


#: The two lines every command printed before `openrlhf_copo.noise` (pynvml's FutureWarning, DeepSpeed's CPU guess).
NOISE = ("The pynvml package is deprecated", "Setting accelerator to CPU")


def test_help_opens_with_copo_and_prints_no_noise():
    """`--help` as a user runs it, in a fresh Python: its first screen is a usage line, a description naming
    --copo.help and COPO's section, before OpenRLHF's ~500 lines (argparse's generated usage alone was 190 lines, and
    COPO's flags started at line 514); neither pynvml's deprecation warning nor DeepSpeed's CPU guess is printed."""
    out = subprocess.run([sys.executable, "-m", "openrlhf_copo.cli.train_ppo_ray", "--help"], capture_output=True,
                         text=True, timeout=300, env={k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"})
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    first_screen = "\n".join(lines[:24])
    assert lines[0].startswith("usage: python -m openrlhf_copo.cli.train_ppo_ray [-h] [--copo.help]")
    assert "--copo.help lists them alone" in " ".join(first_screen.split())
    assert "COPO (openrlhf_copo):" in first_screen and "--copo.gamma" in first_screen
    assert lines.index("COPO (openrlhf_copo):") < lines.index("options:")
    assert "--rollout.n_samples_per_prompt" in out.stdout  # OpenRLHF's flags follow, as they are
    for line in NOISE:
        assert line not in out.stdout + out.stderr, line


COPO_HELP_RUN = """
import runpy, sys
sys.argv = ["train_ppo_ray", "--copo.help"]
try:
    runpy.run_module("openrlhf_copo.cli.train_ppo_ray", run_name="__main__", alter_sys=True)
except SystemExit as e:
    print("exit", e.code, sorted({m.split(".")[0] for m in sys.modules} & {"openrlhf", "deepspeed", "ray", "vllm"}))
"""


def test_copo_help_lists_every_copo_flag_of_the_parser_without_importing_openrlhf():
    """`--copo.help` lists each `--copo.*` flag of the CLI's whole parser (read from that parser, not from a list
    kept here) with its help and default, and the estimators, in a fresh Python that imports none of OpenRLHF,
    DeepSpeed, Ray or vLLM; nothing on stderr."""
    from openrlhf_copo.openrlhf_ext import driver
    from openrlhf_copo.openrlhf_ext.config import copo_estimators

    parser = driver.openrlhf_parser_namespace()[1]["parser"]
    flags = sorted({o for a in parser._actions for o in a.option_strings if o.startswith("--copo.")})
    out = subprocess.run([sys.executable, "-c", COPO_HELP_RUN], capture_output=True, text=True, timeout=300,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"})
    assert out.stdout.strip().splitlines()[-1] == "exit 0 []", out.stdout[-2000:] + out.stderr[-2000:]
    assert out.stderr == ""
    text = out.stdout
    listed = set(re.findall(r"^  (--copo\.\w+)", text, flags=re.M))
    assert len(flags) > 25 and listed == set(flags)
    flat = " ".join(text.split())
    assert "(paper's best: 20; released script: 5) (default: 20.0)" in flat
    assert ", ".join(copo_estimators()) in flat
    assert not re.search(r"^  --(?!copo\.|advantage_estimator )", text, flags=re.M)  # OpenRLHF's: --help


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


def test_every_refused_setting_is_said_at_once(load_args, capsys):
    """Three bad flags: one message names all three (counted, one line each), so one run tells the user every fix,
    not one fix per run."""
    with pytest.raises(SystemExit) as exc:
        load_args(copo_argv("--copo.eps", "-1", "--algo.dynamic_filtering_enable", "--train.async_enable"))
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == "python -m openrlhf_copo.cli.train_ppo_ray: error: 3 settings are refused:", err
    assert len(err) == 4 and all(line.startswith("  - ") for line in err[1:]), err
    for line, flag in zip(err[1:], ("--algo.dynamic_filtering_enable drops", "--train.async_enable is not supported",
                                    "--copo.eps -1.0 must be >= 0")):
        assert flag in line, (flag, line)


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
    # Reinforce-Ada's selection control reads the threshold too, and draws its 4G whatever it is
    control = ada_run(tmp_path, "REWARD_RANGE = (0.0, 1.0)\n", "--advantage_estimator", "reinforce_ada_uniform",
                      "--copo.ada_threshold", threshold)
    with pytest.raises(PreflightError) as exc:
        preflight(control)
    assert str(exc.value).endswith(f"{counted} would count as correct, so every prompt would train on its reward with "
                                   "no baseline; give a threshold in [0, 1)")


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


#: Each --copo.ada_* flag with a value other than its default, and its default.
ADA_FLAGS = {"--copo.ada_exit": ("positive_focused", "balanced"), "--copo.ada_round_size": ("4", "8"),
             "--copo.ada_budget": ("16", "32"), "--copo.ada_threshold": ("0.5", "0.7"),
             "--copo.ada_draw_factor": ("2", "4")}
#: Which modes read each: Reinforce-Ada's rounds, every mode that samples adaptively, its selection control.
ROUNDS = ("the modes that draw Reinforce-Ada's rounds", ("reinforce_ada", "reinforce_ada_copo"))
READERS = {"--copo.ada_exit": ROUNDS, "--copo.ada_round_size": ROUNDS, "--copo.ada_budget": ROUNDS,
           "--copo.ada_threshold": ("the modes that sample adaptively",
                                    ("reinforce_ada", "reinforce_ada_copo", "reinforce_ada_uniform")),
           "--copo.ada_draw_factor": ("the modes that draw one uniform pool and keep G at random",
                                      ("reinforce_ada_uniform",))}
HOW = {"copo": "draws G responses per prompt once", "grpo": "draws G responses per prompt once",
       "go_only": "draws G responses per prompt once", "reinforce_ada": "draws Reinforce-Ada's rounds",
       "reinforce_ada_copo": "draws Reinforce-Ada's rounds",
       "reinforce_ada_uniform": "draws --copo.ada_draw_factor x G responses per prompt in one round and keeps G of "
                                "them at random"}


@pytest.mark.parametrize("flag", list(ADA_FLAGS))
@pytest.mark.parametrize("mode, name", [([], "copo"), (["--copo.mode", "grpo"], "grpo"),
                                        (["--advantage_estimator", "go_only"], "go_only"),
                                        (["--advantage_estimator", "reinforce_ada"], "reinforce_ada"),
                                        (["--advantage_estimator", "reinforce_ada_copo"], "reinforce_ada_copo"),
                                        (["--advantage_estimator", "reinforce_ada_uniform"], "reinforce_ada_uniform")])
def test_an_adaptive_sampling_flag_under_a_mode_that_does_not_read_it_is_refused(load_args, capsys, flag, mode,
                                                                                   name):
    """`--advantage_estimator copo --copo.ada_budget 16` trained COPO and drew G per prompt, saying nothing: the flag
    is read by Reinforce-Ada's rounds only. Refused in one line naming it, the modes that read it and how this mode
    samples; given at its default, or under a mode that reads it, it is accepted. Reinforce-Ada's selection control
    (`reinforce_ada_uniform`) reads the threshold and its draw factor, not the rounds' exit, round size and budget;
    Reinforce-Ada's modes do not read the draw factor."""
    value, default = ADA_FLAGS[flag]
    readers, names = READERS[flag]
    argv = copo_argv() + mode
    if name in names:
        assert load_args(argv + [flag, value]).algo.advantage.estimator == name
        return
    with pytest.raises(SystemExit) as exc:
        load_args(argv + [flag, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    shown = f"{flag} {float(value) if flag == '--copo.ada_threshold' else value}"
    assert err == [f"python -m openrlhf_copo.cli.train_ppo_ray: error: {shown} is read by {readers} "
                   f"({', '.join(names)}) only, and mode {name} {HOW[name]}, so it would ignore it: drop it, or run "
                   "one of those modes"], err
    load_args(argv + [flag, default])


def test_the_selection_controls_flags_are_checked_and_kept_on_resume(load_args, capsys):
    """--copo.ada_draw_factor below 1 draws no pool: refused; under OpenRLHF's own estimator it is one more flag COPO
    reads and the estimator would ignore. The control's resume record keeps what it reads (the threshold and the draw
    factor), not Reinforce-Ada's rounds' settings; Reinforce-Ada's keeps no draw factor."""
    from openrlhf_copo.openrlhf_ext.config import resume_record

    control = copo_argv("--advantage_estimator", "reinforce_ada_uniform")
    for argv, line in [(control + ["--copo.ada_draw_factor", "0"], "--copo.ada_draw_factor 0 must be >= 1"),
                       (copo_argv()[2:] + ["--advantage_estimator", "group_norm", "--copo.ada_draw_factor", "2"],
                        "--copo.ada_draw_factor 2 is read by COPO's estimators only, and --advantage_estimator "
                        "group_norm is OpenRLHF's own")]:
        with pytest.raises(SystemExit):
            load_args(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and line in err[0], err
    record = resume_record(load_args(control + ["--copo.ada_draw_factor", "3"]))
    assert {k: v for k, v in record.items() if k.startswith("ada_")} == {"ada_threshold": 0.7, "ada_draw_factor": 3}
    assert record["std"] == "none" and record["mode"] == "reinforce_ada_uniform"
    assert "ada_draw_factor" not in resume_record(load_args(copo_argv("--advantage_estimator", "reinforce_ada")))


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
    with pytest.raises(SystemExit):  # two: both named
        cli.main(["--actor.model_name_or_pat", "some/model", "--rollout.batch_siz", "4"])
    assert "unrecognized arguments --actor.model_name_or_pat, --rollout.batch_siz: not a flag" in capsys.readouterr().err


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
