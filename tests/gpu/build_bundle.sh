#!/usr/bin/env bash
# Build the wheels the GPU suite needs into one bundle for a bare, air-gapped GPU node:
#
#   bash tests/gpu/build_bundle.sh            # -> .gpu-bundle/gpu-suite-cp312.tar.xz (ignored by git)
#   HAVE=node-freeze.txt bash tests/gpu/build_bundle.sh
#
# Then, on the GPU node (CPython 3.12, x86-64, CUDA PyTorch installed, no network):
#
#   GPU_BUNDLE=.gpu-bundle/gpu-suite-cp312.tar.xz bash tests/gpu/run.sh
#
# What goes in: OpenRLHF 0.11.2, Ray 2.55.0 with its dashboard (`ray job submit`), DeepSpeed 0.19.6 (a wheel built
# here from its sdist with DS_BUILD_OPS=0: its CUDA ops JIT-compile on the node, with the node's nvcc), math-verify
# 0.9.0, transformers at requirements.txt's pin (pure Python: it goes in even where the node has another version, and
# wins on the path, so the suite runs the transformers a GPU user installs), and every package they import that the
# node lacks, as cp312 manylinux x86-64 wheels, installed (no .pyc)
# into one folder and packed with xz. What the node already has is not packed: by default the package list of this
# workplace's GPU image (tests/gpu/bare-node-has.txt, read off it on the date in its first line); on another node
# pass its `python3 -m pip freeze` as HAVE. torch cannot travel (a CUDA build is gigabytes): the suite runs with the
# node's, and tests/gpu/run.sh says which. vLLM cannot travel (a CUDA build is gigabytes): the suite uses its
# import-only stand-in (tests/gpu/stubs), so nothing of vLLM is checked on the GPU. Ray's Java jars and the Ray
# libraries nothing here imports (RLlib, Data, Serve, Tune, Train, LLM) are left out.
#
# Needs: this project's CPU environment (.venv, scripts/setup_cpu.sh: its pip, and the DeepSpeed wheel it built)
# and PyPI. The bundle must stay within 64 MiB (checked at the end): that is what one device call may carry, together
# with the working tree it copies (git's tracked and untracked-not-ignored files). tests/test_tree_size.py keeps git's
# tracked files within 16 MiB (the committed results compact: openrlhf_copo/files.py), leaving the bundle 48 MiB;
# where the two together are over all the same, it says so and names the largest folders.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
VPY="$ROOT/.venv/bin/python"
HAVE=${HAVE:-$ROOT/tests/gpu/bare-node-has.txt}
OUT_DIR=${OUT_DIR:-$ROOT/.gpu-bundle}
BUNDLE="$OUT_DIR/gpu-suite-cp312.tar.xz"
LIMIT_MIB=64
[ -x "$VPY" ] || { echo "build_bundle: error: no .venv; run 'bash scripts/setup_cpu.sh' first" >&2; exit 2; }
[ -f "$HAVE" ] || { echo "build_bundle: error: HAVE=$HAVE does not exist" >&2; exit 2; }

WORK=$(mktemp -d /tmp/gpu-bundle.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
PLATFORMS=()
for p in manylinux1 manylinux2014 manylinux_2_17 manylinux_2_24 manylinux_2_27 manylinux_2_28 manylinux_2_31 \
         manylinux_2_34; do PLATFORMS+=(--platform "${p}_x86_64"); done
TARGET_PY=(--python-version 3.12 --implementation cp --abi cp312 --only-binary=:all: "${PLATFORMS[@]}")
PIP=("$VPY" -m pip --disable-pip-version-check)

# What the suite imports, directly or through OpenRLHF, Ray's dashboard and DeepSpeed (pinned where the CPU
# environment pins them). Their dependencies are resolved for the node, then whatever the node has is dropped.
# transformers: requirements.txt's pin, packed whatever the node has (tests/gpu/bundle_needs.py).
TRANSFORMERS_PIN=$(grep -E '^transformers==' requirements.txt)
[ -n "$TRANSFORMERS_PIN" ] || { echo "build_bundle: error: requirements.txt pins no transformers==" >&2; exit 2; }
WANTED=("ray[default]==2.55.0" "math-verify[antlr4_13_2]==0.9.0" "$TRANSFORMERS_PIN" hjson datasets jsonlines loralib
        optree pylatexenc "pynvml>=12.0.0" torchdata pytest "pytest-timeout==2.4.0")
echo "build_bundle: resolving for CPython 3.12 manylinux x86-64"
# openrlhf and deepspeed are added without their dependencies: openrlhf's pins (flash-attn, torch) are the node's
# business, and what else it and DeepSpeed import is in WANTED.
"${PIP[@]}" install -q --dry-run --ignore-installed --target "$WORK/resolve" "${TARGET_PY[@]}" --report "$WORK/r.json" \
    "${WANTED[@]}" 2>&1 | grep -v "is ignored" >&2 || true
"$VPY" tests/gpu/bundle_needs.py "$WORK/r.json" "$HAVE" > "$WORK/need.txt"
echo "build_bundle: $(wc -l < "$WORK/need.txt") packages the node lacks"

mkdir -p "$WORK/wheels"
grep -v -i '^deepspeed==' "$WORK/need.txt" > "$WORK/binary.txt"
"${PIP[@]}" download -q --no-deps "${TARGET_PY[@]}" -d "$WORK/wheels" -r "$WORK/binary.txt" 2>&1 | grep -v "is ignored" >&2 || true
# DeepSpeed ships an sdist only; its wheel is pure Python once DS_BUILD_OPS=0 (ops are JIT-built where they run).
# scripts/setup_cpu.sh builds it into .venv/wheels (its setup.py fails under the .venv's setuptools 77.0.3).
cp "$ROOT"/.venv/wheels/deepspeed-0.19.6-*.whl "$WORK/wheels/" \
    || { echo "build_bundle: error: no DeepSpeed wheel in .venv/wheels; rerun 'bash scripts/setup_cpu.sh'" >&2; exit 2; }
n_whl=$(ls "$WORK/wheels" | wc -l)
n_need=$(wc -l < "$WORK/need.txt")
[ "$n_whl" -eq "$n_need" ] || { echo "build_bundle: error: $n_whl wheels for $n_need packages" >&2; ls "$WORK/wheels" >&2; exit 1; }

"${PIP[@]}" install -q --no-deps --no-index --no-compile --target "$WORK/site" "${TARGET_PY[@]}" "$WORK"/wheels/*.whl
# Ray's libraries the suite never imports (RLlib, Data, Serve, Tune, Train, LLM) and its Java jars: 66 MiB unpacked.
for lib in jars rllib data serve tune train llm; do rm -rf "$WORK/site/ray/$lib"; done
rm -rf "$WORK/site/bin"
find "$WORK/site" -name '*.js.map' -delete
# The `ray` command for the node's python3 (pip wrote one for this machine's interpreter, removed above).
mkdir -p "$WORK/site/bin"
printf '#!/usr/bin/env python3\nimport sys\nfrom ray.scripts.scripts import main\nsys.exit(main())\n' > "$WORK/site/bin/ray"
chmod +x "$WORK/site/bin/ray"
cp "$WORK/need.txt" "$WORK/site/BUNDLE-CONTENTS.txt"

mkdir -p "$OUT_DIR"
tar -C "$WORK/site" -cf - . | xz -T0 -9 > "$BUNDLE.tmp"
mv "$BUNDLE.tmp" "$BUNDLE"
size=$(stat -c %s "$BUNDLE")
mib=$("$VPY" -c "print(f'{$size / 2**20:.1f}')")
echo "build_bundle: $BUNDLE: $mib MiB, $(wc -l < "$WORK/need.txt") packages ($(du -sh "$WORK/site" | cut -f1) unpacked)"
if [ "$size" -gt $((LIMIT_MIB * 1024 * 1024)) ]; then
    echo "build_bundle: error: the bundle is $mib MiB, over the $LIMIT_MIB MiB a device call may carry" >&2
    exit 1
fi
# The device call carries the working tree too: say so where the two together do not fit.
files=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c '%s %n' 2>/dev/null)
tree=$(awk '{s += $1} END {print s + 0}' <<< "$files")
if [ $((size + tree)) -gt $((LIMIT_MIB * 1024 * 1024)) ]; then
    tree_mib=$("$VPY" -c "print(f'{$tree / 2**20:.1f}')")
    echo "build_bundle: warning: the bundle ($mib MiB) and the working tree ($tree_mib MiB of git's files) are over the" \
         "$LIMIT_MIB MiB one device call carries; set aside what the GPU suite does not read for the call, e.g. the" \
         "largest folders:" >&2
    awk '{split($2, p, "/"); s[p[1] "/" p[2]] += $1} END {for (d in s) printf "%.1f MiB %s\n", s[d] / 2^20, d}' \
        <<< "$files" | sort -rn | head -3 | sed 's/^/    /' >&2
fi
