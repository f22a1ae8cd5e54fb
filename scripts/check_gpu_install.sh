#!/usr/bin/env bash
# Resolve the GPU install of scripts/setup_gpu.sh with pip's own resolver, on a machine without a GPU:
#   bash scripts/check_gpu_install.sh
# In a fresh venv under a temporary folder, `pip install --dry-run --ignore-installed --report` of what setup_gpu.sh
# installs, both ways:
#   compiled: torch, flash-attn, -r requirements.txt (openrlhf[vllm] and its flash-attn pin included);
#   stand-in: FLASH_ATTN=stub's set: requirements.txt without openrlhf and flash-attn, plus openrlhf's own
#             requirements without flash-attn (read from the first resolution's openrlhf metadata).
# It prints the resolved versions (torch, vllm, openrlhf, deepspeed, ray, transformers, flash-attn, math-verify), the
# CUDA runtime wheels, the package count, and pip's error on a conflict. Nothing is installed but the check venv's
# build tools and a torch: flash-attn publishes only an sdist whose setup.py imports torch, so pip reads its
# metadata by running that setup.py without build isolation (FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE: no compile, no
# nvcc). The compile itself is the one step this cannot do.
#
# It downloads gigabytes: pip 26.3's dry run fetched the whole wheels, about 4.2 GB per resolution (torch 527 MB,
# vllm 316 MB, the CUDA 13 libraries), plus the check venv's torch; minutes on a fast link. Not part of .ci/run.
# Rerun it when a pin in requirements.txt or scripts/gpu_pins.sh changes, and commit its output to
# docs/gpu-install-check.md.
#
# Environment: PYTHON (default python3; 3.10-3.12), CHECK_TORCH (the pip arguments that put a torch 2.13.0 in the check
# venv; default: PyPI's, the CUDA build with its CUDA libraries, which imports without a GPU; a CPU wheel is smaller,
# e.g. "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"), CHECK_DIR (keep the venv and the reports
# there instead of a temp dir).
# pip's configuration files are ignored (PIP_CONFIG_FILE=/dev/null): a machine's find-links or constraints (a local
# +cpu torch, a cap on torch) would change the resolution; PIP_INDEX_URL, if set, is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
source scripts/gpu_pins.sh
PY=${PYTHON:-python3}
CHECK_TORCH=${CHECK_TORCH:-$GPU_TORCH_SPEC}
WORK=${CHECK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/gpu-install-check.XXXXXX")}
mkdir -p "$WORK"
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
unset PIP_FIND_LINKS PIP_EXTRA_INDEX_URL PIP_CONSTRAINT PIP_REQUIRE_VIRTUALENV
start=$(date +%s)

echo "== GPU install check, $(date -u '+%Y-%m-%d %H:%M UTC'), openrlhf-copo $(git rev-parse --short HEAD 2>/dev/null \
  || echo '?')$(git diff --quiet HEAD -- requirements.txt scripts/gpu_pins.sh 2>/dev/null || echo ' + local pin edits')"
"$PY" - "$GPU_PYTHON_MIN" "$GPU_PYTHON_MAX" <<'PYEOF'
import sys
lo, hi = (tuple(map(int, v.split("."))) for v in sys.argv[1:3])
v = sys.version_info[:2]
print(f"python {sys.version.split()[0]} ({sys.executable}); {sys.platform}")
if not lo <= v <= hi:
    sys.exit(f"check_gpu_install.sh: Python {v[0]}.{v[1]}: openrlhf 0.11.2 has wheels for 3.10-3.12 only; set PYTHON")
PYEOF

"$PY" -m venv "$WORK/venv"
VPY="$WORK/venv/bin/python"
"$VPY" -m pip install -q --upgrade "pip>=24"
echo "$("$VPY" -m pip --version | cut -d' ' -f1-2), venv in $WORK/venv"
# The venv holds what setup_gpu.sh has in place before flash-attn builds: its build tools and a torch 2.13.0 (only
# flash-attn's setup.py imports it, to write its metadata; a CPU build will do).
"$VPY" -m pip install -q "${GPU_BUILD_TOOLS[@]}"
# shellcheck disable=SC2086
"$VPY" -m pip install -q $CHECK_TORCH
"$VPY" -m pip install -q einops  # flash-attn's setup.py needs nothing else; its package imports einops

resolve() {  # resolve NAME pip-args...: dry run, report in $WORK/NAME.json, summary or pip's error
  local name=$1 t0 rc=0
  shift
  t0=$(date +%s)
  FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE FLASH_ATTENTION_FORCE_BUILD=TRUE \
    "$VPY" -m pip install --dry-run --ignore-installed --no-build-isolation --report "$WORK/$name.json" \
    "$@" > "$WORK/$name.log" 2>&1 || rc=$?
  echo
  echo "-- $name: $*"
  if [ "$rc" -ne 0 ]; then
    echo "pip failed (exit $rc) after $(( $(date +%s) - t0 )) s; its last lines:"
    tail -n 25 "$WORK/$name.log"
    return 1
  fi
  "$VPY" scripts/gpu_install.py summary "$WORK/$name.json"
  echo "no conflict: pip's resolver found one set ($(( $(date +%s) - t0 )) s)"
}

status=0
resolve compiled "$GPU_TORCH_SPEC" "$GPU_FLASH_ATTN_SPEC" -r requirements.txt || status=1
if [ -f "$WORK/compiled.json" ]; then
  "$VPY" scripts/gpu_install.py openrlhf-deps --report "$WORK/compiled.json" > "$WORK/openrlhf-deps.txt"
  grep -vE '^(openrlhf|flash-attn)' requirements.txt > "$WORK/requirements-stub.txt"
  # openrlhf itself installs with --no-deps there (its flash-attn pin would compile): its requirements are listed
  resolve stand-in "$GPU_TORCH_SPEC" -r "$WORK/requirements-stub.txt" -r "$WORK/openrlhf-deps.txt" || status=1
fi
echo
echo "== done in $(( $(date +%s) - start )) s; reports in $WORK"
exit $status
