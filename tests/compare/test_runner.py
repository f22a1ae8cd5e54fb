"""openrlhf_copo/compare/runner.py: a run of a budget control of more steps goes through `run_one` at its own steps
and evaluations, and records the comparison's settings with its factor (the training child faked: the real one in
tests/e2e/test_compare_cpu.py)."""

import json

from compare_support import CPU_FLAGS, setting
from openrlhf_copo import compare


def test_a_step_control_runs_k_times_the_steps_and_records_the_comparisons_settings(tmp_path, monkeypatch):
    """grpo_4xsteps at --steps 2 over 6 prompts (3 a step): its command has 4 episodes and an evaluation every 2
    steps (the last flags of each win); its run is checked for 8 steps, not 2, and records the comparison's settings
    (--steps 2), its step factor, and its own prompts (24 drawn in 4 passes), so that a report pairs it with the
    others and reads its 8 steps as 4 x 2."""
    (tmp_path / "train.jsonl").write_text("".join(f'{{"prompt": "q{n}", "label": "1"}}\n' for n in range(6)))
    (tmp_path / "test.jsonl").write_text('{"prompt": "t", "label": "1"}\n' * 4)
    s = setting(tmp_path, prompts_per_step=3, steps=2, eval_every=1, extra=[*CPU_FLAGS, "--train.num_episodes", "1"])
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

    monkeypatch.setattr("openrlhf_copo.compare_runs.run_child", fake_child)
    info = compare.run_one(s, "grpo_4xsteps", 0, tmp_path / "out", step0=False)
    assert seen == {"steps": 8, "every": 2}
    assert info["settings"]["--steps"] == 2 and info["step_factor"] == 4 and "sample_factor" not in info
    assert (info["prompts"]["drawn"], info["prompts"]["distinct"], info["episodes"]) == (24, 6, 4)
    record = compare.read_record(info)
    assert record["step_factor"] == 4 and compare.method_flags_differ(tmp_path, info, "grpo_4xsteps") is None
