#!/usr/bin/env bash
# The GPU suite: bash tests/gpu/run.sh [pytest args]. Where vLLM or flash-attn cannot be imported, their
# import-only stand-ins (tests/gpu/stubs, cpu/stubs) go first on the path: OpenRLHF imports both at module
# level, and no test here calls into either. Everything else must be the real package.
#
# On a bare, air-gapped GPU node (CUDA PyTorch and transformers only), give it the bundle that
# tests/gpu/build_bundle.sh made: GPU_BUNDLE=.gpu-bundle/gpu-suite-cp312.tar.xz bash tests/gpu/run.sh
# It is unpacked into a temporary folder (under $TMPDIR, default /tmp; removed when the run ends, however it ends)
# that goes first on PYTHONPATH and PATH (its `ray` command), and every package the suite needs must then import, or
# the run stops before pytest, naming the ones that do not. The bundle carries requirements.txt's transformers; torch
# cannot travel, so the suite runs with the node's, and the first line says both.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
if [ -n "${GPU_BUNDLE:-}" ]; then
    [ -f "$GPU_BUNDLE" ] || { echo "tests/gpu/run.sh: error: GPU_BUNDLE=$GPU_BUNDLE does not exist" >&2; exit 2; }
    SITE=$(mktemp -d "${TMPDIR:-/tmp}/copo-gpu-site.XXXXXX")
    trap 'rm -rf "$SITE"' EXIT
    tar -C "$SITE" -xJf "$GPU_BUNDLE"
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PATH="$SITE/bin:$PATH"
    echo "GPU bundle unpacked in $SITE: $(tr '\n' ' ' < "$SITE/BUNDLE-CONTENTS.txt")"
fi
extra=""
"$PY" -c "import flash_attn" 2>/dev/null || extra="$PWD/cpu/stubs"
"$PY" -c "import vllm" 2>/dev/null || extra="${extra:+$extra:}$PWD/tests/gpu/stubs"
[ -n "$extra" ] && echo "import-only stand-ins on the path: $extra"
export PYTHONPATH="$PWD${extra:+:$extra}${PYTHONPATH:+:$PYTHONPATH}"
PIN=$(grep -E '^transformers==' requirements.txt | cut -d= -f3)
"$PY" - "$PIN" <<'PYEOF'
import importlib, sys
missing = []
for name in ("torch", "transformers", "ray", "ray.dashboard.optional_deps", "deepspeed", "openrlhf", "math_verify",
             "pytest", "openrlhf_copo"):
    try:
        importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001  (any failure to import is the finding)
        missing.append(f"{name} ({type(exc).__name__}: {exc})")
if missing:
    sys.exit("tests/gpu/run.sh: error: cannot import " + "; ".join(missing))
import importlib.metadata as md
import torch
import transformers
versions = ", ".join(f"{d} {md.version(d)}" for d in ("ray", "deepspeed", "openrlhf", "math-verify"))
pin = sys.argv[1]
which = "requirements.txt's pin" if transformers.__version__ == pin else f"not requirements.txt's {pin}"
print(f"GPU suite with torch {torch.__version__} (the node's: torch cannot travel; CUDA {torch.version.cuda}, "
      f"available: {torch.cuda.is_available()}), transformers {transformers.__version__} ({which}), {versions}, "
      f"python {sys.version.split()[0]}")
PYEOF
# not exec: the EXIT trap removes the unpacked bundle after pytest, whatever it returns
"$PY" -m pytest -m gpu tests/gpu "$@"
