"""openrlhf_copo/files.py's compact results: a finished run's log without its progress-bar redraws, gzipped, and read
back in either form; the reports' JSON on one line; PNGs in 256 colours."""

import gzip
import json

import pytest

from openrlhf_copo.files import (compact_finished_run, compact_log, compact_png, drop_progress_redraws, read_log,
                                 write_json)

#: Lines of a committed run's train.log (benchmarks/results/learning_curve/copo-seed3, step 1 and the start of step 2),
#: cut at 120 characters: Ray's worker prefixes, tqdm redraws behind carriage returns (several in one line, one per
#: line), a warning printed right behind a bar, the nested rollout bar redrawn below empty lines (`\x1b[A`).
TRAINER, POLICY = "\x1b[36m(PPOTrainer pid=10998)\x1b[0m ", "\x1b[36m(PolicyModelActor pid=10963)\x1b[0m "
LOG_LINES = [
    TRAINER + "INFO 11-24 12:03:18 experience_maker.py:116] Starting experience making with 24 samples",  # 0
    POLICY + "\rforward:  33%|███▎      | 1/3 [00:02<00:04,  2.22s/it]",  # 1
    POLICY + "\rforward:  67%|██████▋   | 2/3 [00:04<00:02,  2.05s/it]",  # 2
    POLICY + "\rforward: 100%|██████████| 3/3 [00:06<00:00,  2.06s/it]\rforward: 100%|██████████| 3/3 [00:06<00:00,  "
             "2.08s/it]",  # 3
    POLICY + "/work/main/.venv/lib/python3.11/site-packages/ray/cloudpickle/cloudpickle.py:1544: "
             "ZeroCopyTensorsWarning: Zero-copy tensor serialization is enabled",  # 4
    POLICY + "  cp.dump(obj)",  # 5
    POLICY + "\rappend:   0%|          | 0/3 [00:00<?, ?it/s]\rappend: 100%|██████████| 3/3 [00:00<00:00, 757.50it/s]",
    POLICY + "\rTrain epoch [1/1]:   0%|          | 0/3 [00:00<?, ?it/s]/work/main/.venv/lib/python3.11/site-packages/"
             "torch/utils/data/dataloader.py:759: UserWarning: 'pin_memory' argument is set as true",  # 7
    TRAINER + "INFO 11-24 12:03:25 experience_maker.py:232] Experience making completed in 0:00:06",  # 8
    POLICY + "\rTrain epoch [1/1]:   0%|          | 0/3 [00:08<?, ?it/s, act_loss=0.0437, reward=0.25, grad_norm=0]",
    TRAINER + "\rGenerate samples:   0%|          | 0/6 [00:00<?, ?it/s]\x1b[A",  # 10
    TRAINER + "INFO 11-24 12:03:50 ppo_trainer.py:551] Global step 1: {'actor_grad_norm': 2.8202035427093506}",  # 11
    TRAINER,  # 12
    TRAINER + "\rGenerate samples:   0%|          | 0/6 [00:07<?, ?it/s, prompts_consumed=6]\x1b[A",  # 13
    TRAINER + "\rGenerate samples:  17%|█▋        | 1/6 [00:07<00:39,  7.94s/it, prompts_consumed=6]\x1b[A",  # 14
    TRAINER,  # 15
    TRAINER + "\rGenerate samples:  17%|█▋        | 1/6 [00:08<00:39,  7.94s/it, prompts_consumed=6]\x1b[A",  # 16
    POLICY + "\rforward:   0%|          | 0/3 [00:00<?, ?it/s]",  # 17
    TRAINER + "\rGenerate samples:   0%|          | 0/6 [00:00<?, ?it/s]\x1b[A",  # 18
    TRAINER + "\rGenerate samples: 100%|██████████| 6/6 [00:09<00:00,  1.59s/it, prompts_consumed=6]",  # 19
    TRAINER + "\rGenerate samples:   0%|          | 0/6 [00:00<?, ?it/s]",  # 20: the next step's bar (its count fell)
]
LOG = "\n".join(LOG_LINES) + "\n"


def _last_render(line: str) -> str:
    prefix, _, rest = line.partition("\r")
    return prefix + rest.rsplit("\r", 1)[-1]


def test_drop_progress_redraws_keeps_each_bars_last_render_and_every_other_line():
    """A bar's redraws go, its last render stays (also when the next bar of the same name starts right after it); a
    render with a warning behind it, log lines and empty lines between other lines stay, carriage returns become
    lines."""
    kept = drop_progress_redraws(LOG).split("\n")
    expected = [LOG_LINES[0], _last_render(LOG_LINES[3]), LOG_LINES[4], LOG_LINES[5], _last_render(LOG_LINES[6]),
                LOG_LINES[7].replace("\r", ""), LOG_LINES[8], LOG_LINES[9].replace("\r", ""),
                LOG_LINES[10].replace("\r", ""), LOG_LINES[11], LOG_LINES[12], LOG_LINES[16].replace("\r", ""),
                LOG_LINES[17].replace("\r", ""), LOG_LINES[19].replace("\r", ""), LOG_LINES[20].replace("\r", ""), ""]
    assert kept == expected
    assert "\r" not in "\n".join(kept)
    assert drop_progress_redraws("a\nb\n\nc") == "a\nb\n\nc"  # no bar: the text as it was


def test_a_finished_runs_log_is_compacted_and_read_back_in_either_form(tmp_path):
    run = tmp_path / "copo-seed3"
    run.mkdir()
    (run / "train.log").write_bytes(LOG.encode())
    assert read_log(run / "train.log") == LOG  # a run still going: the plain log
    compact_finished_run(run)
    assert not (run / "train.log").exists()
    packed = (run / "train.log.gz").read_bytes()
    assert gzip.decompress(packed).decode() == drop_progress_redraws(LOG)
    assert read_log(run / "train.log") == drop_progress_redraws(LOG)  # the same path reads the compact form
    compact_finished_run(run)  # again: left as it is
    assert (run / "train.log.gz").read_bytes() == packed
    other = tmp_path / "other" / "train.log"
    other.parent.mkdir()
    other.write_bytes(LOG.encode())
    assert compact_log(other).read_bytes() == packed  # no name or time in the gzip header: the same bytes
    compact_finished_run(tmp_path / "no-log-yet")  # a run folder without a log: nothing to do
    with pytest.raises(FileNotFoundError, match=r"train\.log: no such log \(nor train\.log\.gz\)"):
        read_log(tmp_path / "train.log")


def test_write_json_writes_one_line_with_the_values_unchanged(tmp_path):
    data = {"runs": [{"outcomes": [1, 0, 1], "mean": 0.2083333333333333, "ci": None}], "inf": float("inf")}
    write_json(tmp_path / "r.json", data)
    text = (tmp_path / "r.json").read_text()
    assert text.count("\n") == 1 and " " not in text
    assert json.loads(text) == data


def test_compact_png_keeps_the_picture_in_256_colours(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image

    fig, ax = plt.subplots(figsize=(6, 4))
    for i in range(30):  # thin translucent lines: the thousands of shades a report's plot has
        ax.plot(range(50), [((x * (i + 3)) % 17) / 17 for x in range(50)], alpha=0.25, lw=1)
    fig.savefig(tmp_path / "p.png", dpi=100)
    plt.close(fig)
    before = (tmp_path / "p.png").stat().st_size
    with Image.open(tmp_path / "p.png") as image:
        size, colours = image.size, len(image.convert("RGB").getcolors(1 << 24))
    compact_png(tmp_path / "p.png")
    with Image.open(tmp_path / "p.png") as image:
        assert image.mode == "P" and image.size == size
    assert colours > 256
    assert (tmp_path / "p.png").stat().st_size < before / 2
