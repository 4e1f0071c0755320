"""A loopback Hugging Face Hub for tests: the subset of the Hub HTTP API that huggingface_hub's upload and download
paths use, served on 127.0.0.1 by a thread. Test infrastructure only (depthbench never imports it).

Implemented (model repos; every upload is a "regular" upload: base64 file contents inside the commit, no LFS/xet):

* ``GET /api/whoami-v2``: the token decides the answer: ``hf_write...`` -> write role, ``hf_read...`` -> read
  role, anything else -> 401; the user ``tester`` is a member of the organisation ``aspect-ratio-scaling``;
* writes (create, commit, branches, delete) need a write token and a namespace the user can write to (``tester``,
  ``aspect-ratio-scaling``), else 403, as on the Hub;
* ``POST /api/repos/create``, ``DELETE /api/repos/delete``; ``GET /api/models/{repo}[/revision/{rev}]`` (model
  info with ``siblings``); ``GET /api/models?author=ORG`` (the listing of ``list_models``: private repositories only
  with a token, paginated by a ``Link: <...>; rel="next"`` header as on the Hub, ``PAGE_SIZE`` per page);
* ``GET /api/models/{repo}/tree/{rev}[/{path}]`` (recursive listing with git-blob oids), ``.../refs``,
  ``.../commits/{rev}`` (the history, newest first, ending with the repository's initial commit);
* ``POST /api/models/{repo}/preupload/{rev}`` and ``POST /api/models/{repo}/commit/{rev}`` (NDJSON: header with
  an optional ``parentCommit``, which must be the branch's head (else 412, as on the Hub), ``file``,
  ``deletedFile``, ``deletedFolder``);
* ``POST /api/models/{repo}/branch/{branch}`` (``startingPoint``: a branch or commit, default ``main``; 409 if it
  exists), ``DELETE /api/models/{repo}/branch/{branch}`` (404 if missing; the default branch cannot be deleted);
* ``HEAD``/``GET /{repo}/resolve/{rev}/{path}`` (``X-Repo-Commit``, ``ETag``, ``Content-Length``, ranges);
* ``POST /api/collections``, ``GET /api/collections/{slug}``, ``POST /api/collections/{slug}/items``;
* ``POST /api/validate-yaml`` (always valid: card *content* is checked by the tests with huggingface_hub's loaders).

Every request is recorded in ``server.requests`` as ``(method, path)``, so tests can assert what was (not) sent.
Faults: :meth:`HubServer.fail_write` makes the n-th write request from now (POST or DELETE other than
``validate-yaml``) fail with an HTTP error, either refused (nothing changes) or applied with the answer lost (the
change is made, the client sees the error: a timeout after the server acted); ``server.writes`` counts the writes.
:meth:`HubServer.fail_read` makes GET requests whose path matches a pattern fail (after ``skip`` good ones), so a
reader can be cut off in the middle of its work (``server.reads_failed`` counts them).
Usage: ``with HubServer() as hub: os.environ["HF_ENDPOINT"] = hub.url`` (set before huggingface_hub is imported in
a subprocess; in-process, pass ``endpoint=hub.url`` to ``HfApi``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Repo:
    repo_id: str
    private: bool = False
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # commit id -> {path: bytes}
    branches: dict[str, str] = field(default_factory=dict)  # branch -> commit id
    parents: dict[str, str | None] = field(default_factory=dict)  # commit id -> parent commit id
    titles: dict[str, str] = field(default_factory=dict)  # commit id -> commit title

    def __post_init__(self):
        initial = hashlib.sha1(f"init:{self.repo_id}".encode()).hexdigest()
        self.commits[initial] = {".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"}
        self.parents[initial] = None
        self.titles[initial] = "initial commit"
        self.branches["main"] = initial

    def add_commit(self, parent: str, files: dict[str, bytes], title: str) -> str:
        """Store a commit of ``files`` on top of ``parent``; returns its id (no branch moves)."""
        commit = hashlib.sha1(repr(sorted((p, git_blob_sha1(d)) for p, d in files.items())).encode()
                              + parent.encode() + str(len(self.commits)).encode()).hexdigest()
        self.commits[commit] = files
        self.parents[commit] = parent
        self.titles[commit] = title
        return commit

    def history(self, commit: str) -> list[str]:
        """``commit`` and its ancestors, newest first (the last one is the initial commit)."""
        out = []
        while commit is not None:
            out.append(commit)
            commit = self.parents.get(commit)
        return out

    def resolve(self, revision: str) -> str | None:
        revision = unquote(revision)
        if revision in self.branches:
            return self.branches[revision]
        return revision if revision in self.commits else None


class HubServer:
    """The loopback Hub (context manager); ``url`` is its endpoint, ``repos`` / ``collections`` its state."""

    def __init__(self):
        self.repos: dict[str, Repo] = {}
        self.collections: dict[str, dict] = {}
        self.requests: list[tuple[str, str]] = []
        self.writes = 0  # write requests so far (POST/DELETE, validate-yaml excluded)
        self.faults: dict[int, tuple[int, bool]] = {}  # write index -> (HTTP status, applied before failing)
        self.read_faults: list[list] = []  # [compiled pattern, good requests still to let through, HTTP status]
        self.reads_failed = 0
        self.lock = threading.Lock()
        hub = self

        class Handler(_Handler):
            server_hub = hub

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> HubServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def files(self, repo_id: str, revision: str = "main") -> dict[str, bytes]:
        repo = self.repos[repo_id]
        return dict(repo.commits[repo.resolve(revision)])

    def add_repo(self, repo_id: str, files: dict[str, bytes], private: bool = False) -> None:
        """Create ``repo_id`` with ``files`` on ``main`` directly (a repo "released" by someone else)."""
        repo = self.repos.setdefault(repo_id, Repo(repo_id, private=private))
        head = repo.branches["main"]
        repo.branches["main"] = repo.add_commit(head, {**repo.commits[head], **files}, f"release {time.time()}")

    def fail_read(self, pattern: str, skip: int = 0, status: int = 500) -> None:
        """Let ``skip`` GET/HEAD requests whose path matches ``pattern`` (a regex) through, then fail every further
        one with HTTP ``status`` (until :meth:`heal`)."""
        self.read_faults.append([re.compile(pattern), skip, status])

    def heal(self) -> None:
        """Remove every read fault."""
        self.read_faults.clear()

    def fail_write(self, index: int, status: int = 500, applied: bool = False) -> None:
        """Make the write request number ``index`` (0 = the next one) fail with HTTP ``status``; with ``applied``
        the server makes the change first and only the answer is an error."""
        self.faults[self.writes + index] = (status, applied)


class _Handler(BaseHTTPRequestHandler):
    server_hub: HubServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in separate writes: without it, ~40 ms per answer

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    # ------------------------------------------------------------------------------------------------ helpers
    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        return self.rfile.read(length) if length else b""

    _mute = False  # while an applied fault runs: the change is made, its answer is not sent

    def _send(self, status: int, body: bytes = b"", headers: dict | None = None, head: bool = False) -> None:
        if self._mute:
            return
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _json(self, obj, status: int = 200) -> None:
        self._send(status, json.dumps(obj).encode(), {"Content-Type": "application/json"})

    def _error(self, status: int, code: str, message: str, head: bool = False) -> None:
        body = json.dumps({"error": message}).encode()
        self._send(status, body, {"Content-Type": "application/json", "X-Error-Code": code,
                                  "X-Error-Message": message}, head=head)

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization", "")
        return auth[len("Bearer "):] if auth.startswith("Bearer ") else None

    WRITABLE_NAMESPACES = ("tester", "aspect-ratio-scaling")  # the user and its organisation (whoami-v2)

    def _can_write(self, repo_id: str | None = None) -> bool:
        """A write token, and (for a repository) a namespace the user may write to."""
        namespace = repo_id.split("/")[0] if repo_id and "/" in repo_id else "tester"
        return (self._token() or "").startswith("hf_write") and namespace in self.WRITABLE_NAMESPACES

    def _repo(self, repo_id: str, head: bool = False) -> Repo | None:
        repo = self.server_hub.repos.get(repo_id)
        if repo is None or (repo.private and not self._token()):
            self._error(404, "RepoNotFound", f"Repository {repo_id} not found", head=head)
            return None
        return repo

    # ------------------------------------------------------------------------------------------------ routing
    def do_HEAD(self) -> None:
        self._route("HEAD")

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    def _route(self, method: str) -> None:
        hub = self.server_hub
        url = urlparse(self.path)
        path, query = unquote(url.path), parse_qs(url.query)
        body = self._body() if method in ("POST", "DELETE") else b""
        with hub.lock:
            hub.requests.append((method, path))
            fault = None
            if method in ("POST", "DELETE") and path != "/api/validate-yaml":
                fault = hub.faults.pop(hub.writes, None)
                hub.writes += 1
            for read_fault in hub.read_faults if method in ("GET", "HEAD") else ():
                if read_fault[0].search(path):
                    if read_fault[1] > 0:
                        read_fault[1] -= 1
                        break
                    hub.reads_failed += 1
                    return self._error(read_fault[2], "InjectedFault", f"injected failure of {method} {path}",
                                       head=method == "HEAD")
            try:
                if fault is None:
                    return self._dispatch(method, path, query, body)
                status, applied = fault
                if applied:  # the change is made; the answer is lost
                    self._mute = True
                    try:
                        self._dispatch(method, path, query, body)
                    finally:
                        self._mute = False
                self._error(status, "InjectedFault", f"injected failure of {method} {path}")
            except Exception as exc:  # report server bugs to the client instead of hanging it
                self._error(500, "ServerError", f"{type(exc).__name__}: {exc}")

    def _dispatch(self, method: str, path: str, query: dict, body: bytes) -> None:
        hub = self.server_hub
        if path == "/api/whoami-v2":
            token = self._token()
            if not token or not token.startswith(("hf_write", "hf_read")):
                return self._error(401, "Unauthorized", "Invalid credentials in Authorization header")
            role = "write" if token.startswith("hf_write") else "read"
            return self._json({"type": "user", "name": "tester", "auth": {"type": "access_token", "accessToken":
                               {"displayName": "test", "role": role}},
                               "orgs": [{"name": "aspect-ratio-scaling", "roleInOrg": "write"}]})
        if path == "/api/validate-yaml":
            return self._json({"errors": [], "warnings": []})
        if path == "/api/repos/delete" and method == "DELETE":
            payload = json.loads(body or b"{}")
            repo_id = f"{payload.get('organization') or 'tester'}/{payload['name']}"
            if repo_id not in hub.repos:
                return self._error(404, "RepoNotFound", f"Repository {repo_id} not found")
            if not self._can_write(repo_id):
                return self._error(403, "Forbidden", f"You don't have the rights to delete {repo_id}")
            del hub.repos[repo_id]
            return self._send(200)
        if path == "/api/repos/create" and method == "POST":
            payload = json.loads(body or b"{}")
            repo_id = f"{payload['organization']}/{payload['name']}" if payload.get("organization") \
                else payload["name"]
            if not self._can_write(repo_id):
                namespace = payload.get("organization") or "tester"
                return self._error(403, "Forbidden", f"You don't have the rights to create a model under the "
                                                     f"namespace \"{namespace}\"")
            if repo_id in hub.repos:
                return self._send(409, json.dumps({"error": "You already created this model repo",
                                                   "url": f"{hub.url}/{repo_id}"}).encode(),
                                  {"Content-Type": "application/json"})
            private = bool(payload.get("private")) or payload.get("visibility") in ("private", "protected")
            hub.repos[repo_id] = Repo(repo_id, private=private)
            return self._json({"url": f"{hub.url}/{repo_id}", "name": repo_id})
        if path.startswith("/api/collections"):
            return self._collections(method, path, body)
        if path == "/api/models" and method == "GET":
            return self._list_models(query)
        match = re.match(r"^/api/models/([^/]+/[^/]+)(.*)$", path)
        if match:
            return self._model_api(method, match[1], match[2], query, body)
        match = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        if match and method in ("GET", "HEAD"):
            return self._resolve(method, match[1], match[2], match[3])
        return self._error(404, "NotFound", f"no route for {method} {path}")

    PAGE_SIZE = 50

    def _list_models(self, query: dict) -> None:
        hub = self.server_hub
        author = query.get("author", [None])[0]
        repos = [r for rid, r in sorted(hub.repos.items()) if (author is None or rid.split("/")[0] == author)
                 and (not r.private or self._token())]
        start = int(query.get("cursor", ["0"])[0])
        page = repos[start:start + self.PAGE_SIZE]
        headers = {"Content-Type": "application/json"}
        if start + self.PAGE_SIZE < len(repos):
            params = "&".join(f"{k}={v[0]}" for k, v in query.items() if k != "cursor")
            headers["Link"] = f'<{hub.url}/api/models?{params}&cursor={start + self.PAGE_SIZE}>; rel="next"'
        body = [{"id": r.repo_id, "modelId": r.repo_id, "private": r.private, "sha": r.branches["main"]} for r in page]
        self._send(200, json.dumps(body).encode(), headers)

    def _model_api(self, method: str, repo_id: str, rest: str, query: dict, body: bytes) -> None:
        hub = self.server_hub
        repo = self._repo(repo_id)
        if repo is None:
            return
        if method == "GET" and (rest == "" or rest.startswith("/revision/")):
            revision = rest[len("/revision/"):] if rest else "main"
            commit = repo.resolve(revision)
            if commit is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            files = repo.commits[commit]
            return self._json({"id": repo_id, "modelId": repo_id, "sha": commit, "private": repo.private,
                               "siblings": [{"rfilename": p} for p in sorted(files)]})
        match = re.match(r"^/tree/([^/]+)(?:/(.*))?$", rest)
        if method == "GET" and match:
            commit = repo.resolve(match[1])
            if commit is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {match[1]}")
            prefix = (match[2] or "").strip("/")
            entries, folders = [], set()
            for file, data in sorted(repo.commits[commit].items()):
                if prefix and not file.startswith(prefix + "/"):
                    continue
                relative = file[len(prefix) + 1:] if prefix else file
                if "/" in relative and query.get("recursive", ["false"])[0].lower() not in ("1", "true"):
                    folders.add(f"{prefix}/{relative.split('/')[0]}".strip("/"))
                    continue
                entries.append({"type": "file", "oid": git_blob_sha1(data), "size": len(data), "path": file})
            entries += [{"type": "directory", "oid": "0" * 40, "size": 0, "path": f} for f in sorted(folders)]
            return self._json(entries)
        if method == "GET" and rest == "/refs":
            return self._json({"branches": [{"name": b, "ref": f"refs/heads/{b}", "targetCommit": c}
                                            for b, c in repo.branches.items()], "tags": [], "converts": []})
        match = re.match(r"^/commits/([^/]+)$", rest)
        if method == "GET" and match:
            commit = repo.resolve(match[1])
            if commit is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {match[1]}")
            return self._json([{"id": c, "title": repo.titles.get(c, ""), "message": "", "date":
                                "2026-01-01T00:00:00.000Z", "authors": [{"user": "tester"}]}
                               for c in repo.history(commit)])
        if method not in ("POST", "DELETE"):
            return self._error(404, "NotFound", f"no route for {method} {rest}")
        if not self._can_write(repo_id):
            return self._error(403, "Forbidden", "You don't have the rights to write to this repo")
        match = re.match(r"^/branch/(.+)$", rest)
        if method == "DELETE" and match:
            branch = unquote(match[1])
            if branch not in repo.branches:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {branch}")
            if branch == "main":
                return self._error(403, "Forbidden", "You cannot delete the default branch")
            del repo.branches[branch]
            return self._send(200)
        if method != "POST":
            return self._error(404, "NotFound", f"no route for {method} {rest}")
        match = re.match(r"^/preupload/(.+)$", rest)
        if match:
            files = json.loads(body)["files"]
            commit = repo.resolve(match[1])
            current = repo.commits.get(commit, {}) if commit else {}
            return self._json({"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                                          "oid": git_blob_sha1(current[f["path"]]) if f["path"] in current
                                          else None} for f in files]})
        match = re.match(r"^/commit/(.+)$", rest)
        if match:
            branch = unquote(match[1])
            if branch not in repo.branches:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {branch}")
            head = repo.branches[branch]
            files = dict(repo.commits[head])
            title = ""
            for line in body.splitlines():
                if not line.strip():
                    continue
                item = json.loads(line)
                key, value = item["key"], item["value"]
                if key == "header":
                    title = value.get("summary", "")
                    parent = value.get("parentCommit")
                    if parent and not head.startswith(parent):
                        return self._error(412, "PreconditionFailed", "A commit has happened since. Please refresh "
                                                                      "and try again.")
                elif key == "file":
                    files[value["path"]] = base64.b64decode(value["content"])
                elif key == "deletedFile":
                    files.pop(value["path"], None)
                elif key == "deletedFolder":
                    folder = value["path"].rstrip("/") + "/"
                    files = {p: d for p, d in files.items() if not p.startswith(folder)}
                elif key == "lfsFile":
                    return self._error(400, "BadRequest", "the loopback Hub only accepts regular uploads")
            commit = repo.add_commit(head, files, title)
            repo.branches[branch] = commit
            return self._json({"commitUrl": f"{hub.url}/{repo_id}/commit/{commit}", "commitOid": commit,
                               "pullRequestUrl": None})
        match = re.match(r"^/branch/(.+)$", rest)
        if match:
            branch = unquote(match[1])
            if branch in repo.branches:
                return self._error(409, "Conflict", f"Branch {branch} already exists")
            start = json.loads(body or b"{}").get("startingPoint") or "main"
            commit = repo.resolve(start)
            if commit is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {start}")
            repo.branches[branch] = commit
            return self._json({})
        return self._error(404, "NotFound", f"no route for POST {rest}")

    def _resolve(self, method: str, repo_id: str, revision: str, file: str) -> None:
        head = method == "HEAD"
        repo = self._repo(repo_id, head=head)
        if repo is None:
            return
        commit = repo.resolve(revision)
        if commit is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", head=head)
        data = repo.commits[commit].get(file)
        if data is None:
            return self._error(404, "EntryNotFound", f"{file} does not exist on {revision}", head=head)
        headers = {"X-Repo-Commit": commit, "ETag": f'"{git_blob_sha1(data)}"',
                   "Content-Type": "application/octet-stream", "Accept-Ranges": "bytes"}
        status, payload = 200, data
        range_header = self.headers.get("Range")
        if range_header and not head:
            start = int(re.match(r"bytes=(\d+)-", range_header)[1])
            status, payload = 206, data[start:]
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        self._send(status, payload, headers, head=head)

    def _collections(self, method: str, path: str, body: bytes) -> None:
        hub = self.server_hub

        def view(c: dict) -> dict:
            return {**c, "items": [{**item, "position": i} for i, item in enumerate(c["items"])]}

        if path == "/api/collections" and method == "POST":
            payload = json.loads(body)
            if not self._can_write(f"{payload.get('namespace') or 'tester'}/collection"):
                return self._error(403, "Forbidden", "You don't have the rights to create a collection")
            for c in hub.collections.values():
                if c["title"] == payload["title"] and c["owner"]["name"] == payload["namespace"]:
                    return self._send(409, json.dumps({"error": "collection exists", "slug": c["slug"]}).encode(),
                                      {"Content-Type": "application/json"})
            slug = f"{payload['namespace']}/{re.sub(r'[^a-z0-9]+', '-', payload['title'].lower()).strip('-')}" \
                   f"-{len(hub.collections):024x}"
            hub.collections[slug] = {"slug": slug, "title": payload["title"], "owner": {"name": payload["namespace"]},
                                     "description": payload.get("description"), "items": [],
                                     "lastUpdated": "2026-01-01T00:00:00.000Z", "position": 0,
                                     "private": bool(payload.get("private")), "theme": "green", "upvotes": 0}
            return self._json(view(hub.collections[slug]))
        match = re.match(r"^/api/collections/(.+?)(/items)?$", path)
        if not match or match[1] not in hub.collections:
            return self._error(404, "NotFound", f"collection not found: {path}")
        collection = hub.collections[match[1]]
        if match[2] and method == "POST":
            if not self._can_write():
                return self._error(403, "Forbidden", "You don't have the rights to edit this collection")
            payload = json.loads(body)
            item = payload["item"]
            if any(i["id"] == item["id"] for i in collection["items"]):
                return self._error(409, "Conflict", "item already in collection")
            collection["items"].append({"_id": f"{len(collection['items']):024x}", "id": item["id"],
                                        "type": item["type"], "note": {"text": payload.get("note")}
                                        if payload.get("note") else None})
            return self._json(view(collection))
        if method == "GET":
            return self._json(view(collection))
        return self._error(404, "NotFound", f"no route for {method} {path}")
