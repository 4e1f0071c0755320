"""``depthbench bench --data FILES --tokenizer TOK``: ``depthbench prepare-data`` against the bare ``tokenizers``
pipeline of :mod:`depthbench.bench.data_reference`, on the same files, in one process tree.

Each run is a fresh child process (so each pays its own start-up: imports, loading the tokenizer), timed from
``Popen`` to exit; its CPU time (user + system, its threads and children) and peak RSS come from ``os.wait4``. The
runs are interleaved: per input file, repeat i runs every (worker count, pipeline) pair back to back, both pipelines
of a worker count next to each other, the order reversed on every other repeat (:func:`schedule`), so load from
other work on the machine (or a virtual machine's varying speed) hits both pipelines and every worker count of a
repeat alike. Per input file (format) and per ``--num-workers`` value (``prepare-data --num-workers N``; the
reference's Rust thread pool gets ``RAYON_NUM_THREADS=N``) it reports the median wall time, CPU time and peak RSS of
each pipeline, tokens/s, and the ratios ours / reference (wall: the median over repeats of the paired ratio), then
the worst ratio over the files, and, with more than one worker count, each pipeline's scaling (the median over
repeats of the paired ratio wall time at the fewest workers / wall time at each count, both from the same repeat).
One JSON line per measurement follows the table.

``prepare-data`` runs as the user runs it: ``--eval-fraction 0.01`` (the content-hash split), default shard size,
``--quiet``. One untimed ``prepare-data`` run on a one-line file comes first: the first run with a tokenizer folder
loads it with transformers and records the check that lets every later run skip transformers
(``depthbench.data.tokenizers.load_direct``), so the timed runs measure the steady state; that run's time is
printed. Both pipelines' token counts are checked to be equal (the same documents, tokenized the same way).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from depthbench import atomic, runs

PIPELINES = ("prepare-data", "tokenizers")


def _peak_rss(cmd: list[str], env: dict) -> tuple[dict, int]:
    """Run ``cmd`` with ``os.wait4`` (its own peak RSS, not the maximum over all children so far)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            tail = err.read().decode()[-2000:]
            raise RuntimeError(f"{' '.join(cmd[:5])} ... failed (exit {proc.returncode}): {tail}")
        result = {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "stdout": out.read().decode()}
    return result, usage.ru_maxrss * 1024


def _commands(pipeline: str, path: str, tokenizer: str, workers: int, work: str) -> tuple[list[str], dict]:
    env = dict(os.environ)
    if pipeline == "tokenizers":
        env["RAYON_NUM_THREADS"] = str(workers)
        env.pop("TOKENIZERS_PARALLELISM", None)
        return [sys.executable, "-m", "depthbench.bench.data_reference", path, "--tokenizer", tokenizer,
                "-o", os.path.join(work, "reference.bin")], env
    return [sys.executable, "-c", "import sys; from depthbench.cli import main; sys.exit(main())", "prepare-data",
            path, "--tokenizer", tokenizer, "-o", os.path.join(work, "prepared"), "--num-workers", str(workers),
            "--quiet", "--eval-fraction", "0.01"], env


def _tokens(pipeline: str, stdout: str, work: str) -> int:
    if pipeline == "tokenizers":
        return int(json.loads(stdout.strip().splitlines()[-1])["tokens"])
    meta = atomic.read_json(os.path.join(work, "prepared", runs.DATA_META))
    return sum(int(s["tokens"]) for s in meta["splits"].values())


def _one(pipeline: str, path: str, tokenizer: str, workers: int, work: str) -> dict:
    shutil.rmtree(os.path.join(work, "prepared"), ignore_errors=True)
    cmd, env = _commands(pipeline, path, tokenizer, workers, work)
    result, rss = _peak_rss(cmd, env)
    result["peak_rss_bytes"] = rss
    result["tokens"] = _tokens(pipeline, result.pop("stdout"), work)
    return result


def measure(files: list[str], tokenizer: str, workers: list[int], repeats: int, progress=print) -> list[dict]:
    """One row per (file, workers): each pipeline's median wall/CPU/peak RSS, tokens/s and the ratios."""
    workers = sorted(set(workers))
    rows = []
    with tempfile.TemporaryDirectory(prefix="depthbench-bench-data-") as work:
        warm = os.path.join(work, "warm-up.txt")
        with open(warm, "w", encoding="utf-8") as f:
            f.write("A warm-up document.\n")
        warm_run = _one("prepare-data", warm, tokenizer, 1, work)  # untimed: records the tokenizer folder's check
        progress(f"  warm-up prepare-data (loads {tokenizer} with transformers once if no check is recorded): "
                 f"{warm_run['wall_s']:.2f} s")
        for path in files:
            done: dict[int, dict[str, list[dict]]] = {n: {p: [] for p in PIPELINES} for n in workers}
            for i in range(repeats):
                for n, pipeline in schedule(workers, i):
                    done[n][pipeline].append(_one(pipeline, path, tokenizer, n, work))
                    progress(f"  {os.path.basename(path)} workers={n} repeat {i + 1}/{repeats} {pipeline}: "
                             f"{done[n][pipeline][-1]['wall_s']:.2f} s")
            file_rows = [_row(path, n, done[n]) for n in workers]
            _add_scaling(file_rows, done)
            rows.extend(file_rows)
    return rows


def schedule(workers: list[int], repeat: int) -> list[tuple[int, str]]:
    """The ``(workers, pipeline)`` runs of one repeat of one file, in order: each worker count's two pipelines next
    to each other, the whole order reversed on odd repeats (so neither pipeline nor worker count always goes
    first)."""
    order = [(n, p) for n in workers for p in PIPELINES]
    return order if repeat % 2 == 0 else order[::-1]


def _row(path: str, workers: int, runs: dict[str, list[dict]]) -> dict:
    ours, ref = runs["prepare-data"], runs["tokenizers"]
    tokens = {r["tokens"] for r in ours + ref}
    if len(tokens) != 1:
        raise RuntimeError(f"{path}: the pipelines wrote different token counts {sorted(tokens)}")
    (n_tokens,) = tokens
    row = {"file": path, "format": path.rsplit(".", 1)[-1], "workers": workers, "repeats": len(ours),
           "tokens": n_tokens}
    for name, rs in (("ours", ours), ("reference", ref)):
        wall = statistics.median(r["wall_s"] for r in rs)
        row[f"{name}_wall_s"] = wall
        row[f"{name}_cpu_s"] = statistics.median(r["cpu_s"] for r in rs)
        row[f"{name}_peak_rss_bytes"] = max(r["peak_rss_bytes"] for r in rs)
        row[f"{name}_tokens_per_s"] = n_tokens / wall
    row["wall_ratio"] = statistics.median(a["wall_s"] / b["wall_s"] for a, b in zip(ours, ref))
    row["cpu_ratio"] = row["ours_cpu_s"] / row["reference_cpu_s"]
    row["peak_rss_ratio"] = row["ours_peak_rss_bytes"] / row["reference_peak_rss_bytes"]
    return row


def _add_scaling(rows: list[dict], done: dict[int, dict[str, list[dict]]]) -> None:
    """Each row's scaling per pipeline: the median over repeats of wall time at the fewest workers / wall time at
    the row's workers, both runs from the same repeat of the same file."""
    fewest = min(r["workers"] for r in rows)
    for r in rows:
        for name, pipeline in (("ours", "prepare-data"), ("reference", "tokenizers")):
            base, here = done[fewest][pipeline], done[r["workers"]][pipeline]
            r[f"{name}_scaling"] = statistics.median(a["wall_s"] / b["wall_s"] for a, b in zip(base, here))


def format_rows(rows: list[dict]) -> str:
    head = (f"{'file':<16} {'workers':>7} {'tokens':>11} {'ours tok/s':>11} {'ref tok/s':>11} {'wall ratio':>10} "
            f"{'cpu ratio':>9} {'ours s':>7} {'ref s':>7} {'ours MB':>8} {'ref MB':>7} {'scaling':>11}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{os.path.basename(r['file']):<16} {r['workers']:>7} {r['tokens']:>11} {r['ours_tokens_per_s']:>11.0f} "
            f"{r['reference_tokens_per_s']:>11.0f} {r['wall_ratio']:>10.3f} {r['cpu_ratio']:>9.3f} "
            f"{r['ours_wall_s']:>7.2f} {r['reference_wall_s']:>7.2f} {r['ours_peak_rss_bytes'] / 1e6:>8.0f} "
            f"{r['reference_peak_rss_bytes'] / 1e6:>7.0f} {r['ours_scaling']:>5.2f}/{r['reference_scaling']:<5.2f}")
    for n in sorted({r["workers"] for r in rows}):
        at = [r for r in rows if r["workers"] == n]
        worst = max(at, key=lambda r: r["wall_ratio"])
        lines.append(f"worst wall ratio at {n} worker(s) over {len(at)} file(s): {worst['wall_ratio']:.3f} "
                     f"({os.path.basename(worst['file'])}; target <= 1.10 at 2 workers)")
    lines.append("wall ratio = median over repeats of ours / reference (> 1: prepare-data is slower); scaling = median "
                 "over repeats of wall time at the fewest workers / wall time here, same repeat (ours/reference)")
    return "\n".join(lines)


def run_data_bench(files: list[str], tokenizer: str, workers: list[int], repeats: int, json_out: str | None,
                   quiet: bool) -> int:
    for path in files:
        if not os.path.isfile(path):
            raise ValueError(f"--data {path!r} is not a file (make a corpus with depthbench bench --make-corpus DIR)")
    if not os.path.isfile(os.path.join(tokenizer, "tokenizer.json")):
        raise ValueError(f"--tokenizer {tokenizer!r} is not a saved fast tokenizer folder (no tokenizer.json); the "
                         "bare reference loads tokenizer.json")
    print(f"# depthbench bench --data: prepare-data vs bare tokenizers, {len(files)} file(s), workers {workers}, "
          f"{repeats} interleaved repeat(s), {os.cpu_count()} CPUs, python {sys.version.split()[0]}", flush=True)
    rows = measure(files, tokenizer, workers, repeats, progress=(lambda s: None) if quiet else
                   (lambda s: print(s, file=sys.stderr, flush=True)))
    print(format_rows(rows))
    for r in rows:
        print(json.dumps(r))
    if json_out:
        from depthbench import atomic

        atomic.write_json(json_out, rows)
    return 0


def make_corpus(folder: str, megabytes: float) -> int:
    from depthbench.bench.data_corpus import write_corpus

    paths = write_corpus(folder, megabytes)
    for kind, path in paths.items():
        size = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)) if os.path.isdir(path) else \
            os.path.getsize(path)
        print(f"wrote {path} ({size / 1e6:.1f} MB){' (' + kind + ')' if kind == 'tokenizer' else ''}")
    print(f"benchmark: depthbench bench --data {' '.join(paths[k] for k in ('jsonl', 'parquet', 'txt'))} "
          f"--tokenizer {paths['tokenizer']}")
    return 0
