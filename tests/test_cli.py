"""Tests of the ``depthbench`` command line: help, ``archs``, ``shapes``, ``bench`` (a harness smoke test, not a
timing assertion) and the isolation of broken command modules.

    python -m pytest tests/test_cli.py -q
"""

from __future__ import annotations

import argparse
import csv
import io
import json
from importlib.metadata import entry_points

import pytest

from depthbench import cli
from depthbench.registry import ARCHITECTURES
from depthbench.shapes import GRIDS

SUBCOMMANDS = ["archs", "shapes", "bench"]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_console_script_points_at_main():
    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "depthbench"]
    assert script.value == "depthbench.cli:main"
    assert script.load() is cli.main


def test_top_level_help_lists_subcommands(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for command in SUBCOMMANDS:
        assert command in out
    assert "unavailable command modules" not in out
    code, out, _ = run(capsys)  # no command: help, exit 0
    assert code == 0 and "usage: depthbench" in out


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_subcommand_help(command, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main([command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: depthbench {command}")


def test_archs_lists_every_registered_architecture(capsys):
    code, out, _ = run(capsys, "archs")
    assert code == 0
    first_column = [line.split()[0] for line in out.strip().splitlines()[1:]]
    assert first_column == list(ARCHITECTURES)
    for arch in ARCHITECTURES.values():
        assert arch.model_type in out and arch.paper_url in out
    code, out, _ = run(capsys, "archs", "--json")
    rows = json.loads(out)
    assert [r["id"] for r in rows] == list(ARCHITECTURES)
    assert set(rows[0]) == {"id", "model_type", "family", "arxiv", "description"}
    assert rows[0]["family"] == "residual"


def test_shapes_400m_table(capsys):
    code, out, _ = run(capsys, "shapes", "400m")
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[0].startswith("# arch pre_ln; total held at 405.4M")
    assert lines[1].split() == ["shape", "L", "d", "f", "heads", "head_dim", "d/L", "backbone", "extra", "total",
                                "diff"]
    rows = [line.split() for line in lines[2:]]
    assert [r[0] for r in rows] == [f"400m-L{depth}" for depth in GRIDS["400m"].depths]
    assert rows[2] == ["400m-L24", "24", "1024", "2736", "16", "64", "42.67", "302.4M", "0", "405.4M", "+0.0%"]
    assert rows[-1][:4] == ["400m-L70", "70", "640", "1712"] and rows[-1][9] == "409.2M"


def test_shapes_formats_depths_and_arch(capsys):
    code, out, _ = run(capsys, "shapes", "400m", "--depths", "16,24", "--json")
    rows = json.loads(out)
    assert code == 0 and [r["L"] for r in rows] == [16, 24]
    assert rows[1]["total"] == 405_406_720 and rows[1]["backbone"] == 302_432_256 and rows[1]["d/L"] == 42.67
    code, out, _ = run(capsys, "shapes", "1.6b", "--csv")
    records = list(csv.DictReader(io.StringIO(out)))
    assert [r["d"] for r in records] == ["2048", "1728", "1504"] and records[0]["kv_heads"] == "8"
    other = next(a for a in ARCHITECTURES if a != "pre_ln")
    code, out, _ = run(capsys, "shapes", "tiny", "--arch", other, "--json")
    assert code == 0 and all(r["arch"] == other for r in json.loads(out))
    code, out, _ = run(capsys, "shapes")  # no grid: list the grids
    assert code == 0 and all(name in out for name in GRIDS)
    code, out, _ = run(capsys, "shapes", "--budget", "120m", "--depths", "8,16", "--json")
    rows = json.loads(out)
    assert [r["shape"] for r in rows] == ["custom-L8", "custom-L16"]
    assert all(abs(r["diff_pct"]) < 3 for r in rows)


def test_shapes_errors(capsys):
    code, _, err = run(capsys, "shapes", "400m", "--arch", "not_an_arch")
    assert code == 2
    assert "not_an_arch" in err and all(arch in err for arch in ARCHITECTURES)
    code, _, err = run(capsys, "shapes", "400m", "--depths", "17")
    assert code == 2 and "depth=17" in err and "16, 20, 24" in err
    code, _, err = run(capsys, "shapes", "--budget", "1m")
    assert code == 2 and "--depths" in err
    with pytest.raises(SystemExit):
        cli.main(["shapes", "no_such_grid"])
    assert "invalid choice" in capsys.readouterr().err


def test_broken_command_module_does_not_break_the_others(monkeypatch, capsys):
    monkeypatch.setitem(cli.COMMANDS, "broken", ("depthbench._no_such_module", "a command whose module is missing"))
    code, out, _ = run(capsys, "archs", "--json")
    assert code == 0 and json.loads(out)
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "broken" in capsys.readouterr().out  # listed from the table, without importing its module
    code, _, err = run(capsys, "broken")
    assert code == 2 and "depthbench._no_such_module" in err and "ModuleNotFoundError" in err


def test_every_command_is_registered_by_its_module():
    """The table and the modules agree: importing a command's module registers exactly that command."""
    for command, (module_name, summary) in cli.COMMANDS.items():
        parser = cli.build_parser(command)
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        assert action.choices[command].prog == f"depthbench {command}", (command, module_name)
        assert action.choices[command].get_default("func") is not None, command
        assert summary.strip()


@pytest.mark.slow  # 12-32 s on 2 cores: the default suite stays near 10 minutes
def test_bench_smoke(capsys, tmp_path):
    other = "hc" if "hc" in ARCHITECTURES else next(a for a in ARCHITECTURES if a != "pre_ln")
    json_out = tmp_path / "bench.json"
    code, out, _ = run(
        capsys, "bench", "--arch", other, "--shape", "tiny-L2", "--steps", "1", "--warmup", "0",
        "--batch-size", "2", "--seq-len", "16", "--decode-tokens", "2", "--decode-batch-sizes", "1,2",
        "--decode-repeats", "1", "--threads", "1", "--device", "cpu", "--json-out", str(json_out),
    )
    assert code == 0
    assert "torch threads 1" in out
    results = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [r["model"] for r in results] == ["pre_ln", "llama", other]
    assert json.loads(json_out.read_text()) == results
    by_model = {r["model"]: r for r in results}
    for r in results:
        assert r["train_step_s_median"] > 0 and len(r["train_step_s"]) == 1
        assert set(r["decode_tokens_per_s"]) == {"1", "2"} and all(v > 0 for v in r["decode_tokens_per_s"].values())
        for ref in ("pre_ln", "llama"):
            assert r[f"train_time_ratio_vs_{ref}"] == pytest.approx(
                r["train_step_s_median"] / by_model[ref]["train_step_s_median"], rel=1e-3)
            assert r[f"train_time_ratio_paired_vs_{ref}"] > 0 and r[f"train_time_ratio_min_vs_{ref}"] > 0
            assert set(r[f"decode_speed_ratio_vs_{ref}"]) == {"1", "2"}
            assert r[f"peak_mem_ratio_vs_{ref}"] > 0
        assert r["peak_mem_bytes"] > 0, r["peak_mem_method"]
        assert r["settings"]["shape"] == "tiny-L2" and r["settings"]["threads"] == 1
    assert by_model["pre_ln"]["train_time_ratio_vs_pre_ln"] == 1.0
    assert by_model["llama"]["train_time_ratio_vs_llama"] == 1.0
    # Llama holds pre_ln's state dict: same parameter count and the same loss on the same batch.
    assert by_model["llama"]["params"] == by_model["pre_ln"]["params"]
    assert by_model["llama"]["first_loss"] == pytest.approx(by_model["pre_ln"]["first_loss"], abs=1e-5)
    assert by_model[other]["kind"] == f"depthbench.{other}"


def test_bench_rejects_bad_arguments(capsys):
    code, _, err = run(capsys, "bench", "--arch", "nope", "--shape", "tiny-L2", "--no-memory")
    assert code == 2 and "pre_ln" in err
    code, _, err = run(capsys, "bench", "--shape", "tiny-L3", "--no-memory")
    assert code == 2 and "depth=3" in err
    code, _, err = run(capsys, "bench", "--shape", "tiny-L2", "--steps", "0", "--no-memory")
    assert code == 2 and "--steps" in err


@pytest.mark.parametrize("argv", [["archs"], ["shapes", "tiny"], ["--help"]], ids=" ".join)
def test_a_closed_pipe_stops_quietly(argv, tmp_path):
    """``depthbench archs | head``: when the reader of stdout has gone, the command prints nothing on stderr (no
    "Broken pipe", no traceback) and exits 0 (argparse's own --help) or 141, the status of a tool stopped by
    SIGPIPE, never the failure code 1."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte: every write meets a closed pipe
    try:
        result = subprocess.run([sys.executable, "-c", "import sys; from depthbench.cli import main; "
                                 "sys.exit(main(sys.argv[1:]))", *argv], stdout=write, stderr=subprocess.PIPE,
                                text=True, timeout=120)
    finally:
        os.close(write)
    assert result.stderr == ""
    assert result.returncode in (0, 141)
    if argv[0] != "--help":
        assert result.returncode == 141


def test_a_mistyped_architecture_gets_a_did_you_mean(capsys):
    code, _, err = run(capsys, "shapes", "400m", "--arch", "preln")
    assert code == 2 and "unknown architecture 'preln' (did you mean 'pre_ln'?)" in err
    code, _, err = run(capsys, "analyze", "x", "--metrics", "logitlens")
    assert code == 2 and "unknown metric 'logitlens' (did you mean 'logit_lens'?)" in err
