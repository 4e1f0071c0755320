"""Several ``depthbench train`` runs in one multi-process launch (the tests' way to pay the imports once)::

    accelerate launch --config_file src/depthbench/configs/fsdp2.yaml --num_processes 2 \\
        -m tests.training.fsdp_runs run1.json run2.json ...

Each argument is a run file, trained in order with ``depthbench.training.train`` exactly as
``python -m depthbench.training -c run.json`` would (the process group is kept between runs). Options:

* ``--compile-backend NAME``: ``torch.compile`` backend of the runs with ``model.compile=true`` (``eager`` /
  ``aot_eager`` keep CPU tests fast; the trainer's default is Inductor).
* ``--kill-rank R --kill-at DIR``: rank R kills itself with SIGKILL (``kill -9``) half-way through writing its
  shards of the sharded checkpoint whose path contains DIR (the others block in the save's collective until the
  launcher ends them): the crash the atomic checkpoint protocol must survive.
"""

from __future__ import annotations

import argparse
import os
import signal


def _kill_during_sharded_save(rank: int, marker: str) -> None:
    """Make ``torch.distributed.checkpoint``'s file writer SIGKILL this process (rank ``rank``) after writing part
    of its shard file for a checkpoint under a path containing ``marker``."""
    import torch.distributed as dist
    from torch.distributed.checkpoint import FileSystemWriter

    real = FileSystemWriter.write_data

    def write_data(self, plan, planner):
        if dist.get_rank() == rank and marker in str(self.path):
            os.makedirs(self.path, exist_ok=True)
            with open(os.path.join(self.path, f"__{rank}_0.distcp"), "wb") as f:
                f.write(b"partial shard")
                f.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        return real(self, plan, planner)

    FileSystemWriter.write_data = write_data


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--compile-backend")
    parser.add_argument("--kill-rank", type=int)
    parser.add_argument("--kill-at")
    args = parser.parse_args()

    from depthbench.config import load_run_config
    from depthbench.training import compiled
    from depthbench.training.trainer import train

    if args.compile_backend:
        compiled.COMPILE_OPTIONS["backend"] = args.compile_backend
    if args.kill_rank is not None:
        _kill_during_sharded_save(args.kill_rank, args.kill_at)
    for path in args.runs:
        train(load_run_config(path))


if __name__ == "__main__":
    main()
