"""``depthbench.errors``: one exit-code convention for every command, applied by the command line."""

from __future__ import annotations

import errno
import json

import pytest

from depthbench.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, exit_code, run_command
from depthbench.sweeps.runner import SweepRunFailed
from depthbench.sweeps.spec import SweepError
from depthbench.training.errors import CheckpointError, CheckpointWriteError, NonFiniteLossError
from tests.helpers import TINY_FIELDS


@pytest.mark.parametrize("exc, code", [
    (ValueError("bad shape"), EXIT_USAGE),
    (SweepError("unknown architecture"), EXIT_USAGE),
    (FileNotFoundError(errno.ENOENT, "No such file"), EXIT_USAGE),
    (PermissionError(errno.EACCES, "Permission denied"), EXIT_USAGE),
    (OSError(errno.EROFS, "Read-only file system"), EXIT_USAGE),
    (OSError(errno.ENOSPC, "No space left on device"), EXIT_FAILED),
    (OSError(errno.EIO, "Input/output error"), EXIT_FAILED),
    (CheckpointError("corrupt"), EXIT_USAGE),          # bad input although a training error
    (CheckpointWriteError("disk full"), EXIT_FAILED),
    (NonFiniteLossError("nan"), EXIT_FAILED),
    (SweepRunFailed("run failed"), EXIT_FAILED),        # a failure although a SweepError (a ValueError)
    (RuntimeError("anything else"), EXIT_FAILED),
])
def test_exit_codes(exc, code):
    assert exit_code(exc) == code


def test_run_command_prints_one_line_and_keeps_bugs_as_tracebacks(capsys, monkeypatch):
    monkeypatch.delenv("DEPTHBENCH_TRACEBACK", raising=False)

    def bad_input(args):
        raise SweepError("--lrs 'x' is not allowed")

    assert run_command("sweep", bad_input, None) == EXIT_USAGE
    assert capsys.readouterr().err == "depthbench sweep: error: --lrs 'x' is not allowed\n"
    assert run_command("train", lambda args: None, None) == EXIT_OK
    assert run_command("train", lambda args: 3, None) == 3
    with pytest.raises(KeyError):  # a bug, not an error of the input or the work
        run_command("train", lambda args: {}["x"], None)
    monkeypatch.setenv("DEPTHBENCH_TRACEBACK", "1")
    with pytest.raises(SweepError):
        run_command("sweep", bad_input, None)


def test_under_a_launcher_bad_input_is_printed_by_rank_0_alone(capsys, monkeypatch):
    """torchrun / accelerate launch set RANK and WORLD_SIZE: the other ranks find the same bad input and stay
    silent (before, one copy per rank, sometimes merged on one line); their failures are printed with the rank."""
    from depthbench import errors
    from depthbench.training.errors import OtherRankBadInput

    monkeypatch.delenv("DEPTHBENCH_TRACEBACK", raising=False)
    monkeypatch.setattr(errors, "RANK_EXIT_DELAY_S", 0.0)

    def raising(exc):
        def func(args):
            raise exc
        return func

    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank, exc, code, err in [
        ("0", ValueError("data.seq_len=0 is not allowed"), EXIT_USAGE,
         "depthbench train: error: data.seq_len=0 is not allowed\n"),
        ("1", ValueError("data.seq_len=0 is not allowed"), EXIT_USAGE, ""),
        ("1", CheckpointError("corrupt"), EXIT_USAGE, ""),
        ("0", OtherRankBadInput("rank 1: data folder x does not exist"), EXIT_USAGE,  # found by rank 1 alone
         "depthbench train: error: rank 1: data folder x does not exist\n"),
        ("1", NonFiniteLossError("nan"), EXIT_FAILED, "depthbench train (rank 1): error: nan\n"),
    ]:
        monkeypatch.setenv("RANK", rank)
        assert run_command("train", raising(exc), None) == code
        assert capsys.readouterr().err == err, (rank, exc)


def test_exit_codes_follow_one_convention(train_data, tmp_path, capsys):
    from depthbench.cli import main

    base = ["--arch", "pre_ln", "--data", str(train_data), "-o", str(tmp_path / "run"), "data.seq_len=32",
            f"model.fields={json.dumps(TINY_FIELDS)}"]
    assert main(["train", *base, "optim.lr=inf"]) == 2  # bad config
    assert "optim.lr=inf is not allowed" in capsys.readouterr().err
    assert main(["train", *base, "--resume"]) == 2  # nothing to resume: bad usage
    assert main(["prepare-data", str(tmp_path / "missing.txt"), "--tokenizer", str(train_data / "tokenizer"),
                 "-o", str(tmp_path / "p")]) == 2
    assert main(["sweep", "--archs", "nope", "--shapes", "tiny-L2", "--data", str(train_data),
                 "--out", str(tmp_path / "s")]) == 2
    assert exit_code(NonFiniteLossError("x")) == 1 and exit_code(CheckpointError("x")) == 2
