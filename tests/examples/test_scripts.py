"""Every example script's command line goes through the real parser (OpenRLHF's + COPO's), no GPU needed."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from openrlhf_copo.openrlhf_ext.config import copo_settings
from tests_support import submit_runtime_env

SCRIPTS = Path(__file__).resolve().parents[2] / "examples" / "scripts"
ALL = sorted(p.name for p in SCRIPTS.glob("*.sh") if not p.name.startswith("_"))
TRAIN = [n for n in ALL if n.startswith(("train_", "sweep_"))]


def script_runs(name, cwd=None, *extra, **env):
    """The argument lists of the command(s) a script would run (a sweep or the data preparation runs several, one
    printed line each), run from ``cwd`` with ``extra`` flags on its command line: what follows `python3 -m <module>`
    in each line COPO_PRINT_ARGS=1 prints."""
    return [args for _, args in map(printed_command, script_lines(name, cwd, *extra, **env))]


def script_lines(name, cwd=None, *extra, **env):
    """The lines a script prints with COPO_PRINT_ARGS=1: each the whole command it would run, shell-quoted."""
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
    out = subprocess.run(["bash", str(SCRIPTS / name), *extra], capture_output=True, text=True, timeout=120, check=True,
                         cwd=cwd, env={**os.environ, "PATH": path, "COPO_PRINT_ARGS": "1", **env})
    return out.stdout.splitlines()


def printed_command(line):
    """(the words before the module's arguments, the module's arguments) of one printed command line:
    `ray job submit ... -- python3 -m openrlhf_copo.cli.train_ppo_ray ARGS` or `python3 -m openrlhf_copo.cli.X ARGS`."""
    import shlex

    words = shlex.split(line)
    i = words.index("-m") + 2
    return words[:i], words[i:]


def script_args(name, cwd=None, *extra, **env):
    (only,) = script_runs(name, cwd, *extra, **env)
    return only


def test_there_are_scripts():
    assert {"train_copo_ray.sh", "train_grpo_baseline.sh", "train_copo_released_preset.sh"} <= set(ALL)


@pytest.mark.parametrize("name", TRAIN)
def test_training_script_parses(load_args, name):
    for argv in script_runs(name):
        args = load_args(argv)
        assert args.rollout.n_samples_per_prompt == 6 and args.rollout.batch_size == 512


def test_every_script_is_covered():
    assert set(ALL) == set(TRAIN) | {"evaluate_run.sh", "prepare_data.sh"}


def test_prepare_data_script_parses():
    from openrlhf_copo.cli.prepare_data import build_parser

    runs = [build_parser().parse_args(argv) for argv in script_runs("prepare_data.sh", TEMPLATE="dapo")]
    assert [r.source for r in runs] == ["dapo_math_17k", "math500", "aime24", "aime25", "gsm8k"]
    assert {r.template for r in runs} == {"dapo"}


def test_evaluate_script_parses():
    from openrlhf_copo.cli.evaluate import build_parser

    args = build_parser().parse_args(script_args("evaluate_run.sh", MODELS="a b", WITH_AIME25="1"))
    assert args.model == ["a", "b"] and args.temperature == 1.0 and args.top_p == 1.0
    data = SCRIPTS.parents[1] / "data"
    assert args.benchmark == [f"math500={data}/math500.jsonl:8", f"aime24={data}/aime24.jsonl:64",
                              f"aime25={data}/aime25.jsonl:64"]


@pytest.mark.parametrize("aime25, gsm8k, extra", [("0", "0", []), ("", "false", []), ("no", "1", ["gsm8k"]),
                                                  ("true", "0", ["aime25"]), ("1", "yes", ["aime25", "gsm8k"])])
def test_the_evaluate_scripts_switches_read_0_as_off(aime25, gsm8k, extra):
    """WITH_AIME25 / WITH_GSM8K: 1 (true, yes) adds the set, 0 (false, no, empty) does not. The script once tested
    for a non-empty value, so WITH_AIME25=0 WITH_GSM8K=0 evaluated both."""
    from openrlhf_copo.cli.evaluate import build_parser

    args = build_parser().parse_args(script_args("evaluate_run.sh", WITH_AIME25=aime25, WITH_GSM8K=gsm8k))
    assert [b.split("=")[0] for b in args.benchmark] == ["math500", "aime24", *extra]


def test_a_switch_that_is_neither_on_nor_off_is_refused_in_one_line():
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
    proc = subprocess.run(["bash", str(SCRIPTS / "evaluate_run.sh")], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PATH": path, "COPO_PRINT_ARGS": "1", "WITH_GSM8K": "maybe"})
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", "error: WITH_GSM8K=maybe: expected 1 (on) or 0 (off)\n")


def test_print_args_prints_the_whole_command_that_would_run():
    """COPO_PRINT_ARGS=1 prints what the script would run, as one line to paste: the `ray job submit` with its
    address and runtime env (the repository as working dir), then `python3 -m <entry point>` and its arguments."""
    import json

    repo = SCRIPTS.parents[1]
    (line,) = script_lines("train_copo_ray.sh", RAY_ADDRESS="http://head:8265")
    head, args = printed_command(line)
    assert head[:4] == ["ray", "job", "submit", "--address=http://head:8265"]
    env = json.loads(head[4].removeprefix("--runtime-env-json="))
    assert env["working_dir"] == str(repo.resolve())
    assert head[5:] == ["--", "python3", "-m", "openrlhf_copo.cli.train_ppo_ray"] and args[:2] == ["--advantage_estimator", "copo"]
    (line,) = script_lines("evaluate_run.sh")
    assert printed_command(line)[0] == ["python3", "-m", "openrlhf_copo.cli.evaluate"]
    assert {tuple(printed_command(line)[0]) for line in script_lines("prepare_data.sh")} == {
        ("python3", "-m", "openrlhf_copo.cli.prepare_data")}


@pytest.mark.parametrize("name", ["train_copo_ray.sh", "evaluate_run.sh", "prepare_data.sh"])
def test_a_script_run_outside_the_environment_says_to_activate_it(name):
    """The scripts run `python3` and `ray` from PATH (so does the Ray job: `python3 -m ...` on a cluster started from
    the activated environment). Without the environment on PATH a script stops at once, in one line, saying what to
    do, instead of a Python traceback from its first `python3 -c`."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run(["bash", str(SCRIPTS / name)], capture_output=True, text=True, timeout=120,
                          env={**env, "PATH": "/usr/bin:/bin", "COPO_PRINT_ARGS": "1"})
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: python3 on PATH (") and line.endswith(
        "cannot import openrlhf_copo, openrlhf and ray: activate the environment first (source .venv/bin/activate)")


def test_sweep_covers_table_4(load_args):
    pairs = [(copo_settings(a)["gamma"], copo_settings(a)["rho"])
             for a in map(load_args, script_runs("sweep_gamma_rho.sh"))]
    assert pairs == [(3, 1), (5, 1), (10, 1), (20, 0.5), (20, 1.2), (20, 1.5)]


@pytest.mark.parametrize("ablation", ["go_selective", "go_blended", "go_only", "copo_selective"])
def test_ablation_scripts(load_args, ablation):
    assert copo_settings(load_args(script_args(f"train_ablation_{ablation}.sh")))["mode"] == ablation


def test_dapo_baseline(load_args):
    args = load_args(script_args("train_dapo_baseline.sh"))
    assert args.algo.advantage.estimator == "group_norm" and args.algo.dynamic_filtering_enable
    assert args.actor.eps_clip_low_high == [0.2, 0.28] and args.actor.loss_agg_mode == "token-mean"
    assert args.algo.kl.init_coef == 0


def test_paper_setting(load_args):
    args = load_args(script_args("train_copo_ray.sh"))
    assert copo_settings(args) == dict(mode="copo", gamma=20.0, rho=1.5, zero_control="prompt", std="population",
                                       eps=1e-6, entropy_base=2.0, global_coef=1.0, reward_coef=False, zvp_alpha=0.1)
    assert args.copo.answer_buckets == "equivalence"
    assert args.algo.kl.use_loss and args.actor.loss_agg_mode == "seq-mean-token-mean"
    assert args.rollout.batch_size * args.rollout.n_samples_per_prompt // args.train.batch_size == 32  # mini-batches


def test_released_preset(load_args):
    args = load_args(script_args("train_copo_released_preset.sh"))
    assert copo_settings(args) == dict(mode="copo", gamma=5.0, rho=1.0, zero_control="response", std="unbiased",
                                       eps=1e-6, entropy_base=2.0, global_coef=1.0, reward_coef=False, zvp_alpha=0.1)
    assert args.algo.kl.init_coef == 0 and args.train.batch_size == 192
    assert args.copo.incorrect == "reward" and args.copo.answer_buckets == "string" and args.actor.dual_clip == 3
    # their other scripts, as docs/paper.md gives them: run_wo_onlyZero.sh (only-soft, the paper's best setting),
    # the 1.5B only-soft-with-coef, the 7B only-zero
    best = copo_settings(load_args(script_args("train_copo_released_preset.sh", GAMMA="20", RHO="1.5",
                                               ZERO_CONTROL="none")))
    assert (best["gamma"], best["rho"], best["zero_control"]) == (20.0, 1.5, "none")
    only_zero = copo_settings(load_args(script_args("train_copo_released_preset.sh", ESTIMATOR="go_selective")))
    assert (only_zero["mode"], only_zero["zero_control"]) == ("go_selective", "response")
    assert load_args(script_args("train_copo_ray.sh")).copo.incorrect == "answer"  # the paper's reading


@pytest.mark.parametrize("script, mode, clip", [("train_ngrpo.sh", "ngrpo", [0.16, 0.24]),
                                                ("train_rl_zvp.sh", "rl_zvp", [0.2, 0.28]),
                                                ("train_dr_grpo.sh", "dr_grpo", [0.2, 0.2])])
def test_zero_variance_peer_scripts(load_args, script, mode, clip):
    args = load_args(script_args(script))
    settings = copo_settings(args)
    assert settings["mode"] == mode and settings["std"] == {"ngrpo": "unbiased", "rl_zvp": "unbiased",
                                                            "dr_grpo": "none"}[mode]
    assert list(args.actor.eps_clip_low_high) == clip and args.algo.kl.init_coef == 0
    assert args.actor.loss_agg_mode == "token-mean"
    assert (args.actor.entropy_coef == 0) == (mode == "rl_zvp")


def test_grpo_baseline_and_overrides(load_args):
    assert copo_settings(load_args(script_args("train_grpo_baseline.sh")))["mode"] == "grpo"
    args = load_args(script_args("train_copo_qwen2.5_7b.sh", ESTIMATOR="go_only"))
    assert args.actor.model_name_or_path == "Qwen/Qwen2.5-7B-Instruct"
    assert copo_settings(args)["mode"] == "go_only"


def test_checkpoint_and_data_paths_are_absolute(tmp_path):
    """A job runs in Ray's per-session copy of the working dir: a relative SAVE_DIR would hide the checkpoint
    from a resubmitted job. Local data becomes absolute too; a hub dataset name is left alone."""
    repo = SCRIPTS.parents[1]
    data = tmp_path / "train.jsonl"
    data.write_text("")
    args = script_args("train_copo_ray.sh", SAVE_DIR="runs/x", DATA=os.path.relpath(data, repo))
    assert args[args.index("--ckpt.path") + 1] == str(repo / "runs" / "x" / "ckpt")
    assert args[args.index("--ckpt.output_dir") + 1] == str(repo / "runs" / "x")
    given = args[args.index("--data.prompt_dataset") + 1]
    assert os.path.isabs(given) and os.path.realpath(given) == os.path.realpath(data)
    args = script_args("train_copo_ray.sh", DATA="BytedTsinghua-SIA/DAPO-Math-17k")
    assert args[args.index("--data.prompt_dataset") + 1] == "BytedTsinghua-SIA/DAPO-Math-17k"
    assert args[args.index("--ckpt.path") + 1].startswith(str(repo) + "/checkpoints/")


@pytest.mark.parametrize("nodes", ["1", "4"])
def test_multi_node_run_has_one_engine_per_actor_gpu(load_args, nodes):
    """The scripts colocate everything (--train.colocate_all), where OpenRLHF asserts that vLLM's GPUs equal the
    actor's: NNODES=4 must get 32 engines, not 8."""
    args = load_args(script_args("train_copo_ray.sh", NNODES=nodes))
    assert args.actor.num_nodes == int(nodes) and args.train.colocate_all
    assert args.vllm.num_engines * args.vllm.tensor_parallel_size == args.actor.num_nodes * args.actor.num_gpus_per_node


def packed_files(env: dict) -> set:
    """The files Ray packs from the runtime env's working dir (its own packaging code: .gitignore and excludes)."""
    import zipfile

    from ray._private.runtime_env.packaging import create_package

    target = Path(env["working_dir"]).parent / f"packed-{os.getpid()}.zip"
    try:
        create_package(env["working_dir"], target, include_gitignore=True, excludes=env.get("excludes", []))
        return {n for n in zipfile.ZipFile(target).namelist() if not n.endswith("/")}
    finally:
        target.unlink(missing_ok=True)


def test_a_save_dir_and_data_of_the_users_own_inside_the_working_dir_are_not_packed(tmp_path):
    """A resubmitted run must not carry its checkpoints (nor the data it reads by absolute path) in the package Ray
    uploads: with a 3B model's optimizer states that package is over Ray's limit and the resume cannot be
    submitted. Paths outside the working dir, and flags that are not paths of the run, are left alone."""
    project = tmp_path / "project"
    (project / "my-runs" / "ckpt").mkdir(parents=True)
    (project / "my-runs" / "ckpt" / "optimizer_states.pt").write_bytes(b"\0" * 1024)
    (project / "inputs").mkdir()
    (project / "inputs" / "prompts.jsonl").write_text("{}\n")
    (project / "train.py").write_text("# the user's code travels\n")
    env = submit_runtime_env(project, "--ckpt.path", str(project / "my-runs" / "ckpt"), "--ckpt.output_dir",
                      str(project / "my-runs"), "--data.prompt_dataset", str(project / "inputs" / "prompts.jsonl"),
                      "--eval.dataset", str(tmp_path / "outside.jsonl"), "--actor.model_name_or_path",
                      str(project / "inputs"))
    assert env == {"working_dir": str(project.resolve()),
                   "excludes": ["/my-runs/ckpt", "/my-runs", "/inputs/prompts.jsonl"]}
    assert packed_files(env) == {"train.py"}


def test_the_repositorys_default_checkpoint_and_data_folders_are_not_packed():
    """The scripts' defaults, checkpoints/ and data/ at the repository root, are ignored by .gitignore (which Ray
    honours) even when submitted without our excludes; tests/fixtures/data (tracked) is still packed."""
    repo = SCRIPTS.parents[1]
    made = [repo / "checkpoints" / f"probe-{os.getpid()}" / "model.safetensors", repo / "data" / f"probe-{os.getpid()}.jsonl"]
    existed = {p.parent: p.parent.exists() for p in made}
    try:
        for p in made:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text("x")
        files = packed_files({"working_dir": str(repo)})
        assert not any(f.startswith(("checkpoints/", "data/", ".venv/")) for f in files), sorted(files)[:20]
        assert "openrlhf_copo/core.py" in files and any(f.startswith("tests/fixtures/data/") for f in files)
    finally:
        import shutil

        for p in made:
            p.unlink(missing_ok=True)
        shutil.rmtree(repo / "checkpoints" / f"probe-{os.getpid()}", ignore_errors=True)
        for d, was in existed.items():
            if not was and d.exists() and not any(d.iterdir()):
                d.rmdir()


def test_the_two_node_demo_command_parses_and_is_complete(load_args):
    """scripts/two_nodes_demo.sh is the paste-able two-node command of docs/multi-node-and-gpu.md: every flag the CPU
    path needs is there (a hidden `...` once left out --ds.attn_implementation sdpa), and the checkpoints go under
    runs/."""
    from openrlhf_copo.openrlhf_ext import cpu

    repo = SCRIPTS.parents[1]
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
    out = subprocess.run(["bash", str(repo / "scripts" / "two_nodes_demo.sh")], capture_output=True, text=True,
                         timeout=120, check=True, env={**os.environ, "PATH": path, "COPO_PRINT_ARGS": "1"})
    (line,) = out.stdout.splitlines()
    args = load_args(printed_command(line)[1])
    assert cpu.cpu_problems(args) == []
    assert (args.actor.num_nodes, args.vllm.num_engines, args.ref.num_nodes, args.algo.kl.init_coef) == (2, 2, 1, 0.01)
    assert args.ckpt.path.startswith(str(repo / "runs" / "two-nodes-demo-"))


def prepared_data_dir(folder: Path) -> Path:
    """A DATA_DIR as prepare_data.sh leaves it, from the small copies of the real layouts (tests/fixtures/data)."""
    from openrlhf_copo.data_prep import prepare

    fixtures = SCRIPTS.parents[1] / "tests" / "fixtures" / "data"
    for source, fixture in [("dapo_math_17k", "dapo_math_17k.parquet"), ("math500", "math500.jsonl"),
                            ("aime24", "aime24_h4.jsonl"), ("aime25", "aime25_opencompass.jsonl"),
                            ("gsm8k", "gsm8k.parquet")]:
        prepare(source, folder / f"{source}.jsonl", input_path=fixtures / fixture)
    return folder


#: The flags whose values are paths a job or the evaluation reads (comma-separated lists for --eval.dataset), and
#: those it writes.
READS = ("--data.prompt_dataset", "--eval.dataset", "--reward.remote_url", "--model")
WRITES = ("--ckpt.path", "--ckpt.output_dir", "--out")


def check_paths(argv):
    """Every path-valued flag of ``argv`` absolute; every path read exists. Returns the paths read."""
    read = []
    for flag, value in zip(argv, argv[1:]):
        paths = value.split(",") if flag in READS else [value] if flag in WRITES else []
        if flag == "--benchmark":  # NAME=PATH[:K]
            paths = [value.split("=", 1)[1].rsplit(":", 1)[0]]
            read += paths
        elif flag in READS:
            read += paths
        for p in paths:
            assert os.path.isabs(p), f"{flag} {p} is relative"
    missing = [p for p in read if not os.path.exists(p)]
    assert not missing, f"missing: {missing}"
    return read


def test_every_path_a_script_hands_on_is_absolute_and_exists_whatever_the_folder_it_runs_from(tmp_path):
    """A `ray job submit` runs the job in its own copy of the working dir, without data/ (.gitignore): every path
    handed to the job must be absolute. prepare_data.sh writes where the training and evaluation scripts read: a
    relative DATA_DIR is read from the repository root by all of them, wherever they are run from."""
    repo = SCRIPTS.parents[1]
    data = prepared_data_dir(tmp_path / "data")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"DATA_DIR": os.path.relpath(data, repo)}
    runs = script_runs("prepare_data.sh", cwd=elsewhere, **env)
    outs = [os.path.normpath(run[run.index("--out") + 1]) for run in runs]
    assert outs == [str(data / f"{s}.jsonl") for s in ("dapo_math_17k", "math500", "aime24", "aime25", "gsm8k")]
    for name in TRAIN:
        for argv in script_runs(name, cwd=elsewhere, **env):
            read = [os.path.normpath(p) for p in check_paths(argv)]
            assert str(data / "dapo_math_17k.jsonl") in read and str(data / "math500.jsonl") in read, name
    model = tmp_path / "run"
    model.mkdir()
    argv = script_args("evaluate_run.sh", cwd=elsewhere, MODELS=f"Qwen/Qwen2.5-3B-Instruct {model}", WITH_AIME25="1",
                       WITH_GSM8K="1", **env)
    assert argv[:4] == ["--model", "Qwen/Qwen2.5-3B-Instruct", "--model", str(model)]  # a hub name stays
    assert len(check_paths(argv[2:])) == 5  # the model folder and four benchmarks


def test_training_evaluates_on_math500_and_aime24_unless_told_not_to(load_args, tmp_path):
    """The paper's curves (MATH-500 and AIME 2024, mean@8, temperature 1.0) come from evaluation during training;
    EVAL_DATA= turns it off and EVAL_DATA names other files (made absolute)."""
    data = prepared_data_dir(tmp_path / "data")
    args = load_args(script_args("train_copo_ray.sh", DATA_DIR=str(data)))
    assert args.eval.dataset == f"{data}/math500.jsonl,{data}/aime24.jsonl"
    assert (args.eval.steps, args.eval.n_samples_per_prompt, args.eval.temperature) == (5, 8, 1.0)
    assert load_args(script_args("train_copo_ray.sh", EVAL_DATA="")).eval.dataset is None
    gsm8k = os.path.relpath(data / "gsm8k.jsonl", SCRIPTS.parents[1])
    mine = load_args(script_args("train_copo_ray.sh", EVAL_DATA=gsm8k, EVAL_STEPS="2", EVAL_K="4"))
    assert (os.path.normpath(mine.eval.dataset), mine.eval.steps, mine.eval.n_samples_per_prompt) == (
        str(data / "gsm8k.jsonl"), 2, 4)


def test_a_job_whose_data_is_missing_is_not_submitted(tmp_path):
    """Without the prepared data the script stops before `ray job submit`, naming the file and the way to make it."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ray").write_text("#!/bin/sh\necho submitted\n")
    (fake / "ray").chmod(0o755)
    path = f"{fake}{os.pathsep}{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"
    proc = subprocess.run(["bash", str(SCRIPTS / "train_copo_ray.sh")], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PATH": path, "DATA_DIR": str(tmp_path / "none")})
    assert proc.returncode == 2 and "submitted" not in proc.stdout
    assert proc.stderr == (f"error: --data.prompt_dataset {tmp_path}/none/dapo_math_17k.jsonl does not exist "
                           "(prepare the data first: examples/scripts/prepare_data.sh)\n")
    data = prepared_data_dir(tmp_path / "data")
    proc = subprocess.run(["bash", str(SCRIPTS / "train_copo_ray.sh")], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PATH": path, "DATA_DIR": str(data)})
    assert proc.returncode == 0 and proc.stdout == "submitted\n", proc.stderr


def test_a_relative_path_among_the_extra_flags_reaches_the_job_absolute(load_args, tmp_path):
    """`train_copo_ray.sh --eval.dataset data/math500.jsonl`: the job runs in Ray's copy of the working dir, which holds
    no data/, so a relative path handed on as it was written pointed at nothing there. Extra flags follow the rule of
    the scripts' own variables: read from the repository root, handed on absolute (a hub name stays as it is)."""
    repo = SCRIPTS.parents[1]
    data = prepared_data_dir(tmp_path / "data")
    gsm8k = os.path.relpath(data / "gsm8k.jsonl", repo)
    argv = script_args("train_copo_ray.sh", tmp_path, "--eval.dataset", gsm8k, "--ckpt.path", "my-ckpt",
                       "--actor.model_name_or_path", "Qwen/Qwen2.5-1.5B-Instruct", DATA_DIR=str(data))
    args = load_args(argv)
    assert os.path.normpath(args.eval.dataset) == str(data / "gsm8k.jsonl")
    assert args.ckpt.path == str(repo / "my-ckpt")
    assert args.actor.model_name_or_path == "Qwen/Qwen2.5-1.5B-Instruct"


def test_a_relative_path_that_is_not_there_is_refused_before_submitting(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ray").write_text("#!/bin/sh\necho submitted\n")
    (fake / "ray").chmod(0o755)
    data = prepared_data_dir(tmp_path / "data")
    path = f"{fake}{os.pathsep}{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"
    proc = subprocess.run(["bash", str(SCRIPTS / "train_copo_ray.sh"), "--eval.dataset", "data/nowhere.jsonl"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PATH": path, "DATA_DIR": str(data)})
    assert proc.returncode == 2 and "submitted" not in proc.stdout
    assert proc.stderr == (f"error: --eval.dataset data/nowhere.jsonl does not exist in {SCRIPTS.parents[1]} (a "
                           "relative path is read from the repository root; the job runs in Ray's copy of it, without "
                           "data/)\n")


def test_each_method_trains_into_its_own_folder():
    """The recipe trains COPO, then GRPO: with one default SAVE_DIR for both, the GRPO job would resume from COPO's
    checkpoint (--ckpt.load_enable). Every training script's default folder is its own (the sweep: one per pair)."""
    folders = {}
    for name in TRAIN:
        for argv in script_runs(name):
            folders.setdefault(argv[argv.index("--ckpt.output_dir") + 1], []).append(name)
    assert {f: n for f, n in folders.items() if len(n) > 1} == {}


def env_variables_read(path: Path) -> set:
    """The variables a script reads from the environment: every ${NAME:-...}, ${NAME-...}, ${NAME:=...} (the scripts
    read their settings that way and no other)."""
    import re

    return set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)(?::?[-=+])", path.read_text()))


def test_every_variable_a_script_reads_is_in_the_recipes_table():
    """docs/gpu-recipe.md holds the one table of the environment variables: every variable an example script reads
    is a row, and every row is read by a script."""
    import re

    doc = (SCRIPTS.parents[1] / "docs" / "gpu-recipe.md").read_text()
    table = doc[doc.index("<!-- variables -->"):doc.index("<!-- /variables -->")]
    rows = {name for line in table.splitlines() if line.startswith("| `")
            for name in re.findall(r"`([A-Z][A-Z0-9_]*)`", line.split("|")[1])}
    read = set().union(*(env_variables_read(p) for p in SCRIPTS.glob("*.sh")))
    assert read - rows == set(), "read by a script, not in docs/gpu-recipe.md"
    assert rows - read == set(), "in docs/gpu-recipe.md, read by no script"
