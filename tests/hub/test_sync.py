"""``depthbench.hub.sync``: reading a repository's remote state, diffing a branch plan against it, writing a branch
so that it never holds another revision's files, and Hub errors as one-line depthbench errors.

Against the loopback Hub (tests/hub/hub_server.py) through huggingface_hub's ``HfApi``; git itself is the oracle
of the blob ids. ``depthbench publish`` end to end (plans, interruptions, the CLI) is test_publish.py's.

Run: ``python -m pytest tests/hub/test_sync.py -q``
"""

from __future__ import annotations

import hashlib
import importlib
import subprocess

import pytest

from depthbench.hub import sync
from tests.hub.hub_server import HubServer

REPO = "aspect-ratio-scaling/sync-test"


@pytest.fixture()
def hub():
    with HubServer() as server:
        yield server


def _api(hub: HubServer):
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub.url, token="hf_write")


@pytest.mark.parametrize("data", [b"", b"hello\n", bytes(range(256)) * 3])
def test_blob_ids_are_git_s(data):
    git = subprocess.run(["git", "hash-object", "--stdin"], input=data, capture_output=True, check=True)
    assert sync.git_blob_sha1(data) == git.stdout.decode().strip()


def test_a_branch_plan_is_diffed_by_blob_id_or_lfs_sha256(hub, tmp_path):
    hub.add_repo(REPO, {"config.json": b"{}", "README.md": b"old card", "stale.bin": b"x"})
    api = _api(hub)
    remote = sync.remote_files(api, REPO, "main")
    (tmp_path / "config.json").write_bytes(b"{}")
    plan = sync.BranchPlan("main", str(tmp_path), files=[
        sync.FilePlan("config.json", 2, "unknown", local=str(tmp_path / "config.json")),
        sync.FilePlan("README.md", 8, "unknown", content=b"new card"),
        sync.FilePlan("model.safetensors", 3, "unknown", content=b"abc")])
    sync.diff_branch(plan, remote)
    assert [(f.path, f.status) for f in plan.files] == [("config.json", "unchanged"), ("README.md", "changed"),
                                                         ("model.safetensors", "new")]
    assert plan.deletions == ["stale.bin"]  # .gitattributes (the repository's own) is never deleted
    assert [f.path for f in plan.uploads] == ["README.md", "model.safetensors"]
    # an LFS file is compared by its content's sha256, not by the pointer's blob id
    lfs = {"model.safetensors": ("pointer-blob-id", hashlib.sha256(b"abc").hexdigest())}
    sync.diff_branch(plan, lfs)
    assert plan.files[2].status == "unchanged" and plan.deletions == []
    sync.diff_branch(plan, None)  # no such repository or branch: everything is new, nothing to delete
    assert {f.status for f in plan.files} == {"new"} and plan.deletions == []


def test_missing_repositories_and_revisions_read_as_none(hub):
    hub.add_repo(REPO, {"a.txt": b"a"})
    api = _api(hub)
    assert sync.remote_heads(api, "aspect-ratio-scaling/absent") is None
    assert set(sync.remote_heads(api, REPO)) == {"main"}
    assert sync.remote_files(api, REPO, "step-000002") is None
    assert sync.remote_files(api, "aspect-ratio-scaling/absent", "main") is None


def test_a_new_branch_appears_only_with_all_its_files_and_an_update_is_one_exact_commit(hub, tmp_path):
    hub.add_repo(REPO, {"README.md": b"main card", "model.bin": b"final"})
    api = _api(hub)
    root = api.list_repo_commits(REPO)[-1].commit_id
    branch = sync.BranchPlan("step-000002", str(tmp_path), files=[
        sync.FilePlan("model.bin", 5, "unknown", content=b"step2"),
        sync.FilePlan("x.json", 2, "unknown", content=b"{}")])
    hub.requests.clear()
    oid = sync.create_new_branch(api, REPO, branch, root)
    writes = [(m, p) for m, p in hub.requests if m in ("POST", "DELETE") and "preupload" not in p]
    staging = sync.STAGING_PREFIX + "step-000002"
    assert [p.rsplit("/", 1)[-1] for _, p in writes] == [staging, staging, "step-000002", staging]  # commit 2nd
    assert [m for m, _ in writes] == ["POST", "POST", "POST", "DELETE"]
    files = hub.files(REPO, "step-000002")
    assert {k: v for k, v in files.items() if k != ".gitattributes"} == {"model.bin": b"step2", "x.json": b"{}"}
    assert set(sync.remote_heads(api, REPO)) == {"main", "step-000002"}
    assert sync.remote_heads(api, REPO)["step-000002"] == oid
    assert hub.files(REPO)["model.bin"] == b"final"  # main untouched
    # the same files again: no commit; one file fewer: one commit that also deletes it
    head = sync.remote_heads(api, REPO)["step-000002"]
    assert sync.update_branch(api, REPO, branch, head) is None
    branch.files = branch.files[:1]
    assert sync.update_branch(api, REPO, branch, head) is not None
    assert "x.json" not in hub.files(REPO, "step-000002")


def _http_error(status: int, server_message: str | None = None):
    from huggingface_hub.errors import HfHubHTTPError, HTTPError

    httpx = importlib.import_module(HTTPError.__module__)  # huggingface_hub's HTTP client
    response = httpx.Response(status, request=httpx.Request("POST", "http://127.0.0.1/api/repos/create"))
    return HfHubHTTPError(f"{status} error", response=response, server_message=server_message)


def test_hub_errors_are_one_line_and_say_whose_fault_and_what_to_do():
    from huggingface_hub.errors import HTTPError

    refused = sync.hub_error(_http_error(403, "You don't have the rights\nsecond line"), "someorg/m", "creating")
    assert isinstance(refused, sync.PublishError) and "\n" not in str(refused)
    assert str(refused).startswith("the Hub refused creating someorg/m (HTTP 403: You don't have the rights): the "
                                   "token cannot write to the namespace 'someorg'")
    assert "--org NAMESPACE or --repo NAMESPACE/NAME" in str(refused)
    failed = sync.hub_error(_http_error(503), "someorg/m", "committing main to")
    assert isinstance(failed, sync.PublishFailed) and str(failed) == \
        "the Hub failed while committing main to someorg/m (HTTP 503)"
    httpx = importlib.import_module(HTTPError.__module__)
    lost = sync.hub_error(httpx.ConnectError("Connection refused"), "someorg/m", "reading")
    assert str(lost) == "the Hub failed while reading someorg/m (ConnectError: Connection refused)"

    def call():
        raise httpx.ConnectError("Connection refused")

    with pytest.raises(sync.PublishFailed, match="ConnectError"):
        sync.hub_call("someorg/m", "reading", call)
