"""FSDP2 training on CPU (gloo), through the launch commands of the README and docs/training.md:

    accelerate launch --config_file src/depthbench/configs/fsdp2.yaml --num_processes 2 -m depthbench.training -c ...

(``tests.training.fsdp_runs`` trains several run files in one such launch, to pay the imports once.)

* 20 steps under FSDP2 on 2 processes equal 1 process within 1e-5 (loss per step, eval loss, gradient norm,
  layer statistics, final weights) for ``pre_ln``, ``hc``, ``mhc``, ``attnres``, ``block_attnres``, ``moda``
  (multi-stream and cross-layer state crosses block boundaries); with a clip that binds at every step, the
  pre-clip gradient norm equals the 1-process one (clipping is global across shards); ``model.compile=true``
  (compiled after sharding) and gradient checkpointing give the same losses.
* bf16 (the GPU config's policy: bf16 compute parameters, fp32 master weights, fp32 gradient reduction) matches an
  fp32 run within the bf16 tolerance below.
* Sharded checkpoints (``torch.distributed.checkpoint``) resume bit-exactly in 2 processes with attention dropout
  on (so each rank's restored RNG state decides the result); FSDP2 -> 1 process, 1 process -> FSDP2,
  FSDP2 -> DDP and DDP -> FSDP2 resumes give the uninterrupted run's losses within 1e-5; ``kill -9`` of one rank
  during a sharded save leaves ``latest`` on the previous complete checkpoint.
* The HF export of an FSDP2 run (a gathered full state dict) loads in a process without depthbench (remote code)
  and gives the logits of the run's last sharded checkpoint, read independently with torch.distributed.checkpoint.
* FSDP2 in one process (world size 1, the GPU check's case) equals the plain run.

Run: ``DEPTHBENCH_RUN_SLOW=1 python -m pytest tests/training/test_fsdp2.py -q`` (3-6 minutes on 2 cores, with the
load: five 2-process launches; the default suite runs only the 1-process FSDP2 run, ~25 s). The launch-config
checks and the one-process sharding helpers: ``tests/training/test_sharding.py``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from depthbench.config import load_run_config
from depthbench.training.checkpoint import is_complete
from depthbench.training.trainer import train
from tests.helpers import BLOCK_DEPTHBENCH, REPO_ROOT, TINY_FIELDS, make_train_data

FSDP2_CONFIG = REPO_ROOT / "src" / "depthbench" / "configs" / "fsdp2.yaml"
ARCHS = ["pre_ln", "hc", "mhc", "attnres", "block_attnres", "moda"]
STEPS = 20
BF16_ARCHS = ["pre_ln", "hc", "moda"]
BF16_TOLERANCE = 0.03
"""Largest allowed |loss(FSDP2, bf16) - loss(1 process, fp32)| per step over the 20 steps, in nats. bf16 keeps 8
significant bits (relative rounding 2^-9 ~ 2e-3 per value), and the trainer's accepted 1-process bf16 recipe
(autocast over fp32 weights) itself moves the loss this far from fp32 here: measured 1.1e-3 (pre_ln), 5.3e-3 (hc),
9.0e-3 (moda), against 1.7e-3, 2.6e-3 and 6.0e-3 for FSDP2 bf16 (the test prints them). 0.03 is ~3x the recipe's
own deviation and 0.6 % of the loss (~5 nats): a real defect (master weights kept in bf16, gradients reduced in
bf16, a missed all-reduce of the replicated parameters) moves it by 0.1 nats and more within these steps."""


# ================================================================================================ helpers
def run_dict(data_dir: Path, out: Path, arch: str = "pre_ln", **sections) -> dict:
    cfg = {
        "model": {"arch": arch, "fields": dict(TINY_FIELDS)},
        "data": {"data_dir": str(data_dir), "seq_len": 32, "eval_sequences": 6},
        "train": {"global_batch_size": 8, "micro_batch_size": 2, "max_steps": STEPS, "progress": False,
                  "mixed_precision": "no", "layer_stats_every": 5},
        "optim": {"lr": 5e-3},
        "checkpoint": {"every": 0, "hf_export": False},
        "output_dir": str(out),
    }
    for section, values in sections.items():
        if isinstance(cfg.get(section), dict):
            cfg[section].update(values)
        else:
            cfg[section] = values
    return cfg


def metrics(out: Path) -> dict[int, dict]:
    """Merged metric rows per step."""
    rows: dict[int, dict] = {}
    for line in (out / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        rows.setdefault(row["step"], {}).update(row)
    return rows


def losses(out: Path) -> dict[int, float]:
    return {step: row["train/loss"] for step, row in metrics(out).items() if "train/loss" in row}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}


def write_runs(folder: Path, runs: list[dict]) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for cfg in runs:
        path = folder / f"{Path(cfg['output_dir']).name}.json"
        path.write_text(json.dumps(cfg))
        paths.append(str(path))
    return paths


def accelerate_fsdp2(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """``accelerate launch --config_file src/depthbench/configs/fsdp2.yaml --num_processes 2 <args>`` (a free port
    instead of accelerate's fixed 29500: other test processes may share the machine)."""
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(FSDP2_CONFIG),
           "--num_processes", "2", "--main_process_port", str(_free_port()), *args]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=_env(), capture_output=True, text=True, timeout=1200)
    if check:
        assert proc.returncode == 0, proc.stderr[-6000:]
    return proc


def torchrun_ddp(*args: str) -> None:
    """Two CPU processes under torchrun, DDP (no FSDP launch config): the multi-process test's launch."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *args]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env={**_env(), "ACCELERATE_USE_CPU": "1"}, capture_output=True,
                          text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-6000:]


def assert_losses_close(reference: Path, other: Path, tol: float = 1e-5, steps: int = STEPS) -> None:
    a, b = losses(reference), losses(other)
    assert sorted(a) == sorted(b) == list(range(1, steps + 1)), (sorted(a), sorted(b))
    worst = max(abs(a[s] - b[s]) for s in a)
    assert worst <= tol, f"{other.name}: worst per-step loss difference {worst:.3g} > {tol:g}"


def resolved(out: Path) -> dict:
    return json.loads((out / "run_config.json").read_text())["resolved"]


# ================================================================================================ default suite
def test_fsdp2_in_one_process_equals_the_plain_run(tmp_path):
    """FSDP2 at world size 1 (``train.parallelism=fsdp2`` in a plain process: the trainer makes a 1-rank process
    group itself; the GPU check's FSDP2 case) equals the plain run, and its sharded checkpoint resumes (both
    sessions in one fresh process: a process group must not leak into this one)."""
    data_dir = make_train_data(tmp_path / "data")
    plain = run_dict(data_dir, tmp_path / "plain", arch="hc", train={"max_steps": 6, "layer_stats_every": 0},
                     checkpoint={"every": 3})
    train(load_run_config(plain))
    first = run_dict(data_dir, tmp_path / "sharded", arch="hc",
                     train={"max_steps": 6, "layer_stats_every": 0, "stop_at_step": 3, "parallelism": "fsdp2"},
                     checkpoint={"every": 3})
    second = {**first, "train": {**first["train"], "stop_at_step": None}, "resume": True}
    (tmp_path / "first.json").write_text(json.dumps(first))
    (tmp_path / "second.json").write_text(json.dumps(second))
    proc = subprocess.run([sys.executable, "-m", "tests.training.fsdp_runs", str(tmp_path / "first.json"),
                           str(tmp_path / "second.json")], cwd=REPO_ROOT, env=_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = tmp_path / "sharded"
    assert resolved(out)["parallelism"] == "fsdp2" and resolved(out)["world_size"] == 1
    assert resolved(out)["distributed_type"] == "FSDP"  # accelerate itself sees one plain process (NO)
    assert resolved(tmp_path / "plain")["distributed_type"] == "NO"
    assert (out / "checkpoints" / "ckpt-000003" / "state" / "dcp" / ".metadata").is_file()
    assert_losses_close(tmp_path / "plain", out, steps=6)


# ================================================================================================ 2 processes (slow)
@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return make_train_data(tmp_path_factory.mktemp("fsdp2_data") / "data")


class Runs:
    """Output folders of the module's runs by name, under one root."""

    def __init__(self, root: Path):
        self.root = root

    def __getitem__(self, name: str) -> Path:
        return self.root / name


def _dropout_run(data_dir: Path, out: Path, stop_at_step: int | None = None) -> dict:
    """``hc`` with attention dropout 0.1 (the RNG matters at every step), checkpointed every 4 steps."""
    return run_dict(data_dir, out, model={"arch": "hc", "fields": {**TINY_FIELDS, "attention_dropout": 0.1}},
                    train={"stop_at_step": stop_at_step}, checkpoint={"every": 4, "hf_export": False})


def _first_launch(data_dir: Path, runs: Runs) -> list[dict]:
    """The run files of the first FSDP2 launch (every run that starts under FSDP2)."""
    cfgs = [run_dict(data_dir, runs[f"fsdp_{arch}"], arch) for arch in ARCHS]
    cfgs += [run_dict(data_dir, runs[f"fsdp_clip_{arch}"], arch, optim={"lr": 5e-3, "grad_clip": 0.05})
             for arch in ("pre_ln", "hc")]
    cfgs += [run_dict(data_dir, runs[f"fsdp_bf16_{arch}"], arch, train={"mixed_precision": "bf16"})
             for arch in BF16_ARCHS]
    cfgs += [run_dict(data_dir, runs[f"fsdp_compiled_{arch}"], arch, model={"compile": True})
             for arch in ("pre_ln", "hc")]
    cfgs.append(run_dict(data_dir, runs["fsdp_checkpointing_hc"], "hc", model={"gradient_checkpointing": True}))
    cfgs += [_dropout_run(data_dir, runs["fsdp_dropout"]), _dropout_run(data_dir, runs["fsdp_dropout_resumed"], 8)]
    cfgs.append(run_dict(data_dir, runs["fsdp_to_single"], "mhc", train={"stop_at_step": 10}))
    cfgs.append(run_dict(data_dir, runs["fsdp_to_ddp"], "attnres", train={"stop_at_step": 10}))
    return cfgs


@pytest.fixture(scope="module")
def fsdp2_runs(data_dir, tmp_path_factory) -> Runs:
    """Every 2-process run of this module, launched in three FSDP2 launches and one DDP launch, with their
    1-process references trained here."""
    runs = Runs(tmp_path_factory.mktemp("fsdp2_runs"))
    files = runs.root / "files"
    first = write_runs(files / "first", _first_launch(data_dir, runs))
    accelerate_fsdp2("-m", "tests.training.fsdp_runs", "--compile-backend", "aot_eager", *first)

    for arch in ARCHS:  # the 1-process references (micro-batch 2: 4 accumulation steps instead of FSDP2's 2)
        train(load_run_config(run_dict(data_dir, runs[f"single_{arch}"], arch)))
    for arch in ("pre_ln", "hc"):
        train(load_run_config(run_dict(data_dir, runs[f"single_clip_{arch}"], arch,
                                       optim={"lr": 5e-3, "grad_clip": 0.05})))
    for arch in BF16_ARCHS:
        train(load_run_config(run_dict(data_dir, runs[f"single_bf16_{arch}"], arch, train={"mixed_precision": "bf16"})))
    train(load_run_config({**run_dict(data_dir, runs["fsdp_to_single"], "mhc"), "resume": True}))  # FSDP2 -> 1
    train(load_run_config(run_dict(data_dir, runs["single_to_fsdp"], "moda", train={"stop_at_step": 10})))

    ddp = write_runs(files / "ddp", [
        {**run_dict(data_dir, runs["fsdp_to_ddp"], "attnres"), "resume": True},                    # FSDP2 -> DDP
        run_dict(data_dir, runs["ddp_to_fsdp"], "block_attnres", train={"stop_at_step": 10}),
    ])
    torchrun_ddp("-m", "tests.training.fsdp_runs", *ddp)

    # the README command itself: resume the dropout run (its sharded checkpoint at step 8) to the end
    (files / "dropout.json").write_text(json.dumps(_dropout_run(data_dir, runs["fsdp_dropout_resumed"], 8)))
    accelerate_fsdp2("-m", "depthbench.training", "-c", str(files / "dropout.json"), "train.stop_at_step=null",
                     "--resume")
    last = write_runs(files / "last", [
        {**run_dict(data_dir, runs["single_to_fsdp"], "moda"), "resume": True},                    # 1 -> FSDP2
        {**run_dict(data_dir, runs["ddp_to_fsdp"], "block_attnres"), "resume": True},              # DDP -> FSDP2
    ])
    accelerate_fsdp2("-m", "tests.training.fsdp_runs", *last)
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
def test_fsdp2_equals_one_process(fsdp2_runs, arch):
    fsdp, single = fsdp2_runs[f"fsdp_{arch}"], fsdp2_runs[f"single_{arch}"]
    info = resolved(fsdp)
    assert (info["parallelism"], info["world_size"], info["grad_accum_steps"]) == ("fsdp2", 2, 2)
    assert resolved(single)["grad_accum_steps"] == 4
    assert_losses_close(single, fsdp)
    a, b = metrics(single), metrics(fsdp)
    for step, row in a.items():
        for key, value in row.items():
            if key.startswith("eval/"):
                assert b[step][key] == pytest.approx(value, abs=1e-5), (step, key)
            elif key == "train/grad_norm":  # float noise of the different reductions grows with the steps
                assert b[step][key] == pytest.approx(value, rel=1e-4), (step, key)
            elif key.startswith("layer_stats/") and key.endswith(("/rms", "/mean_abs")):  # forward and backward
                assert b[step][key] == pytest.approx(value, rel=1e-4), (step, key)
    assert any(key.endswith("block_01/backward/rms") for key in b[STEPS]) and "eval/eval/loss" in b[STEPS]
    pa, pb = load_file(single / "final" / "model.safetensors"), load_file(fsdp / "final" / "model.safetensors")
    assert pa.keys() == pb.keys()
    for key in pa:
        assert torch.allclose(pa[key], pb[key], atol=2e-5, rtol=0), key
    state = fsdp / "checkpoints" / f"ckpt-{STEPS:06d}" / "state"
    assert sorted(p.name for p in (state / "dcp").iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    assert not (state / "model.safetensors").exists() and not (state / "optimizer.bin").exists()


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["pre_ln", "hc"])
def test_gradient_clipping_is_global_across_shards(fsdp2_runs, arch):
    """A clip of 0.05 binds at every step; a per-shard clip would scale each shard by its own norm and part from
    the 1-process run at once."""
    single, fsdp = metrics(fsdp2_runs[f"single_clip_{arch}"]), metrics(fsdp2_runs[f"fsdp_clip_{arch}"])
    assert min(row["train/grad_norm"] for row in single.values() if "train/grad_norm" in row) > 0.05 * 4
    for step, row in single.items():
        if "train/grad_norm" in row:
            assert fsdp[step]["train/grad_norm"] == pytest.approx(row["train/grad_norm"], rel=1e-4), step
    assert_losses_close(fsdp2_runs[f"single_clip_{arch}"], fsdp2_runs[f"fsdp_clip_{arch}"])


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["pre_ln", "hc"])
def test_compiled_fsdp2_equals_eager(fsdp2_runs, arch):
    """``model.compile=true`` under FSDP2 (each block compiled after sharding; the aot_eager backend traces the
    forward and backward graphs as Inductor would get them, without its minutes of codegen on CPU)."""
    assert_losses_close(fsdp2_runs[f"fsdp_{arch}"], fsdp2_runs[f"fsdp_compiled_{arch}"])


@pytest.mark.slow
def test_gradient_checkpointing_under_fsdp2(fsdp2_runs):
    assert_losses_close(fsdp2_runs["single_hc"], fsdp2_runs["fsdp_checkpointing_hc"])


@pytest.mark.slow
@pytest.mark.parametrize("arch", BF16_ARCHS)
def test_bf16_policy_matches_fp32_to_bf16_tolerance(fsdp2_runs, arch):
    fp32, single_bf16 = losses(fsdp2_runs[f"single_{arch}"]), losses(fsdp2_runs[f"single_bf16_{arch}"])
    fsdp_bf16 = losses(fsdp2_runs[f"fsdp_bf16_{arch}"])
    assert resolved(fsdp2_runs[f"fsdp_bf16_{arch}"])["mixed_precision"] == "bf16"
    recipe = max(abs(single_bf16[s] - fp32[s]) for s in fp32)  # the 1-process bf16 recipe's own deviation
    ours = max(abs(fsdp_bf16[s] - fp32[s]) for s in fp32)
    between = max(abs(fsdp_bf16[s] - single_bf16[s]) for s in fp32)
    print(f"{arch}: |FSDP2 bf16 - fp32| <= {ours:.2e}, |1-process bf16 - fp32| <= {recipe:.2e}, "
          f"|FSDP2 bf16 - 1-process bf16| <= {between:.2e}")
    assert 0 < ours <= BF16_TOLERANCE  # > 0: the run did compute in bf16
    assert between <= BF16_TOLERANCE


@pytest.mark.slow
def test_sharded_checkpoint_resumes_bit_exactly_with_rng(fsdp2_runs):
    """Attention dropout draws from each rank's RNG at every step: the resumed run equals the uninterrupted one
    bit for bit only if the sharded model and optimizer state and every rank's RNG state come back exactly."""
    full, resumed = fsdp2_runs["fsdp_dropout"], fsdp2_runs["fsdp_dropout_resumed"]
    history = json.loads((resumed / "run_config.json").read_text())["history"]
    assert history[-1]["resumed_at_step"] == 8 and history[-1]["world_size"] == 2
    state = resumed / "checkpoints" / f"ckpt-{STEPS:06d}" / "state"  # written by the resumed session
    assert (state / "random_states_0.pkl").is_file() and (state / "random_states_1.pkl").is_file()
    assert losses(full) == losses(resumed)  # exactly
    a, b = load_file(full / "final" / "model.safetensors"), load_file(resumed / "final" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    no_dropout = losses(fsdp2_runs["fsdp_hc"])
    assert all(losses(full)[s] != no_dropout[s] for s in range(2, STEPS + 1))  # the dropout did act


@pytest.mark.slow
@pytest.mark.parametrize("name, arch, sessions", [
    ("fsdp_to_single", "mhc", [("fsdp2", 2), ("ddp", 1)]),
    ("single_to_fsdp", "moda", [("ddp", 1), ("fsdp2", 2)]),
    ("fsdp_to_ddp", "attnres", [("fsdp2", 2), ("ddp", 2)]),
    ("ddp_to_fsdp", "block_attnres", [("ddp", 2), ("fsdp2", 2)]),
])
def test_resume_across_fsdp2_ddp_and_one_process(fsdp2_runs, name, arch, sessions):
    out = fsdp2_runs[name]
    record = json.loads((out / "run_config.json").read_text())
    assert record["history"][-1]["resumed_at_step"] == 10 and record["history"][-1]["world_size"] == sessions[1][1]
    assert (record["resolved"]["parallelism"], record["resolved"]["world_size"]) == sessions[1]
    sharded_first = (out / "checkpoints" / "ckpt-000010" / "state" / "dcp").is_dir()
    assert sharded_first == (sessions[0][0] == "fsdp2")
    assert_losses_close(fsdp2_runs[f"single_{arch}"], out)


_CHILD = BLOCK_DEPTHBENCH + r'''
import json

import torch
from transformers import AutoModelForCausalLM

torch.set_num_threads(1)
manifest, out = json.load(open(sys.argv[1])), {"blocked": depthbench_blocked, "logits": {}}
ids = torch.load(manifest.pop("ids"))
for arch, path in manifest.items():
    model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True).eval()
    with torch.no_grad():
        out["logits"][arch] = model(input_ids=ids, use_cache=False).logits.tolist()
    out.setdefault("classes", {})[arch] = type(model).__name__
out["depthbench_loaded"] = any(m.split(".")[0] == "depthbench" for m in sys.modules)
json.dump(out, open(sys.argv[2], "w"))
'''


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")  # reading a sharded checkpoint in one process
def test_fsdp2_export_loads_without_depthbench(fsdp2_runs, tmp_path):
    """``final/`` of each FSDP2 run is gathered from the shards; a fresh process without depthbench loads it as
    remote code and gets the logits of the last sharded checkpoint, which this test reads with
    torch.distributed.checkpoint into a model of its own (not through the trainer's loader)."""
    import torch.distributed.checkpoint as dcp
    from transformers import AutoConfig, AutoModelForCausalLM

    ids = torch.randint(1, 200, (2, 12), generator=torch.Generator().manual_seed(5))
    torch.save(ids, tmp_path / "ids.pt")
    manifest, reference = {"ids": str(tmp_path / "ids.pt")}, {}
    for arch in ARCHS:
        out = fsdp2_runs[f"fsdp_{arch}"]
        manifest[arch] = str(out / "final")
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(out / "final")).eval()
        state = {"model": model.state_dict()}
        dcp.load(state, checkpoint_id=str(out / "checkpoints" / f"ckpt-{STEPS:06d}" / "state" / "dcp"))
        exported = load_file(out / "final" / "model.safetensors")
        assert exported.keys() == state["model"].keys()
        assert all(torch.equal(exported[k], state["model"][k]) for k in exported), arch
        model.load_state_dict(state["model"])
        with torch.no_grad():
            reference[arch] = model(input_ids=ids, use_cache=False).logits
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    (tmp_path / "child.py").write_text(_CHILD)
    env = {k: v for k, v in _env().items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"))
    proc = subprocess.run([sys.executable, str(tmp_path / "child.py"), str(tmp_path / "manifest.json"),
                           str(tmp_path / "result.json")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["blocked"] is True and result["depthbench_loaded"] is False
    for arch in ARCHS:
        logits = torch.tensor(result["logits"][arch])
        assert (logits - reference[arch]).abs().max().item() <= 1e-5, arch


@pytest.mark.slow
def test_kill_9_of_one_rank_during_a_sharded_save_keeps_latest(data_dir, tmp_path):
    """Rank 1 SIGKILLs itself half-way through writing its shard of the step-4 checkpoint; the launch fails, and
    ``latest`` still names the complete step-2 checkpoint, from which the run resumes (here in one process)."""
    out = tmp_path / "run"
    cfg = run_dict(data_dir, out, "hc", train={"max_steps": 6, "layer_stats_every": 0}, checkpoint={"every": 2})
    (tmp_path / "run.json").write_text(json.dumps(cfg))
    proc = accelerate_fsdp2("-m", "tests.training.fsdp_runs", "--kill-rank", "1", "--kill-at", "ckpt-000004",
                            str(tmp_path / "run.json"), check=False)
    assert proc.returncode != 0
    ckpts = out / "checkpoints"
    assert (ckpts / "latest").read_text() == "ckpt-000002" and is_complete(str(ckpts / "ckpt-000002"))
    assert (ckpts / "ckpt-000004.tmp" / "state" / "dcp" / "__1_0.distcp").read_bytes() == b"partial shard"
    assert not (ckpts / "ckpt-000004").exists() and not (ckpts / "ckpt-000004.tmp" / "trainer_state.json").exists()
    summary = train(load_run_config({**cfg, "resume": True}))
    assert summary["status"] == "finished" and summary["steps"] == 6
    assert sorted(p.name for p in ckpts.iterdir()) == ["ckpt-000004", "ckpt-000006", "latest"]
    reference = tmp_path / "reference"
    train(load_run_config(run_dict(data_dir, reference, "hc", train={"max_steps": 6, "layer_stats_every": 0})))
    assert_losses_close(reference, out, steps=6)


@pytest.mark.slow
def test_launched_runs_say_bad_input_once_and_refuse_another_architecture_s_sharded_checkpoint(data_dir, tmp_path):
    """Under ``accelerate launch`` (FSDP2, 2 processes) an HC sharded checkpoint copied into a Pre-LN run as
    ``latest`` is refused (before: exit code 0, trained on the HC tensors the Pre-LN model asked for); under
    ``torchrun`` and ``accelerate launch`` a bad-input error is printed once (before: once per rank). The launcher
    exits 1 for any failed worker and reports the worker's exit code, 2 (docs/reliability.md, "Exit codes")."""
    import shutil

    first = write_runs(tmp_path / "first", [
        run_dict(data_dir, tmp_path / arch, arch, train={"max_steps": 4, "stop_at_step": 2, "layer_stats_every": 0},
                 checkpoint={"every": 2}) for arch in ("pre_ln", "hc")])
    accelerate_fsdp2("-m", "tests.training.fsdp_runs", *first)
    ckpts = tmp_path / "pre_ln" / "checkpoints"
    shutil.rmtree(ckpts / "ckpt-000002")
    shutil.copytree(tmp_path / "hc" / "checkpoints" / "ckpt-000002", ckpts / "ckpt-000002")
    before = (tmp_path / "pre_ln" / "metrics.jsonl").read_text()
    proc = accelerate_fsdp2("-m", "depthbench.training", "-c", first[0], "train.stop_at_step=null", "--resume",
                            check=False)
    errors = [line for line in proc.stderr.splitlines() if "depthbench train" in line and "error:" in line]
    assert len(errors) == 1, proc.stderr[-6000:]
    assert "written by a hc model, and this run trains pre_ln: refusing" in errors[0]
    assert errors[0].startswith("depthbench train: error: checkpoint ")  # a line of its own
    assert proc.returncode == 1 and "exitcode  : 2" in proc.stderr  # the launcher's code, the worker's code
    assert (tmp_path / "pre_ln" / "metrics.jsonl").read_text() == before

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "depthbench.training", "-c", first[0], "train.mixed_precision=fp8"]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env={**_env(), "ACCELERATE_USE_CPU": "1"}, capture_output=True,
                          text=True, timeout=600)
    assert proc.stderr.count("error: train.mixed_precision='fp8' is not allowed") == 1, proc.stderr[-6000:]
    assert proc.returncode == 1 and "exitcode  : 2" in proc.stderr
