"""`python -m openrlhf_copo.cli.probe`: its help, its refusals, the run it starts (parsed by the real OpenRLHF parser,
nothing started), and how that run ends (`driver.run_training` under --copo.probe)."""

import json
import subprocess
import sys

import pytest

from openrlhf_copo.cli import probe as cli
from openrlhf_copo.openrlhf_ext import driver
from openrlhf_copo.openrlhf_ext.probe_step import ProbeFinished
from openrlhf_copo.probe import probe_argv
from tests_support import REPO, write_prompts


def test_help_gives_every_flag_its_help_and_default():
    text = cli.parser().format_help()
    for action in cli.parser()._actions:
        if action.dest == "help":
            continue
        assert action.help, action.dest
        assert action.option_strings[0] in text
    for default in ("(default: 6)", "(default: 64)", "(default: 0)", "(default: auto)", "(default: prompt)",
                    "(default: label)", "math_reward.py)"):
        assert default in " ".join(text.split()), default
    out = subprocess.run([sys.executable, "-m", "openrlhf_copo.cli.probe", "--help"], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert out.returncode == 0 and "--filtered_train_data" in out.stdout and "(default: 64)" in out.stdout


@pytest.mark.parametrize("flags, message", [
    (["--prompts_per_step", "5"], "--prompts_per_step 5: {data} has 3 prompts"),
    (["--samples_per_prompt", "1"], "--samples_per_prompt 1: a group needs at least 2 responses"),
])
def test_what_cannot_be_probed_is_refused_in_one_line(tmp_path, capsys, flags, message):
    data = write_prompts(tmp_path / "train.jsonl", 3)
    with pytest.raises(SystemExit):
        cli.main(["--model", "m", "--train_data", str(data), "--out", str(tmp_path / "out"), *flags])
    assert message.format(data=data) in capsys.readouterr().err


def test_a_missing_training_file_is_named(tmp_path):
    with pytest.raises(SystemExit, match="--train_data .*none.jsonl: no such file"):
        cli.main(["--model", "m", "--train_data", str(tmp_path / "none.jsonl"), "--out", str(tmp_path)])


def test_the_probes_run_is_step_1_of_a_seeded_copo_run_and_the_users_flags_win(load_args, tmp_path):
    argv = probe_argv("some/model", tmp_path / "train.jsonl", tmp_path / "probe.json", tmp_path / "scratch", 48, 6, 3,
                      "r.py", "question", "answer", "cpu", ["--copo.rho", "0.4", "--rollout.max_new_tokens", "64"])
    args = load_args(argv)
    assert args.copo.probe == str(tmp_path / "probe.json") and args.copo.seeded_rollouts
    assert (args.rollout.batch_size, args.rollout.n_samples_per_prompt, args.train.batch_size) == (48, 6, 288)
    assert (args.train.seed, args.copo.rho, args.rollout.max_new_tokens) == (3, 0.4, 64)
    assert (args.data.input_key, args.data.label_key, args.data.apply_chat_template) == ("question", "answer", True)
    assert args.algo.kl.init_coef == 0  # no reference model to start


def test_probe_is_refused_under_openrlhfs_own_estimators(load_args, capsys):
    from tests_support import copo_argv

    argv = copo_argv("--copo.probe", "p.json")
    argv[argv.index("copo")] = "group_norm"
    with pytest.raises(SystemExit):
        load_args(argv)
    assert "--copo.probe p.json is read by COPO's estimators only" in capsys.readouterr().err


def test_a_probes_run_ends_as_a_success_with_its_record_written(load_args, tmp_path, capsys, monkeypatch):
    from openrlhf_copo.openrlhf_ext import device
    from tests_support import copo_argv

    args = load_args(copo_argv("--copo.probe", str(tmp_path / "probe.json")))
    record = {"groups": [{"prompt": "p"}], "G": 4}
    monkeypatch.setattr(driver, "start_ray", lambda args, decision: None)  # the training below starts no workers
    on_cpu = device.DeviceDecision(device.CPU, "--copo.device cpu")

    def stopped_by_the_advantage_step(args):
        raise ProbeFinished(record)

    driver.run_training(stopped_by_the_advantage_step, args, "prog", on_cpu)  # returns: no SystemExit
    assert json.loads((tmp_path / "probe.json").read_text()) == record
    assert "stopped before any training step" in capsys.readouterr().err

    def crashed(args):
        raise RuntimeError("a worker died")

    with pytest.raises(SystemExit):  # any other error still ends the run on its one line
        driver.run_training(crashed, args, "prog", on_cpu)
    assert "training stopped: RuntimeError: a worker died" in capsys.readouterr().err
