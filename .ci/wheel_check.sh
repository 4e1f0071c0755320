#!/usr/bin/env bash
# The package as users install it: build the wheel from the committed tree, install it into a fresh venv (no system
# site-packages, so the checkout's editable install cannot stand in for it) and, from a folder outside the checkout,
# run every command's --help, `depthbench --version`, `depthbench tasks-path` handed to the stock lm-eval CLI,
# `prepare-data` on a small text file with a tiny tokenizer, a 3-step `train`, `analyze` on one metric and `eval` on
# the offline synthetic task. Any missing module or data file fails a step; the script runs every step, names the
# failed ones and exits 1.
#
#   bash .ci/wheel_check.sh                 # PYTHON (default python) makes the venv; TORCH_VERSION (default 2.13.0)
#   WHEEL_CHECK_KEEP=1 bash .ci/wheel_check.sh   # keep the work folder (printed) for a look afterwards
#
# Time on 2 shared cores (measured 5-8 min in all): 15 s to build the wheel, 2-5 min to install torch (local file)
# and the wheel's dependencies (PyPI) into the venv, ~2.5 min for the steps.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo="$(pwd)"
PYTHON="${PYTHON:-python}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
work="$(mktemp -d)"
if [ "${WHEEL_CHECK_KEEP:-0}" != "1" ]; then
    trap 'rm -rf "$work"' EXIT
fi
echo "wheel check in $work"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

echo "::group::build the wheel from the committed tree"
# `git archive` = the committed files only: no build/, egg-info or untracked file of the checkout leaks in.
mkdir -p "$work/source"
if git -C "$repo" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$repo" archive --format=tar HEAD | tar -x -C "$work/source"
else
    cp -r "$repo/." "$work/source"
fi
start=$SECONDS
(cd "$work/source" && "$PYTHON" -m pip wheel . --no-deps --disable-pip-version-check -q -w "$work/dist")
wheel="$(ls "$work"/dist/depthbench-*.whl)"
echo "built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB) in $((SECONDS - start)) s"
echo "::endgroup::"

echo "::group::install it into a fresh venv"
start=$SECONDS
"$PYTHON" -m venv "$work/venv"  # no --system-site-packages: only what the wheel declares
venv_python="$work/venv/bin/python"
"$venv_python" -m pip install --disable-pip-version-check -q "torch==${TORCH_VERSION}"
"$venv_python" -m pip install --disable-pip-version-check -q "$wheel"
echo "installed in $((SECONDS - start)) s"
echo "::endgroup::"

mkdir -p "$work/outside"
cd "$work/outside"  # outside the checkout: nothing can be found through the working directory
export PATH="$work/venv/bin:$PATH"
unset PYTHONPATH

failed=()
step() {  # step NAME COMMAND...: run it, log its output, remember a failure and go on
    local name="$1"
    shift
    echo "::group::$name"
    local t0=$SECONDS
    local rc=0
    set +e
    (set -e; "$@")  # a subshell outside any `if`, so that set -e stops the step at its first failing command
    rc=$?
    set -e
    if [ "$rc" -eq 0 ]; then
        echo "ok: $name ($((SECONDS - t0)) s)"
    else
        echo "FAILED: $name (exit code $rc)" >&2
        failed+=("$name")
    fi
    echo "::endgroup::"
}

where_from() {  # depthbench is the wheel's copy in the venv, with no editable finder of a checkout on the path
    python - "$work/venv" "$repo" <<'PY'
import importlib.metadata as md
import sys
from pathlib import Path

import depthbench

venv, repo = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
where = Path(depthbench.__file__).resolve()
print("depthbench", depthbench.__version__, "from", where)
assert venv in where.parents and repo not in where.parents, f"depthbench is not the wheel's copy: {where}"
editable = [f for f in sys.meta_path if "editable" in type(f).__module__.lower()]
assert not editable, f"an editable finder is on the path: {editable}"
direct_url = md.distribution("depthbench").read_text("direct_url.json") or ""
assert '"editable": true' not in direct_url, direct_url
PY
}

version_is_one() {  # `depthbench --version` == the package metadata == depthbench.__version__
    local cli_version meta_version
    cli_version="$(depthbench --version)"
    meta_version="$(python -c 'import importlib.metadata as m, depthbench; assert m.version("depthbench") == depthbench.__version__; print(m.version("depthbench"))')"
    echo "depthbench --version: $cli_version; metadata: $meta_version"
    [ "$cli_version" = "depthbench $meta_version" ]
}

every_help() {  # `depthbench --help` and every command's --help (a command whose module is missing exits 2)
    depthbench --help >/dev/null
    local commands command
    commands="$(python -c 'from depthbench.cli import COMMANDS; print(" ".join(COMMANDS))')"
    for command in $commands; do
        depthbench "$command" --help >/dev/null || { echo "depthbench $command --help failed" >&2; return 1; }
    done
    echo "--help of: $commands"
}

tasks_path() {  # the installed task folder, handed to the stock lm-eval CLI as the README says
    local path
    path="$(depthbench tasks-path)"
    echo "tasks-path: $path"
    case "$path" in "$work/venv/"*) ;; *) echo "not in the venv: $path" >&2; return 1 ;; esac
    ls "$path/depthbench_synthetic/data/test.jsonl" "$path/depthbench_nll/utils.py" >/dev/null
    lm_eval validate --tasks depthbench_synthetic,depthbench_nll,depthbench_zeroshot --include_path "$path"
}

make_inputs() {  # a small text file and a tiny tokenizer trained on it (the package's own make_tiny_tokenizer)
    python - <<'PY'
import random

from depthbench.data import make_tiny_tokenizer

rng = random.Random(0)
words = "the a residual stream layer depth width model token attention norm block gate mix sum path".split()
docs = [" ".join(rng.choice(words) for _ in range(rng.randint(20, 60))) + "." for _ in range(400)]
with open("corpus.txt", "w", encoding="utf-8") as f:
    f.write("\n\n".join(docs) + "\n")
make_tiny_tokenizer(docs, vocab_size=300, save_dir="tok")
print(f"corpus.txt: {len(docs)} paragraphs; tokenizer in tok/")
PY
}

prepare() {
    depthbench prepare-data corpus.txt --tokenizer tok -o data --eval-fraction 0.1 --quiet
    ls data
}

train() {  # 3 steps of a tiny pre_ln from the run file shipped in the package (-c names it, no path)
    depthbench train -c demo.yaml --arch pre_ln --shape tiny-L2 --data data -o run \
        train.max_steps=3 train.global_batch_size=4 train.micro_batch_size=4 train.eval_every=3 \
        data.seq_len=32 data.eval_sequences=4 checkpoint.every=3
    ls run/final/config.json run/final/modeling_pre_ln.py  # the export carries its remote code
    python - <<'PY'
import importlib.metadata

card = " ".join(open("run/final/README.md", encoding="utf-8").read().split())
written_by = f"This card was written by depthbench {importlib.metadata.version('depthbench')}."
assert written_by in card, "the model card does not name the installed version"
print(written_by)
PY
}

analyze() {
    depthbench analyze run/final --metrics angular --data data --num-samples 4 --seq-len 32 --device cpu \
        -o analysis --no-progress
    ls analysis
}

evaluate() {  # the offline synthetic task from the installed task folder (the default --include-path)
    depthbench eval run/final --tasks depthbench_synthetic --limit 4 --batch-size 4 --device cpu -o eval
    python - <<'PY'
import json

results = json.load(open("eval/results.json"))["results"]
print({task: round(row.get("acc,none", float("nan")), 3) for task, row in results.items()})
assert "depthbench_synthetic_mc_pointer" in results, sorted(results)
PY
}

step "depthbench is the wheel's copy" where_from
step "one version string" version_is_one
step "every command's --help" every_help
step "tasks-path with lm_eval validate" tasks_path
step "a text file and a tiny tokenizer" make_inputs
step "depthbench prepare-data" prepare
step "depthbench train (3 steps)" train
step "depthbench analyze (angular)" analyze
step "depthbench eval (depthbench_synthetic)" evaluate

if [ "${#failed[@]}" -ne 0 ]; then
    echo "wheel check FAILED: ${failed[*]}" >&2
    exit 1
fi
echo "wheel check passed ($SECONDS s)"
