"""``depthbench publish`` against the loopback Hub (tests/hub/hub_server.py), offline.

One tiny HC run (2 checkpoints + final/: the session fixture ``hub_run``, tests/conftest.py) is trained once; the
model cards it publishes are tests/test_cards.py's. The round trip publishes it with
``--revisions`` and loads ``main`` and ``step-000002`` back with
``AutoModelForCausalLM.from_pretrained("aspect-ratio-scaling/NAME", revision=..., trust_remote_code=True)`` in a
fresh process that cannot import depthbench, comparing logits with the local exports.

Run: ``python -m pytest tests/hub/test_publish.py -q``
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from depthbench.hub import publish as pub
from tests.hub.hub_server import HubServer

ORG = "aspect-ratio-scaling"
USER = "tester"  # the user of the loopback Hub's write tokens (whoami), the default namespace


@pytest.fixture()
def hub():
    with HubServer() as server:
        yield server


def api_for(hub: HubServer, token: str | None):
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub.url, token=token)  # None: huggingface_hub's own lookup (HF_TOKEN, stored login)


def posts(hub: HubServer) -> list[str]:
    return [p for m, p in hub.requests if m == "POST"]


def test_checkpoint_exports_carry_cards(hub_run):
    from huggingface_hub import ModelCard

    for export in [hub_run / "final", *sorted((hub_run / "checkpoints").glob("ckpt-*/hf"))]:
        card = ModelCard.load(export / "README.md")
        assert card.data.model_name and "Hyper-Connections" in card.text, export


# ================================================================================================ publish
def test_dry_run_prints_the_plan_and_writes_nothing(hub_run, hub):
    out = io.StringIO()
    result = pub.publish(str(hub_run), revisions=True, dry_run=True, org=ORG, api=api_for(hub, None), out=out)
    text = out.getvalue()
    (repo,) = result["repos"]
    assert repo == f"{ORG}/hc-lr3e-3-llama-{repo.split('-llama-')[1].split('-')[0]}-L2-pretrain"
    assert "main:" in text and "step-000002:" in text and "step-000004:" in text and "model.safetensors" in text
    assert posts(hub) == [] and hub.repos == {}


@pytest.mark.parametrize("token", [None, "hf_invalid", "hf_read_only"])
def test_missing_or_read_only_token_fails_before_any_upload(hub_run, hub, token, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with pytest.raises(pub.PublishError, match="token"):
        pub.publish(str(hub_run), api=api_for(hub, token), out=io.StringIO())
    assert posts(hub) == [] and hub.repos == {}


def test_bad_inputs_are_refused(hub_run, hub, tmp_path):
    api = api_for(hub, "hf_write")
    with pytest.raises(pub.PublishError, match="NAMESPACE/NAME"):
        pub.publish(str(hub_run), repo="no-namespace", api=api)
    with pytest.raises(pub.PublishError, match="neither a run folder"):
        pub.publish(str(tmp_path), api=api)
    assert hub.repos == {}


_CHILD = r'''
import importlib.abc, json, sys

class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "depthbench" or name.startswith("depthbench."):
            raise ImportError(name + " is blocked")

sys.meta_path.insert(0, _Block())
import torch
from transformers import AutoModelForCausalLM
torch.set_num_threads(1)
repo, ids = sys.argv[1], torch.tensor(json.loads(sys.argv[2]))
out = {}
for rev in sys.argv[3:]:
    model = AutoModelForCausalLM.from_pretrained(repo, revision=rev, trust_remote_code=True).eval()
    with torch.no_grad():
        out[rev] = model(ids).logits.tolist()
out["depthbench_loaded"] = any(m.split(".")[0] == "depthbench" for m in sys.modules)
print("RESULT" + json.dumps(out))
'''


def test_publish_with_revisions_round_trips_and_republishes_only_changes(hub_run, hub, tmp_path):
    from transformers import AutoModelForCausalLM

    api = api_for(hub, "hf_write_token")
    result = pub.publish(str(hub_run), revisions=True, private=True, api=api, out=io.StringIO())
    (repo,) = result["repos"]
    stored = hub.repos[repo]
    assert stored.private and set(stored.branches) == {"main", "step-000002", "step-000004"}
    main_files = hub.files(repo)
    assert {"config.json", "model.safetensors", "README.md", "loss_curve.png", "tokenizer.json"} <= set(main_files)
    assert b"step-000002" in hub.files(repo, "step-000002")["README.md"]  # the branch card names its revision

    # re-publishing unchanged files makes no commit; a changed file is the only one uploaded
    before = posts(hub)
    pub.publish(str(hub_run), revisions=True, api=api, out=io.StringIO())
    assert not [p for p in posts(hub)[len(before):] if "/commit/" in p]
    (hub_run / "final" / "extra_notes.txt").write_text("added after the first upload\n")
    try:
        out = io.StringIO()
        pub.publish(str(hub_run), api=api, out=out)
        assert hub.files(repo)["extra_notes.txt"] == b"added after the first upload\n"
        assert "main: 1 of" in out.getvalue()
    finally:
        (hub_run / "final" / "extra_notes.txt").unlink()

    # load back by name and revision in a process that cannot import depthbench
    ids = [[1, 5, 7, 9, 2, 4]]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT=hub.url, HF_TOKEN="hf_read_token", HF_HUB_DISABLE_XET="1", HF_HOME=str(tmp_path / "hf"),
               HF_HUB_DISABLE_TELEMETRY="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", _CHILD, repo, json.dumps(ids), "main", "step-000002"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    loaded = json.loads(proc.stdout.split("RESULT", 1)[1])
    assert loaded["depthbench_loaded"] is False
    for rev, local in (("main", hub_run / "final"), ("step-000002", hub_run / "checkpoints/ckpt-000002/hf")):
        model = AutoModelForCausalLM.from_pretrained(local).eval()
        with torch.no_grad():
            expected = model(torch.tensor(ids)).logits
        assert torch.allclose(torch.tensor(loaded[rev]), expected, atol=1e-6), rev
    assert not torch.allclose(torch.tensor(loaded["main"]), torch.tensor(loaded["step-000002"]))


FIGURES = ["loss_vs_aspect_ratio.png", "synthetic_acc_vs_aspect_ratio.png", "analysis_late_fractions.png",
           "analysis_logit_lens.png"]


def make_sweep(hub_run: Path, sweep: Path, figures: list[str] = FIGURES) -> Path:
    """A sweep folder around ``hub_run`` (one finished run, one stopped) whose report links ``figures``."""
    (sweep / "runs").mkdir(parents=True)
    (sweep / "sweep.json").write_text(json.dumps({"archs": ["hc"]}))
    (sweep / "report.md").write_text("# report\n\n" + "".join(f"![{n}]({n})\n\n" for n in figures))
    for k, name in enumerate(figures):
        (sweep / name).write_bytes(b"\x89PNG\r\n\x1a\n" + bytes([k]))
    (sweep / "report.html").write_text("<!doctype html><title>report</title>")
    (sweep / "results.csv").write_text("arch\nhc\n")
    os.symlink(hub_run, sweep / "runs" / "hc__tiny-L2__lr0.003__s0")
    unfinished = sweep / "runs" / "hc__tiny-L4__lr0.003__s0"
    unfinished.mkdir()
    (unfinished / "summary.json").write_text(json.dumps({"status": "stopped"}))
    return sweep


def test_sweep_publishes_finished_runs_into_a_collection(hub_run, hub, tmp_path):
    sweep = make_sweep(hub_run, tmp_path / "sweep")
    result = pub.publish(str(sweep), api=api_for(hub, "hf_write_token"), out=io.StringIO())
    assert len(result["repos"]) == 1
    collection = hub.collections[result["collection"]]
    items = [i["id"] for i in collection["items"]]
    assert items == [f"{USER}/sweep-sweep-report", result["repos"][0]]
    files = hub.files(f"{USER}/sweep-sweep-report")
    assert b"# report" in files["README.md"]
    for name in FIGURES + ["report.html", "results.csv"]:  # every figure the README links renders on the Hub
        assert files[name] == (sweep / name).read_bytes(), name


def test_a_sweep_report_linking_a_missing_figure_is_refused_before_any_upload(hub_run, hub, tmp_path):
    sweep = make_sweep(hub_run, tmp_path / "sweep")
    (sweep / FIGURES[2]).unlink()
    for dry_run in (True, False):
        with pytest.raises(pub.PublishError, match=f"links the figure '{FIGURES[2]}'.*depthbench report"):
            pub.publish(str(sweep), dry_run=dry_run, api=api_for(hub, "hf_write_token"), out=io.StringIO())
    assert posts(hub) == [] and hub.repos == {}


def test_default_namespace_is_the_token_s_user_or_must_be_given(hub_run, hub, monkeypatch):
    """Not the study's organisation (no user can write there unless a member): the user ``whoami`` names; a dry
    run without a token has no user, so it asks for --org."""
    monkeypatch.delenv("HF_TOKEN", raising=False)
    result = pub.publish(str(hub_run), dry_run=True, api=api_for(hub, "hf_write_token"), out=io.StringIO())
    assert [r.split("/")[0] for r in result["repos"]] == [USER]
    result = pub.publish(str(hub_run), api=api_for(hub, "hf_write_token"), out=io.StringIO())
    assert list(hub.repos) == result["repos"] and result["repos"][0].startswith(f"{USER}/")
    with pytest.raises(pub.PublishError, match="pass --org NAMESPACE"):
        pub.publish(str(hub_run), dry_run=True, api=api_for(hub, None), out=io.StringIO())
    assert pub.publish(str(hub_run), dry_run=True, org="someone", api=api_for(hub, None),
                       out=io.StringIO())["repos"][0].startswith("someone/")


def test_cli_publish_dry_run(hub_run, hub, capsys, monkeypatch):
    from depthbench.cli import main

    monkeypatch.setattr(pub, "publish", lambda *a, **k: _recorded.append((a, k)) or {})
    _recorded: list = []
    assert main(["publish", str(hub_run), "--dry-run", "--revisions", "--repo", f"{ORG}/x"]) == 0
    (args, kwargs), = _recorded
    assert args == (str(hub_run),) and kwargs["dry_run"] and kwargs["revisions"] and kwargs["repo"] == f"{ORG}/x"


def test_dry_run_without_a_reachable_hub_still_prints_the_plan(hub_run, hub, monkeypatch):
    from huggingface_hub.errors import OfflineModeIsEnabled

    api = api_for(hub, None)

    def offline(*args, **kwargs):
        raise OfflineModeIsEnabled("HF_HUB_OFFLINE=1")

    monkeypatch.setattr(api, "list_repo_tree", offline)
    monkeypatch.setattr(api, "list_repo_refs", offline)
    out = io.StringIO()
    pub.publish(str(hub_run), dry_run=True, org=ORG, api=api, out=out)
    assert "unknown" in out.getvalue() and "remote state unreadable" in out.getvalue()


# ================================================================================================ faults
INITIAL = {".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"}  # a new repository's files


def branch_files(hub: HubServer, repo: str) -> dict[str, dict[str, bytes]]:
    """``{branch: {path: bytes}}`` of ``repo`` as the loopback Hub holds it (``{}``: no such repository)."""
    stored = hub.repos.get(repo)
    return {b: dict(stored.commits[c]) for b, c in stored.branches.items()} if stored else {}


@pytest.fixture()
def cached_cards(monkeypatch):
    """Cards rendered once per (export, branch): the fault tests publish the same run dozens of times."""
    from depthbench import cards

    real, cache = cards.card_files, {}

    def cached(export_dir, run_dir, repo_id, revision=None, lm_eval=None):
        key = (export_dir, run_dir, repo_id, revision)
        if key not in cache:
            cache[key] = real(export_dir, run_dir, repo_id, revision=revision, lm_eval=lm_eval)
        return cache[key]

    monkeypatch.setattr(cards, "card_files", cached)


def test_every_branch_of_an_interrupted_publish_holds_exactly_its_own_files(hub_run, cached_cards):
    """A failure injected at each write request of a three-branch publish in turn (refused, or applied with the
    answer lost): every branch that exists afterwards holds exactly the files of its own export (``main`` may also
    be the empty new repository), never another step's or the final model; a rerun then completes."""
    with HubServer() as clean:
        pub.publish(str(hub_run), revisions=True, api=api_for(clean, "hf_write"), out=io.StringIO())
        (repo,) = clean.repos
        expected = branch_files(clean, repo)
        writes = clean.writes
    assert set(expected) == {"main", "step-000002", "step-000004"}
    exports = {"main": hub_run / "final", "step-000002": hub_run / "checkpoints/ckpt-000002/hf",
               "step-000004": hub_run / "checkpoints/ckpt-000004/hf"}
    for branch, export in exports.items():  # the reference itself: each branch is its own export, byte for byte
        local = {p.relative_to(export).as_posix(): p.read_bytes() for p in export.rglob("*") if p.is_file()}
        held = expected[branch]
        assert set(held) == set(local) | set(INITIAL) | {"loss_curve.png"}, branch
        assert all(held[p] == data for p, data in local.items() if p not in pub.CARD_FILES), branch
        assert branch.encode() in held["README.md"] or branch == "main"
    assert expected["main"]["model.safetensors"] != expected["step-000002"]["model.safetensors"]
    for applied in (False, True):
        for index in range(writes):
            with HubServer() as hub:
                hub.fail_write(index, 500, applied=applied)
                api = api_for(hub, "hf_write")
                raised = False
                try:
                    pub.publish(str(hub_run), revisions=True, api=api, out=io.StringIO())
                except pub.PublishFailed as exc:
                    raised = True
                    assert repo in str(exc) and "\n" not in str(exc) and "rerun" in str(exc)
                    from depthbench.errors import exit_code
                    assert exit_code(exc) == 1
                where = f"write {index} ({'applied' if applied else 'refused'})"
                method, path = [r for r in hub.requests if r[0] in ("POST", "DELETE")
                                and r[1] != "/api/validate-yaml"][index]
                if not applied and method == "POST" and "/preupload/" not in path:  # (preuploads are retried)
                    assert raised, (where, path)  # a refused creation or commit is reported
                for branch, files in branch_files(hub, repo).items():
                    if branch in expected:
                        assert files == expected[branch] or (branch == "main" and files == INITIAL), (where, branch)
                        continue
                    (step,) = [s for s in expected if s != "main" and branch.endswith(s)]  # a staging branch
                    assert files in (INITIAL, expected[step]), (where, branch)
                pub.publish(str(hub_run), revisions=True, api=api, out=io.StringIO())  # a rerun finishes
                assert branch_files(hub, repo) == expected, where


def _cli(argv, capsys) -> tuple[int, str]:
    """Exit code and the error of ``depthbench ARGV``: exactly one ``error:`` line (progress bars aside), no
    traceback."""
    from depthbench.cli import main

    code = main(argv)
    err = capsys.readouterr().err
    errors = [line for line in err.replace("\r", "\n").splitlines() if "error:" in line]
    assert "Traceback" not in err and len(errors) == 1, err
    return code, errors[0]


@pytest.fixture()
def cli_hub(hub, monkeypatch):
    """The loopback Hub as the endpoint of the command line (huggingface_hub's default ``HfApi()``)."""
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    monkeypatch.setenv("HF_TOKEN", "hf_write_token")
    return hub


def test_a_namespace_the_token_cannot_write_is_a_one_line_usage_error(hub_run, cli_hub, capsys):
    code, err = _cli(["publish", str(hub_run), "--org", "someone-else"], capsys)
    assert code == 2
    assert "someone-else/" in err and "--org" in err  # names the repository and what to do
    assert cli_hub.repos == {} and posts(cli_hub) == []
    # the Hub refusing a write although the namespace looks writable (a fine-grained token): the same, nothing left
    cli_hub.fail_write(0, 403)
    code, err = _cli(["publish", str(hub_run), "--revisions"], capsys)
    assert code == 2 and f"{USER}/" in err and "403" in err
    assert cli_hub.repos == {}


@pytest.mark.parametrize(("failing_write", "applied"), [(0, False), (2, False), (2, True)])
def test_a_server_error_is_a_one_line_failure_and_leaves_nothing_half_created(hub_run, cli_hub, capsys,
                                                                              failing_write, applied):
    """A 503 at the repository's creation or at its main commit (refused, or made with the answer lost; write 1,
    the pre-upload, huggingface_hub retries): exit code 1, one line naming the repository and saying to rerun,
    and no repository left."""
    cli_hub.fail_write(failing_write, 503, applied=applied)
    code, err = _cli(["publish", str(hub_run)], capsys)
    assert code == 1
    assert f"{USER}/" in err and "503" in err and "rerun" in err
    assert cli_hub.repos == {}


def test_an_unfinished_run_says_it_has_no_final_export(hub_run, hub, tmp_path):
    run = tmp_path / "unfinished"
    run.mkdir()
    (run / "run_config.json").write_bytes((hub_run / "run_config.json").read_bytes())
    (run / "metrics.jsonl").write_bytes((hub_run / "metrics.jsonl").read_bytes())
    for dry_run in (True, False):
        with pytest.raises(pub.PublishError, match="no final export yet") as exc:
            pub.publish(str(run), dry_run=dry_run, api=api_for(hub, "hf_write"), out=io.StringIO())
        assert "model_type" not in str(exc.value)
    assert hub.repos == {}


@pytest.mark.parametrize("option", [{"repo": f"{ORG}/bad--name"}, {"repo": f"{ORG}/-dash"},
                                    {"repo": f"{ORG}/{'x' * 97}"}, {"org": "bad org"}])
def test_a_repository_name_the_hub_rejects_is_refused_locally_in_dry_runs_too(hub_run, hub, option):
    from depthbench.errors import exit_code

    for dry_run in (True, False):
        out = io.StringIO()
        with pytest.raises(pub.PublishError, match="not a valid Hub repository id") as exc:
            pub.publish(str(hub_run), dry_run=dry_run, api=api_for(hub, "hf_write"), out=out, **option)
        assert exit_code(exc.value) == 2 and "remote state unreadable" not in out.getvalue()
    assert hub.requests == []


def test_publish_lm_eval_json_of_a_subset_says_so(hub_run, hub):
    """``publish --lm-eval-json`` of an lm-eval run with ``--limit 2`` (2 of 100 documents): the uploaded card's
    entry and text say it is a subset."""
    from huggingface_hub import ModelCard

    results = {"results": {"depthbench_synthetic": {"acc,none": 0.5}}, "config": {"limit": 2},
               "n-samples": {"depthbench_synthetic": {"original": 100, "effective": 2}}}
    path = hub_run.parent / "lm_eval_subset.json"
    path.write_text(json.dumps(results))
    result = pub.publish(str(hub_run), api=api_for(hub, "hf_write"), lm_eval_json=str(path), out=io.StringIO())
    card = ModelCard(hub.files(result["repos"][0])["README.md"].decode())
    (acc,) = [e for e in card.data.eval_results if e.metric_type == "acc"]
    assert (acc.dataset_args["documents"], acc.dataset_args["documents_in_task"]) == (2, 100)
    line = next(t for t in card.text.splitlines() if t.startswith("| depthbench_synthetic | acc |"))
    assert "**subset**: 2 of 100 documents" in line


# ================================================================================================ seeds
def seed_copy(hub_run: Path, dest: Path, seed: int) -> Path:
    """A copy of ``hub_run`` that records ``train.seed = seed`` (as a sweep's run of that seed does)."""
    import shutil

    shutil.copytree(hub_run, dest, symlinks=True)
    record = json.loads((dest / "run_config.json").read_text())
    record["config"]["train"]["seed"] = seed
    (dest / "run_config.json").write_text(json.dumps(record))
    return dest


def test_a_sweep_with_several_seeds_publishes_each_seed_to_its_own_repository(hub_run, hub, tmp_path):
    """The demo's 27 runs are 9 points x 3 seeds: each seed gets ``...-pretrain-s<seed>`` (before: 9 names, each
    three times, and a real publish left one seed's weights)."""
    sweep = tmp_path / "sweep"
    (sweep / "runs").mkdir(parents=True)
    (sweep / "sweep.json").write_text(json.dumps({"spec": {"archs": ["hc"], "seeds": [0, 1, 2]}}))
    for seed in (0, 1, 2):
        seed_copy(hub_run, sweep / "runs" / f"hc__tiny-L2__lr0.003__s{seed}", seed)
    dry = pub.publish(str(sweep), dry_run=True, api=api_for(hub, "hf_write_token"), out=io.StringIO())
    assert len(set(dry["repos"])) == 3
    assert [r.rsplit("-", 1)[1] for r in dry["repos"]] == ["s0", "s1", "s2"]
    assert all(r.split("/")[1].endswith(f"-pretrain-s{s}") for r, s in zip(dry["repos"], (0, 1, 2)))
    result = pub.publish(str(sweep), api=api_for(hub, "hf_write_token"), out=io.StringIO())
    assert result["repos"] == dry["repos"]
    for repo, seed in zip(result["repos"], (0, 1, 2)):
        card = hub.files(repo)["README.md"].decode()
        assert f"| seed | {seed} |" in card and repo in card  # each repository holds its own seed's run
    assert sorted(i["id"] for i in hub.collections[result["collection"]]["items"]) == sorted(result["repos"])
    # one run of a single-seed sweep (and a run published alone) keeps the study's name, without a seed
    assert not pub.publish(str(hub_run), dry_run=True, api=api_for(hub, "hf_write_token"),
                           out=io.StringIO())["repos"][0].endswith("-s42")


def test_two_runs_mapping_to_one_repository_and_branch_are_refused_naming_both(hub_run, hub, tmp_path):
    sweep = tmp_path / "sweep"
    (sweep / "runs").mkdir(parents=True)
    (sweep / "sweep.json").write_text(json.dumps({"spec": {"archs": ["hc"]}}))
    for name in ("hc__tiny-L2__lr0.003__s0", "hc__tiny-L2__lr0.003__s1"):  # the same run (seed 42) twice
        os.symlink(hub_run, sweep / "runs" / name)
    for dry_run in (True, False):
        for revisions in (False, True):
            with pytest.raises(pub.PublishError) as err:
                pub.publish(str(sweep), dry_run=dry_run, revisions=revisions,
                            api=api_for(hub, "hf_write_token"), out=io.StringIO())
            message = str(err.value)
            assert "hc__tiny-L2__lr0.003__s0 and " in message and "hc__tiny-L2__lr0.003__s1 would both" in message
            assert "(branch main)" in message and "nothing was uploaded" in message
    assert posts(hub) == [] and hub.repos == {}
