"""Bringing a Hub repository to a planned state, so that nothing on the Hub claims more than it holds.

The plans (:class:`RepoPlan`: branches and their files) come from :mod:`depthbench.hub.publish`; this module reads
the remote side (each branch's head commit and files) and writes it:

* **A branch is always exactly one export.** An existing branch gets one commit (the Hub applies a commit whole)
  that adds the changed files and deletes stale ones, with ``parent_commit`` = the head it was compared with (the
  Hub refuses it if the branch moved meanwhile). A new branch is never created from ``main`` (which would serve
  the final model under the branch's name until its files arrive): its files are committed on a staging branch
  ``depthbench-staging-<branch>`` made from the repository's initial commit (huggingface_hub's documented way to
  an empty branch: ``create_branch(revision=<initial commit>)``), the branch is created at that commit, and the
  staging branch is deleted. An interruption at any point leaves the branch absent or exact.
* **Nothing half-created.** A repository created by this publish is deleted again when its ``main`` could not be
  published.
* **Hub errors are depthbench errors** (:func:`hub_error`): a 401/403 is :class:`PublishError` (bad input, exit
  code 2: the token cannot write there), any other HTTP error or a lost connection :class:`PublishFailed` (exit
  code 1), each one line naming the repository, what is complete and what to do.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from depthbench.errors import Failed


class PublishError(ValueError):
    """A run cannot be published as asked (bad folder, a name the Hub rejects, no/read-only token, a namespace the
    token cannot write to): bad input, exit code 2; nothing was uploaded. The message says why."""


# ================================================================================================ plans
@dataclass
class FilePlan:
    path: str  # path in the repository
    size: int
    status: str  # "new" | "changed" | "unchanged" | "unknown" (remote state not readable)
    local: str | None = None  # local file, or None when ``content`` holds the bytes
    content: bytes | None = None


@dataclass
class BranchPlan:
    branch: str
    export_dir: str
    files: list[FilePlan] = field(default_factory=list)
    deletions: list[str] = field(default_factory=list)

    @property
    def uploads(self) -> list[FilePlan]:
        return [f for f in self.files if f.status != "unchanged"]


@dataclass
class RepoPlan:
    repo_id: str
    source_dir: str
    run_dir: str | None
    branches: list[BranchPlan] = field(default_factory=list)
    exists: bool | None = None
    note: str = ""



def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _file_ids(path: str | None, content: bytes | None) -> tuple[str, str]:
    """(git blob sha1, sha256) of a local file or bytes."""
    if content is None:
        with open(path, "rb") as f:
            content = f.read()
    return git_blob_sha1(content), hashlib.sha256(content).hexdigest()


# ================================================================================================ remote state
STAGING_PREFIX = "depthbench-staging-"
"""A new branch is committed on ``<prefix><branch>`` (created from the repository's initial commit) and appears
under its own name only once that commit holds all its files; the staging branch is deleted right after."""


def remote_heads(api, repo_id: str) -> dict[str, str] | None:
    """``{branch: head commit}`` of ``repo_id``; ``None`` when the repository does not exist."""
    from huggingface_hub.errors import RepositoryNotFoundError

    try:
        refs = api.list_repo_refs(repo_id)
    except RepositoryNotFoundError:
        return None
    return {ref.name: ref.target_commit for ref in refs.branches}


def remote_files(api, repo_id: str, revision: str) -> dict[str, tuple[str | None, str | None]] | None:
    """``{path: (git blob sha1, lfs sha256)}`` at ``revision`` (a branch or commit); ``None`` if the repository or
    revision does not exist."""
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError
    from huggingface_hub.hf_api import RepoFile

    try:
        entries = api.list_repo_tree(repo_id, revision=revision, recursive=True)
        out = {}
        for entry in entries:
            if not isinstance(entry, RepoFile):
                continue  # a folder
            lfs = getattr(entry, "lfs", None)
            out[entry.path] = (getattr(entry, "blob_id", None), getattr(lfs, "sha256", None) if lfs else None)
        return out
    except (RepositoryNotFoundError, RevisionNotFoundError):
        return None


def diff_branch(plan: BranchPlan, remote: dict | None) -> None:
    """Mark each file new/changed/unchanged against ``remote`` and list remote files to delete."""
    if remote is None:
        for f in plan.files:
            f.status = "new"
        plan.deletions = []
        return
    local_paths = set()
    for f in plan.files:
        local_paths.add(f.path)
        if f.path not in remote:
            f.status = "new"
            continue
        sha1, sha256 = _file_ids(f.local, f.content)
        blob, lfs = remote[f.path]
        f.status = "unchanged" if (lfs == sha256 if lfs else blob == sha1) else "changed"
    plan.deletions = sorted(p for p in remote if p not in local_paths and p != ".gitattributes")


# ================================================================================================ Hub errors
class PublishFailed(Failed, RuntimeError):
    """The Hub failed while publishing (a 5xx answer, a lost connection): exit code 1. What was published is
    complete (no branch holds another revision's files); rerunning the command finishes the rest."""


def hub_error(exc: Exception, repo_id: str, doing: str) -> Exception:
    """The one-line error for a failed Hub request ``doing`` on ``repo_id``: :class:`PublishError` (bad input:
    the token may not write there) for 401/403, :class:`PublishFailed` for anything else."""
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    message = (getattr(exc, "server_message", None) or "").strip().splitlines()
    detail = f"HTTP {status}" if status else type(exc).__name__
    if message:
        detail += f": {message[0]}"
    elif not status:
        detail += f": {str(exc).strip().splitlines()[0] if str(exc).strip() else 'no answer'}"
    if status in (401, 403):
        namespace = repo_id.split("/")[0]
        return PublishError(f"the Hub refused {doing} {repo_id} ({detail}): the token cannot write to the namespace "
                            f"{namespace!r}; publish under a namespace you can write to (--org NAMESPACE or --repo "
                            f"NAMESPACE/NAME) or use a token with write access to {namespace!r} "
                            "(https://huggingface.co/settings/tokens)")
    return PublishFailed(f"the Hub failed while {doing} {repo_id} ({detail})")


def hub_call(repo_id: str, doing: str, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with Hub errors (HTTP answers, lost connections) turned into :func:`hub_error`."""
    from huggingface_hub.errors import HTTPError

    try:
        return fn(*args, **kwargs)
    except HTTPError as exc:
        raise hub_error(exc, repo_id, doing) from None


# ================================================================================================ writes
def _ops(branch: BranchPlan) -> list:
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    ops = [CommitOperationAdd(f.path, f.local if f.content is None else f.content) for f in branch.uploads]
    return ops + [CommitOperationDelete(p) for p in branch.deletions]


def _message(branch: BranchPlan) -> str:
    return f"depthbench publish: {branch.branch} ({len(branch.uploads)} files, {len(branch.deletions)} deleted)"


def update_branch(api, repo_id: str, branch: BranchPlan, head: str) -> str | None:
    """One commit on the existing ``branch`` (at ``head``) making it hold exactly the branch's files (the Hub
    applies a commit whole, and refuses it if the branch moved since ``head``); ``None`` when nothing changed."""
    diff_branch(branch, hub_call(repo_id, "reading", remote_files, api, repo_id, head))
    ops = _ops(branch)
    if not ops:
        return None
    info = hub_call(repo_id, f"committing {branch.branch} to", api.create_commit, repo_id, operations=ops,
                 revision=branch.branch, parent_commit=head, commit_message=_message(branch))
    return info.oid


def create_new_branch(api, repo_id: str, branch: BranchPlan, root: str) -> str:
    """Create ``branch`` so that it never exists without exactly its files: commit them on a staging branch made
    from the repository's initial commit ``root``, create ``branch`` at that commit, delete the staging branch.

    An interruption leaves ``branch`` absent; a staging branch left behind (if even its deletion failed) holds
    the initial commit or exactly the branch's files, and the next publish deletes it."""
    staging = STAGING_PREFIX + branch.branch
    hub_call(repo_id, f"creating the staging branch {staging} of", api.create_branch, repo_id, branch=staging,
          revision=root)
    try:
        diff_branch(branch, hub_call(repo_id, "reading", remote_files, api, repo_id, root))
        info = hub_call(repo_id, f"committing {branch.branch} to", api.create_commit, repo_id, operations=_ops(branch),
                     revision=staging, parent_commit=root, commit_message=_message(branch))
        hub_call(repo_id, f"creating the branch {branch.branch} of", api.create_branch, repo_id,
              branch=branch.branch, revision=info.oid)
    finally:
        try:
            api.delete_branch(repo_id, branch=staging)
        except Exception:  # noqa: BLE001 - harmless leftover (see above), removed by the next publish
            pass
    return info.oid


def _create_repo(api, repo_id: str, private: bool) -> bool:
    """Create ``repo_id``; ``True`` when this call created it, ``False`` when it existed."""
    from huggingface_hub.errors import HfHubHTTPError, HTTPError

    try:
        api.create_repo(repo_id, private=private, exist_ok=False, repo_type="model")
    except HTTPError as exc:
        if isinstance(exc, HfHubHTTPError) and exc.response.status_code == 409:
            return False
        error = hub_error(exc, repo_id, "creating")
        rerun = "; rerun the same command later" if isinstance(error, PublishFailed) else ""
        raise type(error)(f"{error}; nothing was uploaded{rerun}") from None
    return True


def execute_repo(api, plan: RepoPlan, private: bool) -> list[str]:
    """Create the repository and bring every branch of ``plan`` to exactly its files (one commit per changed
    branch; new branches through :func:`create_new_branch`); returns the commit ids.

    On a failure the error says what is complete; a repository this call created is deleted again unless its
    ``main`` was published (so nothing is left half-created)."""
    from tqdm.auto import tqdm

    created = _create_repo(api, plan.repo_id, private)
    done: list[str] = []
    commits = []
    try:
        heads = hub_call(plan.repo_id, "reading the branches of", remote_heads, api, plan.repo_id) or {}
        for stale in sorted(b for b in heads if b.startswith(STAGING_PREFIX)):  # left by an interrupted publish
            hub_call(plan.repo_id, f"deleting the staging branch {stale} of", api.delete_branch, plan.repo_id,
                  branch=stale)
        root = None
        for branch in tqdm(plan.branches, desc=f"publish {plan.repo_id}", unit="branch"):
            if branch.branch in heads:
                oid = update_branch(api, plan.repo_id, branch, heads[branch.branch])
            else:
                if root is None:
                    history = hub_call(plan.repo_id, "reading the history of", api.list_repo_commits, plan.repo_id)
                    root = history[-1].commit_id
                oid = create_new_branch(api, plan.repo_id, branch, root)
            commits += [oid] if oid else []
            done.append(branch.branch)
    except (PublishError, PublishFailed) as exc:
        raise type(exc)(f"{exc}; {_state(api, plan, done, created, rerun=isinstance(exc, PublishFailed))}") from None
    except BaseException:  # anything else (Ctrl-C, a local read error): still nothing half-created
        if created and "main" not in done:
            _delete_repo(api, plan.repo_id)
        raise
    return commits


def _delete_repo(api, repo_id: str) -> bool:
    """Delete ``repo_id`` (created by this publish); ``False`` when that failed too."""
    try:
        api.delete_repo(repo_id, missing_ok=True)
    except Exception:  # noqa: BLE001 - the caller says what is left
        return False
    return True


def _state(api, plan: RepoPlan, done: list[str], created: bool, rerun: bool) -> str:
    """What an interrupted :func:`execute_repo` left on the Hub, and (for a failure of the Hub) what to do."""
    if created and "main" not in done:
        left = ("the repository just created was deleted again: nothing is left on the Hub"
                if _delete_repo(api, plan.repo_id) else
                "the repository just created could not be deleted: it holds its initial commit or exactly this "
                "publish's main (delete it, or rerun)")
        return left + ("; rerun the same command to publish" if rerun else "")
    pending = [b.branch for b in plan.branches if b.branch not in done]
    complete = f"complete on the Hub: {', '.join(done)}; " if done else ""
    advice = "; rerun the same command to finish (only what is missing is uploaded)" if rerun else ""
    return (f"{complete}not published: {', '.join(pending)} (each absent or as before, never holding another "
            f"revision's files){advice}")
