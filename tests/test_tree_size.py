"""The working tree travels with the GPU suite's wheel bundle in one device call (docs/multi-node-and-gpu.md, "On a
bare, air-gapped GPU node: the wheel bundle"), so git's tracked files stay within a budget that leaves the bundle its
room, and the committed results stay compact as they grow (`openrlhf_copo/files.py`).

The budget's arithmetic: one device call carries at most 64 MiB, the working tree and the bundle together. The bundle
(`tests/gpu/build_bundle.sh`, with requirements.txt's transformers) is 39.4 MiB; leaving it 8.6 MiB to grow (48 MiB)
leaves the tree 16 MiB. The tree is about 8 MiB with the results compact (it was 29.8 MiB with the runs' plain logs,
indented report JSON and full-colour PNGs)."""

import subprocess
from collections import Counter

from tests_support import REPO

#: What one device call carries, the working tree and the bundle together.
DEVICE_CALL_MIB = 64
#: The room left for the GPU suite's bundle (39.4 MiB as built today).
BUNDLE_ROOM_MIB = 48
#: git's tracked files, at most.
TREE_BUDGET_MIB = DEVICE_CALL_MIB - BUNDLE_ROOM_MIB


def tracked_files():
    """Every file git tracks, with its size in the working tree (a tracked file deleted there counts 0)."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.split(b"\0")
    paths = [REPO / n.decode() for n in names if n]
    return {p: p.stat().st_size if p.is_file() else 0 for p in paths}


def test_the_tracked_tree_leaves_the_gpu_bundle_its_room_in_one_device_call():
    files = tracked_files()
    total = sum(files.values())
    by_folder = Counter()
    for path, size in files.items():
        by_folder["/".join(path.relative_to(REPO).parts[:2])] += size
    largest = ", ".join(f"{folder} {size / 2**20:.1f} MiB" for folder, size in by_folder.most_common(4))
    assert total <= TREE_BUDGET_MIB * 2**20, (
        f"git's tracked files are {total / 2**20:.1f} MiB, over the {TREE_BUDGET_MIB} MiB that leaves the GPU suite's "
        f"bundle {BUNDLE_ROOM_MIB} MiB of one {DEVICE_CALL_MIB} MiB device call; largest: {largest}. Committed runs "
        "keep their logs compact (openrlhf_copo.files.compact_finished_run; scripts/compact_results.py for runs "
        "committed without it)")


def test_no_committed_finished_run_keeps_a_plain_log():
    """A finished run's log is committed compact (train.log.gz, `files.compact_finished_run`), never as the plain
    train.log: 22 MB of the 29.8 MiB tree were such logs, mostly progress-bar redraws."""
    plain = [p.relative_to(REPO) for p in tracked_files()
             if p.name == "train.log" and (p.parent / "done.json").exists()]
    assert not plain, f"finished runs committed with a plain train.log: {plain[:5]} (run scripts/compact_results.py)"
