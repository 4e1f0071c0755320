#!/usr/bin/env bash
# transformers' own common model tests (ModelTesterMixin of the installed release, from its sdist on PyPI, plus
# our generation checks) over every architecture and a stock Llama control: tests/modeling/transformers_common.
# Installs `parameterized` (imported by transformers' test file); the test file itself is fetched by the suite
# (pip download of the transformers sdist, cached under ~/.cache/depthbench). 4-12 min on 2 cores.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python}"

echo "::group::transformers' common model tests"
"$PYTHON" -m pip install --disable-pip-version-check -q "parameterized==0.9.0"
status=0
DEPTHBENCH_TRANSFORMERS_COMMON=1 "$PYTHON" -m pytest -q tests/modeling/transformers_common || status=$?
echo "::endgroup::"
if [ "$status" -ne 0 ]; then  # exit code 5 (nothing collected) counts as a failure too
    echo "transformers' common model tests failed with exit code $status" >&2
    exit 1
fi
