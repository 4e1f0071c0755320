"""``depthbench publish``: upload a run, a sweep or a converted model to the Hugging Face Hub.

    depthbench publish runs/hc-L24                                   # final/ -> <your user>/<default name>
    depthbench publish runs/hc-L24 --repo aspect-ratio-scaling/my-hc --private --revisions
    depthbench publish runs/400m                                     # a sweep: every finished run + a collection
    depthbench publish converted/preln-L24 --dry-run                 # a `depthbench convert` output (NAME-hf)

* **What goes where.** A run's ``final/`` export goes to ``main`` with a freshly rendered model card
  (:mod:`depthbench.cards`; the run folder is never written to). With ``--revisions`` every checkpoint export
  (``checkpoints/ckpt-NNNNNN/hf``) goes to the branch ``step-NNNNNN``, so
  ``from_pretrained(repo, revision="step-001000")`` loads that step (the convention of Pythia, arXiv 2304.01373).
* **Names.** The default repository follows the study's convention
  ``<namespace>/<arch>-lr<peak lr>-llama-<budget>-L<depth>-pretrain`` (:mod:`depthbench.repo_names`); a converted
  release is re-published as ``<name>-hf``. The namespace is ``--org`` (also spelled ``--namespace``), else the
  user the token belongs to (``whoami``); a dry run without a usable token asks for ``--org``.
* **Only what changed.** Each branch's remote files are listed first (git blob sha1 for regular files, sha256 for
  LFS/xet ones); one commit per branch adds the changed files and deletes stale ones, and an unchanged branch makes
  no commit. ``--dry-run`` prints that plan (repositories, branches, files, sizes, new/changed/unchanged) and
  writes nothing (it reads the remote state when it can).
* **Sweeps.** ``SWEEP_DIR`` (a folder with ``sweep.json``) publishes every finished run and gathers them in a Hub
  collection titled after the sweep; the sweep's ``report.md`` (as the README), every figure it links,
  ``report.html`` and the results CSVs go to a README-only model repository ``<org>/<sweep>-sweep-report`` (a
  collection description is limited to a line), which the collection lists first. With several seeds
  (:func:`sweep_seeds`) each run's name ends in ``-s<seed>``: one repository per seed.
* **One place per run.** A plan in which two runs map to the same repository and branch is refused before
  anything is read or written, naming both (:func:`check_one_place_each`).
* **Authentication** is huggingface_hub's own (``HF_TOKEN``, ``hf auth login``). A missing, invalid or read-only
  token, a namespace the token cannot write to, or a repository name the Hub would reject (checked locally with
  huggingface_hub's validator, in dry runs too) is an error before anything is uploaded.
* **Failures** (:mod:`depthbench.hub.sync`): every branch either does not exist or holds exactly its own export,
  whatever fails when (a new branch appears only once its files are committed); a repository created by the
  failed run is removed again if its ``main`` did not make it; the error is one line naming the repository, what
  is complete and what to do (exit code 2 for a refusal (401/403), 1 for a failure of the Hub: rerun).
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass

from depthbench import atomic, runs
from depthbench.hub.convert import CONVERSION_RECORD  # written by depthbench convert next to the converted model
from depthbench.hub.sync import (  # the plans, their upload and the errors of publishing
    BranchPlan,
    FilePlan,
    PublishError,
    PublishFailed,
    RepoPlan,
    diff_branch,
    execute_repo,
    hub_call,
    remote_files,
    remote_heads,
)

CARD_FILES = ("README.md", "loss_curve.png")




@dataclass
class SweepPlan:
    title: str
    namespace: str
    description: str
    report: RepoPlan | None


# ================================================================================================ local side
def run_exports(run_dir: str, revisions: bool) -> list[tuple[str, str]]:
    """``[(branch, export dir)]``: ``main`` <- ``final/``, and with ``revisions`` ``step-NNNNNN`` <- each
    checkpoint's ``hf/`` export."""
    final = os.path.join(run_dir, runs.FINAL)
    if not os.path.isfile(os.path.join(final, "config.json")):
        raise PublishError(f"{run_dir} has no final/ export (final/config.json): only finished runs are published "
                           "(finish or resume the run first)")
    out = [("main", final)]
    if revisions:
        for ckpt in sorted(glob.glob(os.path.join(run_dir, runs.CHECKPOINTS, runs.CHECKPOINT_PREFIX + "*"))):
            match = re.fullmatch(runs.CHECKPOINT_PREFIX + r"(\d+)", os.path.basename(ckpt))
            if match and os.path.isfile(os.path.join(ckpt, runs.CHECKPOINT_EXPORT, "config.json")):
                out.append((f"step-{int(match[1]):06d}", os.path.join(ckpt, runs.CHECKPOINT_EXPORT)))
    return out


def run_seed(run_dir: str) -> int | None:
    """The seed a run trained with (its ``run_config.json``'s ``train.seed``; else its sweep folder name's)."""
    run_config = atomic.read_json(os.path.join(run_dir, runs.RUN_CONFIG)) or {}
    seed = run_config.get("config", {}).get("train", {}).get("seed")
    if seed is None:
        run_id = runs.RunId.parse(os.path.basename(os.path.normpath(run_dir)))
        seed = run_id.seed if run_id else None
    return seed


def default_repo_for(source_dir: str, run_dir: str | None, org: str, with_seed: bool = False) -> str:
    """The organisation's name for a run (from its config, parameter count, depth and LR; with ``with_seed`` also
    its seed, :func:`run_seed`) or a converted model."""
    from depthbench.repo_names import converted_repo_name, default_repo_name

    record = atomic.read_json(os.path.join(source_dir, CONVERSION_RECORD))
    if record:
        return converted_repo_name(record["source_repo"], org)
    config = atomic.read_json(os.path.join(source_dir, "config.json")) or {}
    from depthbench.cards import arch_for, shape_table

    arch = arch_for(config)
    shape = shape_table(arch, config)
    lr = None
    run_config = atomic.read_json(os.path.join(run_dir, runs.RUN_CONFIG)) if run_dir else None
    if run_config:
        lr = run_config.get("config", {}).get("optim", {}).get("lr")
    seed = run_seed(run_dir) if with_seed and run_dir else None
    return default_repo_name(arch.id, shape["counts"]["total"], shape["L"], lr, org=org, seed=seed)


def local_files(export_dir: str, card: dict[str, bytes]) -> list[FilePlan]:
    """Every file of ``export_dir`` (temporary ``.tmp`` files skipped), the export's own card replaced by ``card``."""
    files = []
    for root, _, names in os.walk(export_dir):
        for name in sorted(names):
            full = os.path.join(root, name)
            rel = os.path.relpath(full, export_dir).replace(os.sep, "/")
            if rel in card or name.endswith(".tmp"):
                continue
            files.append(FilePlan(rel, os.path.getsize(full), "new", local=full))
    files += [FilePlan(name, len(data), "new", content=data) for name, data in card.items()]
    return sorted(files, key=lambda f: f.path)


# ================================================================================================ plan + upload
def check_auth(api) -> tuple[str, set[str] | None]:
    """The user name of the token huggingface_hub finds (``HF_TOKEN``, ``hf auth login``) and the namespaces it
    may write to (the user's and its organisations' where its role is not ``read``; ``None`` if unknown); raises
    :class:`PublishError` for a missing, invalid or read-only token."""
    from huggingface_hub.errors import HfHubHTTPError, HTTPError, LocalTokenNotFoundError

    try:
        if api.token is False:
            raise LocalTokenNotFoundError("token=False")
        info = api.whoami()
    except LocalTokenNotFoundError:
        raise PublishError("no Hugging Face token found: set HF_TOKEN or run `hf auth login` (a token with write "
                           "access to the target organisation is needed); nothing was uploaded") from None
    except HfHubHTTPError as exc:
        if exc.response.status_code in (401, 403):
            raise PublishError(f"the Hugging Face token was rejected ({exc.response.status_code}): set a valid "
                               "HF_TOKEN or run `hf auth login`; nothing was uploaded") from None
        raise PublishFailed(f"the Hub failed to check the token (HTTP {exc.response.status_code}); nothing was "
                            "uploaded: rerun later") from None
    except HTTPError as exc:
        raise PublishFailed(f"cannot reach the Hub ({type(exc).__name__}: {exc}); nothing was uploaded: check the "
                            "connection (HF_ENDPOINT) and rerun") from None
    role = ((info.get("auth") or {}).get("accessToken") or {}).get("role")
    if role == "read":
        raise PublishError(f"the Hugging Face token of {info.get('name')!r} is read-only: create a token with write "
                           "access (https://huggingface.co/settings/tokens); nothing was uploaded")
    orgs = info.get("orgs")
    if not info.get("name") or not isinstance(orgs, list):
        return info.get("name", ""), None
    writable = {info["name"]} | {o.get("name") for o in orgs if o.get("roleInOrg") != "read"}
    return info["name"], writable


def default_namespace(api, user: str = "") -> str:
    """The namespace of default repository names when ``--org`` is not given: the user the token belongs to
    (``user`` when :func:`check_auth` already asked ``whoami``; a dry run asks here). Without a usable token (a dry
    run offline or logged out) there is no default: a :class:`PublishError` asks for ``--org``. The study's
    organisation is never the default (only its members can write to it)."""
    if user:
        return user
    try:
        name, _ = check_auth(api)
    except (PublishError, PublishFailed) as exc:
        raise PublishError(f"no namespace for the repository names: pass --org NAMESPACE (your user or an "
                           f"organisation you can write to), or log in (HF_TOKEN, `hf auth login`) to default to "
                           f"your user name ({str(exc).split(':')[0]}); nothing was uploaded") from None
    if not name:
        raise PublishError("the Hub did not say whose token this is: pass --org NAMESPACE; nothing was uploaded")
    return name


def check_repo_id(repo_id: str, what: str) -> None:
    """A :class:`PublishError` when the Hub would reject ``repo_id`` as a name (huggingface_hub's own validator:
    ``NAMESPACE/NAME``, letters, digits, ``-_.``, no ``--``/``..``, at most 96 characters per part)."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        if repo_id.count("/") != 1:
            raise HFValidationError(f"it must be NAMESPACE/NAME, e.g. aspect-ratio-scaling/my-model: '{repo_id}'")
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise PublishError(f"{what} {repo_id!r} is not a valid Hub repository id ({exc}); nothing was "
                           "uploaded") from None


def plan_repo(api, source_dir: str, run_dir: str | None, repo_id: str, revisions: bool, lm_eval: dict | None,
              read_remote: bool = True) -> RepoPlan:
    """The upload plan of one run (or converted model) ``source_dir`` into ``repo_id``."""
    from depthbench.cards import card_files

    exports = run_exports(run_dir, revisions) if run_dir else [("main", source_dir)]
    plan = RepoPlan(repo_id, source_dir, run_dir)
    for branch, export_dir in exports:
        if run_dir:
            card = card_files(export_dir, run_dir, repo_id, revision=branch, lm_eval=lm_eval)
        else:  # a converted model: keep its own card (it names the source checkpoint)
            card = {}
        plan.branches.append(BranchPlan(branch, export_dir, local_files(export_dir, card)))
    if read_remote:
        read_remote_state(api, plan)
    return plan


def read_remote_state(api, plan: RepoPlan) -> None:
    """Diff every branch of ``plan`` against the Hub (a branch that does not exist yet: every file is new); when
    the remote state cannot be read (offline, no access), the files are "unknown" and the plan says why."""
    try:
        heads = remote_heads(api, plan.repo_id)
        plan.exists = heads is not None
        for branch in plan.branches:
            head = (heads or {}).get(branch.branch)
            diff_branch(branch, remote_files(api, plan.repo_id, head) if head else None)
    except Exception as exc:  # offline, no access, ...: the plan says "unknown" (the upload re-reads the state)
        plan.note = f"remote state unreadable: {type(exc).__name__}"
        plan.exists = None
        for branch in plan.branches:
            for f in branch.files:
                f.status = "unknown"


REPORT_EXTRAS = (runs.REPORT_PAGE, runs.RESULTS_CSV, runs.EVAL_TABLE)
"""Files of a sweep folder that go to its report repository beside ``report.md`` and its figures, when present."""
_FIGURE_LINE = re.compile(r"^!\[[^\]]*\]\(([^)\s]+)\)\s*$", re.M)


def report_upload_files(sweep_dir: str) -> list[str]:
    """The files of the sweep's report repository, relative to ``sweep_dir``: ``report.md`` (the README), every
    figure it links (so each renders on the Hub) and :data:`REPORT_EXTRAS`. A linked figure that is missing or
    outside the folder is a :class:`PublishError` (the README would show a broken image): rebuild with
    ``depthbench report``."""
    report = os.path.join(sweep_dir, runs.REPORT)
    if not os.path.isfile(report):
        return []
    with open(report, encoding="utf-8") as f:
        figures = list(dict.fromkeys(_FIGURE_LINE.findall(f.read())))
    for name in figures:
        inside = not os.path.isabs(name) and ".." not in name.replace("\\", "/").split("/")
        if not inside or not os.path.isfile(os.path.join(sweep_dir, name)):
            raise PublishError(f"{report} links the figure {name!r}, which is not in the sweep folder: rebuild the "
                               f"report with `depthbench report {sweep_dir}` (or the command that wrote that "
                               "section); nothing was uploaded")
    extras = [name for name in REPORT_EXTRAS if os.path.isfile(os.path.join(sweep_dir, name))]
    return [runs.REPORT, *figures, *extras]


def _sweep_plan(sweep_dir: str, org: str, repos: list[RepoPlan]) -> SweepPlan:
    name = os.path.basename(os.path.abspath(sweep_dir))
    archs = runs.sweep_definition(sweep_dir).get("archs") or sorted(
        {run.arch for run in runs.sweep_runs(sweep_dir, finished=True) if run.arch})
    description = f"depthbench sweep {name}: {len(repos)} runs ({', '.join(archs)}); report: {org}/{name}-sweep-report"
    report_files: dict[str, bytes] = {}
    for file in report_upload_files(sweep_dir):
        with open(os.path.join(sweep_dir, file), "rb") as f:
            report_files["README.md" if file == runs.REPORT else file] = f.read()
    report = None
    if report_files:
        links = "\n".join(f"- [{r.repo_id}](https://huggingface.co/{r.repo_id})" for r in repos)
        header = (f"---\nlicense: apache-2.0\ntags:\n- depthbench\n- arxiv:2609.32534\n---\n\n"
                  f"# depthbench sweep `{name}`\n\nModels of this sweep (DepthBench, arXiv 2609.32534):\n\n{links}\n\n")
        report_files["README.md"] = header.encode() + report_files.get("README.md", b"")
        report = RepoPlan(f"{org}/{name}-sweep-report", sweep_dir, None,
                          [BranchPlan("main", sweep_dir, [FilePlan(p, len(d), "new", content=d)
                                                          for p, d in sorted(report_files.items())])])
    return SweepPlan(f"depthbench {name}"[:59], org, description[:150], report)


def publish_targets(path: str, repo: str | None, revisions: bool) -> list[tuple[str, str | None]]:
    """``[(model folder, run folder or None)]`` to publish for ``path`` (a run, a sweep or an HF folder); a
    :class:`PublishError` naming what is wrong otherwise (an unfinished run: it has no final export yet)."""
    if not os.path.isdir(path):
        raise PublishError(f"{path} is not a folder: give a run folder, a sweep folder or a converted model folder")
    if runs.is_sweep(path):
        if repo:
            raise PublishError("--repo names one repository; a sweep publishes one per run (use --org instead)")
        targets = [(run.model_dir, run.run_dir) for run in runs.sweep_runs(path, finished=True)]
        if not targets:
            raise PublishError(f"sweep {path} has no finished run with a final/ export: nothing to publish")
        return targets
    if os.path.isfile(os.path.join(path, "config.json")) and not os.path.isdir(os.path.join(path, runs.FINAL)):
        if revisions:
            raise PublishError("--revisions needs a training run folder (checkpoints/); this is a single HF folder")
        return [(path, None)]  # an HF folder (e.g. a depthbench convert output)
    if os.path.isdir(os.path.join(path, runs.FINAL)) or runs.is_run(path):
        final = runs.final_dir(path)
        if final is None:
            raise PublishError(f"{path} is a training run with no final export yet ({os.path.join(path, runs.FINAL)}"
                               "/config.json is missing): only finished runs are published; finish or resume the "
                               "run first, or publish one of its checkpoints' hf/ folders")
        return [(final, path)]
    raise PublishError(f"{path} is neither a run folder (final/, run_config.json), a sweep folder (sweep.json) "
                       "nor an HF model folder (config.json)")


def sweep_seeds(sweep_dir: str, targets: list[tuple[str, str | None]]) -> set[int]:
    """The seeds of a sweep: its definition's and those its published runs trained with. With more than one,
    every run's repository name carries its seed (``...-pretrain-s<seed>``), also when only one seed finished
    so far, so that a name does not change as the other seeds finish."""
    seeds = {int(s) for s in runs.sweep_definition(sweep_dir).get("seeds") or []}
    return seeds | {seed for _, run_dir in targets if run_dir and (seed := run_seed(run_dir)) is not None}


def check_one_place_each(targets: list[tuple[str, str | None]], repo_ids: list[str], revisions: bool,
                         report_repo: str | None = None) -> None:
    """A :class:`PublishError` before anything is read or written when two runs (or a run and the sweep's report)
    would be published to the same place (repository + branch): the second would replace the first's files."""
    places: dict[tuple[str, str], str] = {}
    if report_repo:
        places[(report_repo, "main")] = "the sweep's report"
    for (source_dir, run_dir), repo_id in zip(targets, repo_ids):
        who = run_dir or source_dir
        branches = [b for b, _ in run_exports(run_dir, revisions)] if run_dir else ["main"]
        for branch in branches:
            other = places.setdefault((repo_id, branch), who)
            if other != who:
                raise PublishError(f"{other} and {who} would both be published to {repo_id} (branch {branch}): "
                                   "one would replace the other's files. Give each run its own name (runs that "
                                   "differ only in a setting the name does not carry, e.g. copies of one run with "
                                   "the same seed, cannot share a sweep's publish); nothing was uploaded")


def check_namespaces(repo_ids: list[str], user: str, writable: set[str] | None) -> None:
    """A :class:`PublishError` before anything is written when a repository's namespace is neither the user's
    nor one of its organisations' (the Hub would answer 403)."""
    if writable is None:
        return
    for repo_id in repo_ids:
        namespace = repo_id.split("/")[0]
        if namespace not in writable:
            raise PublishError(f"the token of {user!r} cannot write to the namespace {namespace!r} of {repo_id} "
                               f"(it can write to {', '.join(sorted(writable))}): publish under one of those (--org "
                               f"NAMESPACE or --repo NAMESPACE/NAME) or use a token of a member of {namespace!r}; "
                               "nothing was uploaded")


def publish(path: str, repo: str | None = None, private: bool = False, revisions: bool = False,
            dry_run: bool = False, org: str | None = None, api=None, lm_eval_json: str | None = None,
            out=None) -> dict:
    """Publish a run folder, a sweep folder or a converted model folder; returns a summary dict.

    ``repo`` (runs only) overrides the default name; ``org`` the namespace of default names (default: the token's
    user, :func:`default_namespace`). ``api`` is an ``HfApi`` (default: huggingface_hub's, honouring ``HF_ENDPOINT`` and
    ``HF_TOKEN``). With ``dry_run`` nothing is written anywhere; the plan is printed to ``out`` (stdout).

    Raises:
        PublishError: Bad input (exit code 2): the folder, a repository name the Hub rejects, a missing or
            read-only token, a namespace the token cannot write to. Nothing was uploaded.
        PublishFailed: The Hub failed midway (exit code 1); the message says which branches are complete (no
            branch ever holds another revision's files) and to rerun.
    """
    import sys

    from huggingface_hub import HfApi

    out = out or sys.stdout
    api = api or HfApi()
    if repo is not None:
        check_repo_id(repo, "--repo")
    if org is not None:
        check_repo_id(f"{org}/name", "--org namespace")
    targets = publish_targets(path, repo, revisions)
    lm_eval = atomic.read_json(lm_eval_json) if lm_eval_json else None
    user, writable = check_auth(api) if not dry_run else ("", None)
    namespace = org or (None if repo else default_namespace(api, user))
    sweep = runs.is_sweep(path)
    with_seed = sweep and len(sweep_seeds(path, targets)) > 1
    repo_ids = [repo or default_repo_for(source_dir, run_dir, namespace, with_seed)
                for source_dir, run_dir in targets]
    for repo_id in repo_ids:
        check_repo_id(repo_id, "the repository name")
    report_repo = f"{namespace}/{os.path.basename(os.path.abspath(path))}-sweep-report" if sweep else None
    check_one_place_each(targets, repo_ids, revisions, report_repo)
    if not dry_run:
        check_namespaces(repo_ids, user, writable)  # a sweep's report and collection share its runs' namespace
    plans = [plan_repo(api, source_dir, run_dir, repo_id, revisions, lm_eval)
             for (source_dir, run_dir), repo_id in zip(targets, repo_ids)]
    sweep_plan = _sweep_plan(path, namespace, plans) if sweep else None
    if sweep_plan and sweep_plan.report:
        check_repo_id(sweep_plan.report.repo_id, "the sweep report's repository name")
        read_remote_state(api, sweep_plan.report)
    print_plan(plans, sweep_plan, private, dry_run, out)
    result = {"repos": [p.repo_id for p in plans], "dry_run": dry_run, "commits": {}, "collection": None}
    if dry_run:
        return result
    _execute_all(api, plans, sweep_plan, private, result, out)
    print(f"published as {user or 'the token owner'}: " + ", ".join(result["repos"]), file=out)
    return result


def _execute_all(api, plans: list[RepoPlan], sweep_plan: SweepPlan | None, private: bool, result: dict,
                 out) -> None:
    """Upload every plan (then the sweep's report and collection); a failure names the repositories that are
    already complete."""
    all_plans = plans + ([sweep_plan.report] if sweep_plan and sweep_plan.report else [])
    for i, plan in enumerate(all_plans):
        try:
            result["commits"][plan.repo_id] = execute_repo(api, plan, private)
        except (PublishError, PublishFailed) as exc:
            if i:
                raise type(exc)(f"{exc} (already complete: {', '.join(p.repo_id for p in all_plans[:i])})") from None
            raise
    if sweep_plan:
        name = f"{sweep_plan.namespace}/{sweep_plan.title}"
        collection = hub_call(name, "creating the collection", api.create_collection, sweep_plan.title,
                           namespace=sweep_plan.namespace, description=sweep_plan.description, private=private,
                           exists_ok=True)
        for item in [p.repo_id for p in all_plans[len(plans):]] + [p.repo_id for p in plans]:
            hub_call(name, f"adding {item} to the collection", api.add_collection_item, collection.slug,
                  item_id=item, item_type="model", exists_ok=True)
        result["collection"] = collection.slug
        print(f"collection: {collection.url}", file=out)


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def print_plan(plans: list[RepoPlan], sweep: SweepPlan | None, private: bool, dry_run: bool, out) -> None:
    print(f"{'plan (dry run: nothing is written)' if dry_run else 'plan'}:", file=out)
    for plan in plans + ([sweep.report] if sweep and sweep.report else []):
        state = {True: "exists", False: "will be created", None: "unknown"}[plan.exists]
        note = f"; {plan.note}" if plan.note else ""
        print(f"  {plan.repo_id} ({'private' if private else 'public'}; {state}{note})", file=out)
        for branch in plan.branches:
            size = sum(f.size for f in branch.uploads)
            print(f"    {branch.branch}: {len(branch.uploads)} of {len(branch.files)} files to upload "
                  f"({_size(size)}), {len(branch.deletions)} to delete  <- {branch.export_dir}", file=out)
            for f in branch.files:
                print(f"      {f.status:9s} {f.path} ({_size(f.size)})", file=out)
            for p in branch.deletions:
                print(f"      delete    {p}", file=out)
    if sweep:
        print(f"  collection {sweep.namespace}/{sweep.title!r}: {len(plans)} models"
              f"{' + the report repository' if sweep.report else ''}", file=out)
