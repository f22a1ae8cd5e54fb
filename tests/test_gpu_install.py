"""scripts/setup_gpu.sh's up-front checks (one line naming what is missing, before anything is installed), the pins it
reads, and its helper scripts/gpu_install.py. The install itself needs a GPU machine (the flash-attn compile) or
gigabytes (scripts/check_gpu_install.sh resolves it; its output is in docs/gpu-install-check.md)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SETUP = ROOT / "scripts" / "setup_gpu.sh"


def _bin_dir(tmp_path: Path, python: str = sys.executable) -> Path:
    """A PATH with the tools the script uses and no nvcc: this machine's PATH may have one."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "grep", "sed", "awk", "mktemp", "rm", "nproc"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    os.symlink(python, bin_dir / "python3")
    return bin_dir


def _setup(tmp_path: Path, **env) -> subprocess.CompletedProcess:
    venv = tmp_path / "venv"
    full = {"PATH": str(_bin_dir(tmp_path)), "HOME": str(tmp_path), "VENV": str(venv), **env}
    out = subprocess.run(["bash", str(SETUP)], env=full, capture_output=True, text=True, timeout=60)
    assert not venv.exists(), "the script went on past its up-front checks"
    return out


def _one_line(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 1 and out.stdout == "", (out.stdout, out.stderr)
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


def test_no_nvcc_is_one_line(tmp_path):
    line = _one_line(_setup(tmp_path))
    assert line == ("setup_gpu.sh: no nvcc (CUDA 13 toolkit) in $CUDA_HOME/bin or on PATH: flash-attn compiles against "
                    "torch's CUDA 13; install it, or FLASH_ATTN=stub")


def test_another_cuda_major_is_one_line(tmp_path):
    cuda = tmp_path / "cuda-12.4"
    (cuda / "bin").mkdir(parents=True)
    nvcc = cuda / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.131'\n")
    nvcc.chmod(0o755)
    line = _one_line(_setup(tmp_path, CUDA_HOME=str(cuda)))
    assert line == (f"setup_gpu.sh: {nvcc} is CUDA 12.4: flash-attn must compile with CUDA 13 (torch 2.13.0's); point "
                    "CUDA_HOME at a CUDA 13 toolkit, or FLASH_ATTN=stub")


def test_python_outside_3_10_to_3_12_is_one_line(tmp_path):
    """A Python 3.13 (openrlhf 0.11.2 has no wheel for it): a real one where this machine has it, else one that says
    it is 3.13 when asked for its version."""
    real = [p for p in ("/root/.pyenv/versions/3.13.0/bin/python3", "/usr/bin/python3.13") if os.path.exists(p)]
    python = real[0] if real else None  # (not a pyenv shim: it needs pyenv on PATH)
    if python is None:
        python = tmp_path / "python3.13"
        python.write_text(f"#!/bin/sh\n[ \"$1\" = -c ] && {{ echo 3.13; exit 0; }}\nexec {sys.executable} \"$@\"\n")
        python.chmod(0o755)
    line = _one_line(_setup(tmp_path, PYTHON=str(python), FLASH_ATTN="stub"))
    assert line == (f"setup_gpu.sh: Python 3.13 ({python}): openrlhf 0.11.2 has wheels for Python 3.10-3.12 only; "
                    "set PYTHON")


def test_an_unknown_flash_attn_choice_is_one_line(tmp_path):
    assert _one_line(_setup(tmp_path, FLASH_ATTN="yes")) == ("setup_gpu.sh: FLASH_ATTN=yes: say compile (the "
                                                             "default) or stub")


def test_the_pins_come_from_requirements_txt():
    code = 'source scripts/gpu_pins.sh; echo "$GPU_TORCH_SPEC|$GPU_FLASH_ATTN_SPEC|$GPU_OPENRLHF_SPEC"'
    out = subprocess.run(["bash", "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "torch==2.13.0|flash-attn==2.8.3|openrlhf==0.11.2"


def _helper(*args) -> str:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_install.py"), *args], capture_output=True,
                          text=True, check=True).stdout


def test_openrlhfs_requirements_without_flash_attn():
    """FLASH_ATTN=stub installs openrlhf with --no-deps, then these: its [vllm] extra in, flash-attn out."""
    deps = _helper("openrlhf-deps").split()
    assert "vllm==0.29.0" in deps and "deepspeed==0.19.6" in deps and "transformers==5.15.0" in deps
    assert not [d for d in deps if d.startswith(("flash-attn", "flash_attn"))]
    assert not [d for d in deps if ";" in d]  # markers evaluated, not passed on


def test_summary_of_a_pip_report(tmp_path):
    report = {"install": [{"metadata": {"name": n, "version": v}} for n, v in
                          [("torch", "2.13.0"), ("flash_attn", "2.8.3"), ("nvidia-cuda-runtime", "13.0.96")]]}
    (tmp_path / "r.json").write_text(json.dumps(report))
    lines = _helper("summary", str(tmp_path / "r.json")).splitlines()
    assert lines[0] == "torch 2.13.0" and "flash-attn 2.8.3" in lines and "vllm (not in the resolution)" in lines
    assert lines[-2:] == ["CUDA runtime wheels: nvidia-cuda-runtime 13.0.96", "packages: 3"]


@pytest.mark.parametrize("script", ["setup_gpu.sh", "check_gpu_install.sh", "gpu_pins.sh"])
def test_scripts_parse(script):
    subprocess.run(["bash", "-n", str(ROOT / "scripts" / script)], check=True)


def _compiled_flash_attn(site: Path) -> None:
    """A stand-in for a compiled flash-attn 2.8.3 as pip leaves it: the package, its CUDA extension module (a
    Python module here) and the metadata pip reads to say "already satisfied"."""
    (site / "flash_attn").mkdir(parents=True)
    (site / "flash_attn" / "__init__.py").write_text('__version__ = "2.8.3"\nimport flash_attn_2_cuda\n')
    (site / "flash_attn_2_cuda.py").write_text("KERNELS = True\n")
    meta = site / "flash_attn-2.8.3.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: flash_attn\nVersion: 2.8.3\n")


def test_a_rerun_keeps_a_compiled_flash_attn(tmp_path):
    """setup_gpu.sh's compile step used to remove site-packages/flash_attn to clear an earlier stand-in: rerun on a
    working install, it deleted the compiled package, pip said flash-attn was already satisfied (its metadata stayed)
    and the final import failed. The step now removes the stand-in only."""
    site = tmp_path / "site"
    _compiled_flash_attn(site)
    assert _helper("drop-stand-in", str(site)).strip() == f"{site / 'flash_attn'} is not the stand-in: kept"
    out = subprocess.run([sys.executable, "-c", "import flash_attn, flash_attn_2_cuda; print(flash_attn.__version__)"],
                         env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "2.8.3", out.stderr


def test_the_compile_step_clears_an_earlier_stand_in(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    shutil.copytree(ROOT / "cpu" / "stubs" / "flash_attn", site / "flash_attn")
    assert _helper("drop-stand-in", str(site)).strip() == f"removed the flash-attn stand-in from {site}"
    assert not (site / "flash_attn").exists()
    assert _helper("drop-stand-in", str(site)).strip() == f"no flash_attn in {site}"


def test_the_compile_step_removes_flash_attn_only_through_that_check():
    """In setup_gpu.sh, site-packages/flash_attn is removed outright only where FLASH_ATTN=stub replaces it."""
    text = SETUP.read_text()
    compile_step = text[text.index('if [ "$FLASH_ATTN" = compile ]; then\n  if [ -z "${MAX_JOBS:-}" ]'):]
    compile_step = compile_step[:compile_step.index("\nelse\n")]
    assert 'DROPPED=$("$VPY" scripts/gpu_install.py drop-stand-in "$SITE")' in compile_step
    assert "rm -rf" not in compile_step
