"""A sweep as a Slurm job array: ``depthbench sweep ... --emit slurm`` writes ``<out>/sweep.slurm`` and
``<out>/runs.txt`` (one task per run; resubmitting is safe)."""

from __future__ import annotations

import os
import shlex

from depthbench import atomic, runs
from depthbench.sweeps.spec import SweepSpec, claim_folder


def emit_slurm(spec: SweepSpec, out_dir: str, *, accelerate_args: str = "", sbatch: str = "") -> str:
    """Write ``<out>/sweep.slurm`` (a job array, one task per run) and ``<out>/runs.txt``; returns the script path.

    Line ``i`` of ``runs.txt`` is ``<run id> <dotted overrides...>`` (shell-quoted) for array task ``i``. Each task
    exits at once when its run already has a finished/diverged ``summary.json``, otherwise runs
    ``accelerate launch ... -m depthbench.cli train --config base_config.json <overrides>`` (which resumes an
    unfinished run), so the array can simply be resubmitted. Rebuild the report with ``depthbench report <out>``.
    """
    claim_folder(spec, out_dir)
    base_path = os.path.abspath(os.path.join(out_dir, runs.BASE_CONFIG))
    atomic.write_json(base_path, spec.base)
    lines = []
    for point in spec.runs():
        run_dir = os.path.abspath(spec.run_dir(out_dir, point))
        lines.append(" ".join(shlex.quote(a) for a in [point.run_id, *spec.run_overrides(point, run_dir)]))
    runs_path = os.path.abspath(os.path.join(out_dir, runs.SLURM_RUNS))
    with open(runs_path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    script = os.path.join(out_dir, runs.SLURM_SCRIPT)
    extra = "".join(f"#SBATCH {line.strip()}\n" for line in sbatch.split(";") if line.strip())
    runs_root = shlex.quote(os.path.join(os.path.abspath(out_dir), runs.RUNS))
    done = ("import json,sys; s=json.load(open(sys.argv[1])); "
            f"sys.exit(0 if s.get('status') in {sorted(runs.DONE_STATUSES)!r} else 1)")
    with open(script, "w", encoding="utf-8") as f:
        f.write(
            "#!/bin/bash\n"
            f"#SBATCH --job-name=depthbench-{spec.name}\n"
            f"#SBATCH --array=1-{len(lines)}\n"
            f"#SBATCH --output={os.path.abspath(out_dir)}/slurm-%A_%a.out\n"
            f"{extra}"
            f"# {len(lines)} runs of sweep {spec.name} (fingerprint {spec.fingerprint()}); resubmitting is safe.\n"
            "set -euo pipefail\n"
            f"cd {shlex.quote(os.getcwd())}  # relative paths (configs, data) as when the array was written\n"
            f'LINE=$(sed -n "${{SLURM_ARRAY_TASK_ID}}p" {shlex.quote(runs_path)})\n'
            'RUN_ID=${LINE%% *}\n'
            'ARGS=${LINE#* }\n'
            f'SUMMARY={runs_root}/"$RUN_ID"/{runs.SUMMARY}\n'
            f'if [ -f "$SUMMARY" ] && python -c {shlex.quote(done)} "$SUMMARY"; then\n'
            '    echo "$RUN_ID: already done, skipped"; exit 0\n'
            "fi\n"
            # eval re-splits the line: the path is quoted once for this line and once for eval (as runs.txt's are)
            f"eval accelerate launch {accelerate_args} -m depthbench.cli train "
            f"--config {shlex.quote(shlex.quote(base_path))} $ARGS\n"
        )
    return script
