#!/usr/bin/env bash
# Build the GPU (CUDA) environment, in an order pip can follow:
#   bash scripts/setup_gpu.sh                  # compiles flash-attn 2.8.3: CUDA 13 toolkit (nvcc), a C++ compiler
#   FLASH_ATTN=stub bash scripts/setup_gpu.sh  # no compile: flash-attn's import-only stand-in (SDPA, no packing)
#
# Needs Python 3.10-3.12 (openrlhf 0.11.2 has wheels for those only) and, to compile flash-attn, the CUDA 13 toolkit:
# vllm 0.29.0 pins torch 2.13.0, whose PyPI wheels are CUDA 13 builds, and flash-attn 2.8.3's release wheels stop at
# torch 2.8, so flash-attn compiles against that torch with a CUDA 13 nvcc.
#
# Order (a plain `pip install -r requirements.txt` stops at flash-attn: its setup.py imports torch inside pip's
# isolated build, then wants psutil, ninja and packaging):
#   1. torch at vllm's pin, and flash-attn's build tools (scripts/gpu_pins.sh);
#   2. flash-attn with --no-build-isolation, MAX_JOBS sized from memory (about 9 GiB per job; MAX_JOBS overrides);
#      or, with FLASH_ATTN=stub, the stand-in (cpu/stubs/flash_attn) and openrlhf with --no-deps;
#   3. the rest: -r requirements.txt (stub: without openrlhf and flash-attn, plus openrlhf's other requirements);
#   4. this package: pip install --no-deps -e .
#
# Environment: PYTHON (default python3) makes the venv VENV (default .venv at the repository root; an existing one is
# reused); VENV=none installs into PYTHON's own environment (a container's, say). FLASH_ATTN=compile (default) or
# stub. MAX_JOBS, CUDA_HOME, FLASH_ATTN_CUDA_ARCHS (flash-attn's default 80;90;100;120; "90" for H100/H200 alone)
# as flash-attn's build reads them.
#
# With the stand-in, runs must use --ds.attn_implementation sdpa and no packing; the driver refuses
# --ds.packing_samples, --ds.ring_attn_size > 1, --train.dynamic_batch_enable and a flash attention implementation in
# one line naming the flag (openrlhf_ext/kernels.py). What it costs: docs/multi-node-and-gpu.md.
#
# Not run on a GPU by this project: the flash-attn compile and the runs after it are unchecked here;
# scripts/check_gpu_install.sh resolves this install with pip without a GPU (docs/gpu-install-check.md).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
source scripts/gpu_pins.sh
PY=${PYTHON:-python3}
FLASH_ATTN=${FLASH_ATTN:-compile}
say() { echo "setup_gpu.sh: $*"; }
fail() { echo "setup_gpu.sh: $*" >&2; exit 1; }

# -- up front: the Python version, and for the compile the CUDA toolkit's major version and a C++ compiler
case "$FLASH_ATTN" in compile|stub) ;; *) fail "FLASH_ATTN=$FLASH_ATTN: say compile (the default) or stub" ;; esac
command -v "$PY" > /dev/null || fail "no $PY: set PYTHON to a Python $GPU_PYTHON_MIN-$GPU_PYTHON_MAX"
PYV=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
"$PY" - "$PYV" "$GPU_PYTHON_MIN" "$GPU_PYTHON_MAX" <<'PYEOF' \
  || fail "Python $PYV ($PY): openrlhf 0.11.2 has wheels for Python $GPU_PYTHON_MIN-$GPU_PYTHON_MAX only; set PYTHON"
import sys
v, lo, hi = (tuple(map(int, s.split("."))) for s in sys.argv[1:4])
sys.exit(0 if lo <= v <= hi else 1)
PYEOF
if [ "$FLASH_ATTN" = compile ]; then
  NVCC=${CUDA_HOME:+$CUDA_HOME/bin/nvcc}
  [ -n "$NVCC" ] && [ -x "$NVCC" ] || NVCC=$(command -v nvcc || true)
  [ -n "$NVCC" ] || fail "no nvcc (CUDA $GPU_TORCH_CUDA_MAJOR toolkit) in \$CUDA_HOME/bin or on PATH: flash-attn" \
    "compiles against torch's CUDA $GPU_TORCH_CUDA_MAJOR; install it, or FLASH_ATTN=stub"
  CUDA_V=$("$NVCC" --version | sed -n 's/.*release \([0-9]*\)\.\([0-9]*\).*/\1.\2/p')
  M=$GPU_TORCH_CUDA_MAJOR
  [ "${CUDA_V%%.*}" = "$M" ] || fail "$NVCC is CUDA ${CUDA_V:-?}: flash-attn must compile with CUDA $M" \
    "(torch 2.13.0's); point CUDA_HOME at a CUDA $M toolkit, or FLASH_ATTN=stub"
  command -v "${CXX:-g++}" > /dev/null || fail "no C++ compiler (${CXX:-g++}): flash-attn's build needs one"
fi

if [ "${VENV:-.venv}" = none ]; then
  VPY=$(command -v "$PY")
else
  VENV=${VENV:-$ROOT/.venv}
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  VPY="$VENV/bin/python"
fi
PIP=("$VPY" -m pip install --disable-pip-version-check)
say "Python $PYV, installing into $("$VPY" -c 'import sys; print(sys.prefix)'), flash-attn: $FLASH_ATTN"

# -- 1. torch at vllm's pin, and what flash-attn's setup.py imports
"${PIP[@]}" --upgrade "pip>=24"
"${PIP[@]}" "$GPU_TORCH_SPEC" "${GPU_BUILD_TOOLS[@]}"
TORCH_CUDA=$("$VPY" -c 'import torch; print(torch.version.cuda or "none")')
[ "${TORCH_CUDA%%.*}" = "$GPU_TORCH_CUDA_MAJOR" ] || fail "the installed $GPU_TORCH_SPEC is built for CUDA" \
  "$TORCH_CUDA, not $GPU_TORCH_CUDA_MAJOR (a pip index or constraint gave another build): fix the index, rerun"

# -- 2. flash-attn: compiled, or the import-only stand-in
SITE=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
if [ "$FLASH_ATTN" = compile ]; then
  if [ -z "${MAX_JOBS:-}" ]; then
    # flash-attn's own setup.py rule, said here before hours of compiling: a job (nvcc with NVCC_THREADS=4) peaks at
    # about 9 GiB, so available memory / 9 GiB, and at most half the cores
    MEM_GB=$(awk '/^MemAvailable:/ {print int($2 / 1048576)}' /proc/meminfo)
    HALF_CORES=$(( $(nproc) / 2 ))
    MAX_JOBS=$(( MEM_GB / GPU_FLASH_ATTN_GB_PER_JOB ))
    [ "$MAX_JOBS" -le "$HALF_CORES" ] || MAX_JOBS=$HALF_CORES
    [ "$MAX_JOBS" -ge 1 ] || MAX_JOBS=1
    say "MAX_JOBS=$MAX_JOBS for the flash-attn compile: $MEM_GB GiB available / about $GPU_FLASH_ATTN_GB_PER_JOB GiB" \
      "per job, at most half of $(nproc) cores (set MAX_JOBS to override; a job out of memory is killed);" \
      "FLASH_ATTN_CUDA_ARCHS=${FLASH_ATTN_CUDA_ARCHS:-80;90;100;120} (set it to your GPUs' alone to compile less)"
  fi
  # a stand-in left by an earlier FLASH_ATTN=stub goes; a compiled flash-attn (a rerun) stays, and pip keeps it
  DROPPED=$("$VPY" scripts/gpu_install.py drop-stand-in "$SITE")
  say "$DROPPED"
  # FORCE_BUILD: 2.8.3 publishes no wheel for torch 2.13, so skip its download attempt and compile.
  MAX_JOBS=$MAX_JOBS FLASH_ATTENTION_FORCE_BUILD=TRUE "${PIP[@]}" --no-build-isolation "$GPU_FLASH_ATTN_SPEC"
  # -- 3. the rest (openrlhf[vllm] finds its flash-attn pin satisfied)
  "${PIP[@]}" -r requirements.txt
else
  "$VPY" -m pip uninstall -y -q flash-attn 2> /dev/null || true
  rm -rf "$SITE/flash_attn"
  cp -r "$ROOT/cpu/stubs/flash_attn" "$SITE/flash_attn"
  "${PIP[@]}" --no-deps "$GPU_OPENRLHF_SPEC"
  "$VPY" scripts/gpu_install.py openrlhf-deps > "$TMP/openrlhf-deps.txt"
  grep -vE '^(openrlhf|flash-attn)' requirements.txt > "$TMP/requirements.txt"
  # -- 3. the rest, openrlhf's other requirements with it in one resolution
  "${PIP[@]}" -r "$TMP/requirements.txt" -r "$TMP/openrlhf-deps.txt"
fi

# -- 4. this package
"${PIP[@]}" --no-deps -e .

"$VPY" - "$FLASH_ATTN" <<'PYEOF'
import importlib.metadata
import sys

import deepspeed, openrlhf, ray, torch, transformers, vllm  # noqa: F401
import openrlhf.models.ring_attn_utils  # noqa: F401  (imports flash_attn.bert_padding, as argument parsing does)
import math_verify  # noqa: F401

from openrlhf_copo.openrlhf_ext.kernels import flash_attn_is_stand_in

if flash_attn_is_stand_in() != (sys.argv[1] == "stub"):
    sys.exit(f"setup_gpu.sh: FLASH_ATTN={sys.argv[1]}, but import flash_attn gives "
             + ("the stand-in" if flash_attn_is_stand_in() else "a real flash-attn"))
note = ("flash-attn: import-only stand-in (use --ds.attn_implementation sdpa, no packing)" if sys.argv[1] == "stub"
        else "flash-attn " + importlib.metadata.version("flash-attn"))
v = importlib.metadata.version
print(f"setup_gpu.sh: gpu env ok: torch {torch.__version__} (CUDA {torch.version.cuda}, device visible: "
      f"{torch.cuda.is_available()}), vllm {v('vllm')}, openrlhf {v('openrlhf')}, deepspeed {v('deepspeed')}, "
      f"ray {v('ray')}, transformers {v('transformers')}, math-verify {v('math-verify')}, {note}")
PYEOF
if [ "$FLASH_ATTN" = stub ]; then
  say "pip check would report openrlhf's missing flash-attn requirement: that is the stand-in's place"
fi
