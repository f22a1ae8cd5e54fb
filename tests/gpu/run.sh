#!/usr/bin/env bash
# The GPU suite: bash tests/gpu/run.sh [pytest args]. Where vLLM or flash-attn cannot be imported, their
# import-only stand-ins (tests/gpu/stubs, cpu/stubs) go first on the path: OpenRLHF imports both at module
# level, and no test here calls into either. Everything else must be the real package.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
extra=""
"$PY" -c "import flash_attn" 2>/dev/null || extra="$PWD/cpu/stubs"
"$PY" -c "import vllm" 2>/dev/null || extra="${extra:+$extra:}$PWD/tests/gpu/stubs"
[ -n "$extra" ] && echo "import-only stand-ins on the path: $extra"
PYTHONPATH="${extra}${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" -m pytest -m gpu tests/gpu "$@"
