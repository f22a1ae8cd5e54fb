"""The GPU suite's own scripts, checked on the CPU (the suite itself needs a GPU: tests/gpu/): the bundle carries
requirements.txt's transformers (tests/gpu/bundle_needs.py), tests/gpu/run.sh removes the bundle it unpacked, and the
head-without-GPU test stops the Ray nodes it started and nothing else (`tests_support.RayNodes`; two real local Ray
clusters here, so this file runs under the heavy-test lock)."""

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests_support import REPO, RayNodes, free_port, ray_start_ports

GPU = REPO / "tests" / "gpu"
RAY = str(Path(sys.executable).parent / "ray")


def _pin(name: str) -> str:
    return next(line.strip() for line in (REPO / "requirements.txt").read_text().splitlines()
                if line.startswith(f"{name}=="))


def test_the_bundle_carries_requirements_transformers_and_never_torch(tmp_path):
    """A node that has transformers 5.17 gets the pinned one all the same; torch and CUDA libraries stay the node's."""
    sys.path.insert(0, str(GPU))
    try:
        import bundle_needs
    finally:
        sys.path.remove(str(GPU))
    pin = _pin("transformers").split("==")[1]
    report = {"install": [{"metadata": {"name": n, "version": v}} for n, v in [
        ("transformers", pin), ("torch", "2.13.0"), ("nvidia-cublas", "13.0"), ("ray", "2.55.0"), ("hjson", "3.1.0"),
        ("tokenizers", "0.22.1")]]}
    have = bundle_needs.node_has(["transformers==5.17.0", "torch==2.11.0+cu130", "tokenizers==0.22.1", "# comment"])
    assert bundle_needs.needs(report, have) == [f"transformers=={pin}", "ray==2.55.0", "hjson==3.1.0",
                                                "openrlhf==0.11.2", "deepspeed==0.19.6"]


def test_the_bundle_carries_what_the_pinned_transformers_bounds_from_above(tmp_path):
    """transformers 5.15.0 requires tokenizers<=0.23.0; the H200 node had tokenizers 0.23.2, so the pinned transformers
    refused to import there (2026-11-27). What transformers bounds from above travels with it, whatever the node has;
    what it bounds from below only (numpy) stays the node's, and torch never travels."""
    sys.path.insert(0, str(GPU))
    try:
        import bundle_needs
    finally:
        sys.path.remove(str(GPU))
    requires = ["huggingface-hub<2.0,>=1.5.0", "numpy>=1.17", "tokenizers<=0.23.0,>=0.22.0", "safetensors>=0.8.0",
                "torch<3; extra == 'torch'", "accelerate==1.0; extra == 'accelerate'"]
    report = {"install": [{"metadata": {"name": n, "version": v, **({"requires_dist": requires} if n == "transformers"
                                                                     else {})}}
                          for n, v in [("transformers", "5.15.0"), ("tokenizers", "0.23.0"),
                                       ("huggingface_hub", "1.6.0"), ("numpy", "2.3.0"), ("safetensors", "0.8.1"),
                                       ("ray", "2.55.0")]]}
    have = bundle_needs.node_has(["tokenizers==0.23.2", "huggingface-hub==1.9.0", "numpy==2.4.0", "safetensors==0.9",
                                  "transformers==5.17.0"])
    assert bundle_needs.bounded_by_always(report) == {"tokenizers", "huggingface-hub"}
    assert bundle_needs.needs(report, have) == ["transformers==5.15.0", "tokenizers==0.23.0", "huggingface_hub==1.6.0",
                                                "ray==2.55.0", "openrlhf==0.11.2", "deepspeed==0.19.6"]


def test_build_bundle_resolves_requirements_transformers_pin():
    text = (GPU / "build_bundle.sh").read_text()
    assert "TRANSFORMERS_PIN=$(grep -E '^transformers==' requirements.txt)" in text
    assert '"$TRANSFORMERS_PIN"' in text[text.index("WANTED=("):text.index(")", text.index("WANTED=("))]
    assert '"$VPY" tests/gpu/bundle_needs.py "$WORK/r.json" "$HAVE"' in text


def _fake_bundle(path: Path) -> Path:
    site = path.parent / "site"
    site.mkdir()
    (site / "BUNDLE-CONTENTS.txt").write_text("ray==2.55.0\n")
    with tarfile.open(path, "w:xz") as tar:
        tar.add(site / "BUNDLE-CONTENTS.txt", arcname="BUNDLE-CONTENTS.txt")
    return path


def test_run_sh_removes_the_bundle_it_unpacked_however_pytest_ends(tmp_path):
    """tests/gpu/run.sh unpacked the bundle into /tmp and left it there (it `exec`ed pytest). A stand-in for the node's
    python answers the import checks and then exits as pytest would: 0, then 1."""
    bundle = _fake_bundle(tmp_path / "bundle.tar.xz")
    fake_python = tmp_path / "python3"
    fake_python.write_text('#!/bin/sh\n[ "$1 $2" = "-m pytest" ] && { echo "pytest ran"; exit "$PYTEST_RC"; }\n'
                           'cat > /dev/null; exit 0\n')
    fake_python.chmod(0o755)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    for rc in (0, 1):
        out = subprocess.run(["bash", str(GPU / "run.sh")], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "GPU_BUNDLE": str(bundle), "PYTHON": str(fake_python),
                                  "TMPDIR": str(tmp), "PYTEST_RC": str(rc)})
        assert out.returncode == rc and "pytest ran" in out.stdout, out.stdout + out.stderr
        assert f"GPU bundle unpacked in {tmp}/copo-gpu-site." in out.stdout
        assert list(tmp.iterdir()) == [], "the unpacked bundle was left behind"


def _start_cluster(name: str) -> tuple:
    temp = f"/tmp/copo-rn-{os.getpid()}-{name}"  # Ray's socket paths must stay short
    port = free_port()
    nodes = RayNodes(RAY)
    nodes.start("--head", "--port", str(port), "--num-cpus", "1", "--num-gpus", "0", "--include-dashboard", "false",
                "--node-ip-address", "127.0.0.1", "--temp-dir", temp, "--disable-usage-stats", *ray_start_ports())
    return nodes, port, temp


def _answers(port: int, tries: int = 20) -> bool:
    """Whether the cluster at ``port`` answers `ray status`, asked up to ``tries`` times 1.5 s apart: on a loaded
    machine a head just started did not answer at once (a CI-style run of 2026-11-27)."""
    import time

    for attempt in range(tries):
        out = subprocess.run([RAY, "status", "--address", f"127.0.0.1:{port}"], capture_output=True, text=True,
                             timeout=120)
        if out.returncode == 0 and "Resources" in out.stdout:
            return True
        if attempt + 1 < tries:
            time.sleep(1.5)
    return False


def _listening(port: int) -> bool:
    """Whether anything on this machine accepts a TCP connection on ``port``."""
    import socket

    with socket.socket() as sock:
        sock.settimeout(5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.heavy(group=2)  # two `ray start` clusters, each in a temp dir and on ports of its own
def test_the_head_tests_stop_ends_its_own_nodes_and_no_other_cluster():
    """`ray stop --force` (the head-without-GPU test's old clean-up) ends every Ray on the machine. `RayNodes.stop`
    ends the process groups of the nodes it started: another cluster on the machine keeps answering."""
    import shutil

    mine, mine_port, mine_temp = _start_cluster("mine")
    other, other_port, other_temp = None, None, None
    try:
        other, other_port, other_temp = _start_cluster("other")
        assert _answers(mine_port) and _answers(other_port)
        mine.stop()
        # gone: its processes, and its GCS port refuses a connection (`ray status` on a dead address waits out
        # the GCS client's connect timeout, 43 s on this machine, to say the same)
        assert mine.alive() == [] and not _listening(mine_port)
        assert _answers(other_port), "stopping this test's nodes ended another Ray cluster"
    finally:
        mine.stop()
        if other is not None:
            other.stop()
        for temp in (mine_temp, other_temp):
            if temp:
                shutil.rmtree(temp, ignore_errors=True)
