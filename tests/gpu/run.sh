#!/usr/bin/env bash
# The GPU suite: bash tests/gpu/run.sh [pytest args]. Where vLLM or flash-attn cannot be imported, their
# import-only stand-ins (tests/gpu/stubs, cpu/stubs) go first on the path: OpenRLHF imports both at module
# level, and no test here calls into either. Everything else must be the real package.
#
# On a bare, air-gapped GPU node (CUDA PyTorch and transformers only), give it the bundle that
# tests/gpu/build_bundle.sh made: GPU_BUNDLE=.gpu-bundle/gpu-suite-cp312.tar.xz bash tests/gpu/run.sh
# It is unpacked into a temporary folder that goes first on PYTHONPATH and PATH (its `ray` command), and every
# package the suite needs must then import, or the run stops before pytest, naming the ones that do not.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
if [ -n "${GPU_BUNDLE:-}" ]; then
    [ -f "$GPU_BUNDLE" ] || { echo "tests/gpu/run.sh: error: GPU_BUNDLE=$GPU_BUNDLE does not exist" >&2; exit 2; }
    SITE=$(mktemp -d /tmp/copo-gpu-site.XXXXXX)
    tar -C "$SITE" -xJf "$GPU_BUNDLE"
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PATH="$SITE/bin:$PATH"
    echo "GPU bundle unpacked in $SITE: $(tr '\n' ' ' < "$SITE/BUNDLE-CONTENTS.txt")"
fi
extra=""
"$PY" -c "import flash_attn" 2>/dev/null || extra="$PWD/cpu/stubs"
"$PY" -c "import vllm" 2>/dev/null || extra="${extra:+$extra:}$PWD/tests/gpu/stubs"
[ -n "$extra" ] && echo "import-only stand-ins on the path: $extra"
export PYTHONPATH="$PWD${extra:+:$extra}${PYTHONPATH:+:$PYTHONPATH}"
"$PY" - <<'PYEOF'
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
versions = ", ".join(f"{d} {md.version(d)}" for d in ("transformers", "ray", "deepspeed", "openrlhf", "math-verify"))
print(f"GPU suite with torch {torch.__version__} (CUDA {torch.version.cuda}, available: {torch.cuda.is_available()}), "
      f"{versions}, python {sys.version.split()[0]}")
PYEOF
exec "$PY" -m pytest -m gpu tests/gpu "$@"
