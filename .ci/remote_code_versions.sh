#!/usr/bin/env bash
# Remote code under the oldest and the newest supported transformers, in a venv WITHOUT depthbench.
#
# Every checkpoint ships modeling/*.py as Hugging Face remote code, loaded with whatever transformers 5.x its user
# has. This step exports one tiny checkpoint per registered architecture with the checkout's depthbench
# (scripts/remote_code_matrix.py export), then, in a fresh venv that has only torch and transformers (no
# depthbench, no system site-packages), loads them with trust_remote_code=True under
#   * the oldest supported release (MIN_TRANSFORMERS of modeling/hf_compat.py, written into every config.json),
#   * the newest supported release (5.24.0, the package's own upper pin),
# comparing sdpa and eager logits and greedy generate() tokens (dynamic and static KV cache) with the exporter's,
# and under the last release below the minimum (4.57.6), where loading must fail with the error naming it.
# pip installs each release from PyPI into the throwaway venv. ~2 min on 2 cores with a warm pip cache (docs/compatibility.md).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo="$(pwd)"
PYTHON="${PYTHON:-python}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
NEWEST="${DEPTHBENCH_NEWEST_TRANSFORMERS:-5.24.0}"
BELOW="${DEPTHBENCH_BELOW_MIN_TRANSFORMERS:-4.57.6}"
OLDEST="$("$PYTHON" -c "from depthbench.modeling.hf_compat import MIN_TRANSFORMERS; print(MIN_TRANSFORMERS)")"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "::group::remote code: export checkpoints (transformers $("$PYTHON" -c 'import transformers; print(transformers.__version__)'))"
"$PYTHON" scripts/remote_code_matrix.py export "$work/checkpoints"
"$PYTHON" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --disable-pip-version-check -q "torch==${TORCH_VERSION}"
echo "::endgroup::"

for version in "$OLDEST" "$NEWEST" "$BELOW"; do
    echo "::group::remote code under transformers $version (no depthbench)"
    "$work/venv/bin/python" -m pip install --disable-pip-version-check -q "transformers==$version"
    # run from the work folder: neither the checkout nor its src/ is on the child's path
    (cd "$work" && HF_MODULES_CACHE="$work/modules-$version" HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 \
        HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error \
        "$work/venv/bin/python" "$repo/scripts/remote_code_matrix.py" load "$work/checkpoints" \
        --report "$work/report-$version.json")
    echo "::endgroup::"
done
echo "remote code OK under transformers $OLDEST and $NEWEST (refused under $BELOW)"
