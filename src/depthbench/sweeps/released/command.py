"""``depthbench released``: the study's released checkpoints, listed and re-measured.

    depthbench released sync [--endpoint URL] [--token TOKEN]     # the organisation's Hub listing -> local overlay
    depthbench released list [--arch hc,attnres] [--size 400M] [--depth 16,32] [--tier 400M-deep] [--json]
    depthbench released eval --arch pre_ln,hc,attnres --size 400M --data data/heldout -o runs/released-400m \\
        [--tasks depthbench_nll] [--step 7600] [--max-tokens N] [--repo NAME ...]

``HF_ENDPOINT`` selects a Hub mirror and ``HF_HUB_CACHE`` the download cache (both read when the command runs);
conversions are kept in ``$HF_HOME/depthbench/converted`` (``--cache-dir`` to change).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import textwrap


def _names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _depths(text: str) -> list[int]:
    try:
        return [int(t) for t in _names(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--depth takes layer counts separated by commas, e.g. 16,32; got {text!r}"
                                         ) from None


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def _selection(args: argparse.Namespace) -> dict:
    return {"archs": args.arch, "sizes": args.size, "depths": args.depth, "tiers": args.tier}


def _catalogue(args: argparse.Namespace):
    """The shipped catalogue (or ``--catalogue``) merged with the last Hub listing (``--listing``, default the
    one ``released sync`` wrote in the HF cache; none with ``--no-listing``)."""
    from depthbench.hub.catalogue import Catalogue
    from depthbench.hub.listing import load_listing

    catalogue = Catalogue.load(args.catalogue)
    return catalogue if args.no_listing else catalogue.with_listing(load_listing(args.listing))


def _cmd_released(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``depthbench released`` without a sub-command: its help, exit code 2."""
    parser.print_help()
    return 2


def _cmd_released_sync(args: argparse.Namespace) -> int:
    from depthbench.hub.listing import sync

    sync(endpoint=args.endpoint or os.environ.get("HF_ENDPOINT") or None, org=args.org, token=args.token,
         path=args.listing)
    return 0


def _cmd_released_list(args: argparse.Namespace) -> int:
    from depthbench.hub.catalogue import format_listing

    catalogue = _catalogue(args)
    releases = catalogue.select(**_selection(args))
    print(json.dumps([r.record() for r in releases], indent=1) if args.json
          else format_listing(releases, catalogue.facts))
    return 0


def _cmd_released_eval(args: argparse.Namespace) -> int:
    from depthbench.sweeps.released.measure import Hub, Measurement, Tasks, evaluate_releases
    from depthbench.sweeps.released.selection import select_targets

    catalogue = _catalogue(args)
    if args.repo is None and not any(_selection(args).values()):
        raise ValueError("choose the releases: --arch / --size / --depth / --tier (see `depthbench released list`) "
                         "or --repo NAME")
    targets = select_targets(catalogue, **_selection(args), repos=args.repo, step=args.step, best_lr=args.best_lr)
    from depthbench.sweeps.released.cost import format_cost, selection_cost

    cost = selection_cost(targets, seq_len=args.seq_len or 2048)
    print(format_cost(cost))
    if cost["download_bytes"] > args.confirm_above * 1e9 and not args.yes:
        raise ValueError(f"this selection downloads about {cost['download_bytes'] / 1e9:.1f} GB (more than "
                         f"--confirm-above {args.confirm_above:g} GB): pass --yes to go ahead, or select fewer "
                         "releases")
    measurement = Measurement(data=args.data, split=args.split, seq_len=args.seq_len, max_tokens=args.max_tokens,
                              batch_size=args.batch_size, device=args.device, dtype=args.dtype, step=args.step)
    hub = Hub(endpoint=os.environ.get("HF_ENDPOINT") or None, hub_cache_dir=os.environ.get("HF_HUB_CACHE") or None,
              cache_dir=args.cache_dir, readout=args.readout)
    tasks = Tasks(_names(args.tasks) if args.tasks else [], limit=args.limit, batch_size=args.batch_size,
                  data_dir=args.nll_data_dir, include_path=args.include_path)
    print(f"{len(targets)} release(s) -> {args.output}")
    paths = evaluate_releases(targets, args.output, measurement, hub, tasks,
                              batch=catalogue.facts.get("batch"))
    print()
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


FIGURES = """which selection reproduces which figure of the study (arXiv 2609.32534):
  Fig. 2 left   --size 400M (tiers 400M and 400M-deep): validation loss vs d/L at 400M, L16-L70
  Fig. 2 right  --tier 300M-backbone (with the 400M L24 / L32 runs): the fixed 300M backbone
  Fig. 4        --size 400M --tasks depthbench_nll: completion NLL by domain (Coding, STEM, Math)
  Fig. 3        --tier 200M,300M,500M,1.6B: the scale ladders (no numbers published; nothing to compare)
  each at its best LR: --best-lr measures every LR `depthbench released sync` found"""


def _w(text: str) -> str:
    """``text`` wrapped for a raw-formatted description (which keeps :data:`FIGURES`' table as written)."""
    return textwrap.fill(text, width=100)


def _add_selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--arch", type=_names, help="architectures, comma separated (registry ids or the names' "
                                               "spellings: pre_ln or preln, attnres, block_attnres, ...)")
    p.add_argument("--size", type=_names, help="budget labels of the names, comma separated: 400M, 1.6B, 200M, ...")
    p.add_argument("--depth", type=_depths, help="layer counts, comma separated, e.g. 16,32")
    p.add_argument("--tier", type=_names, help="the study's tiers: 400M, 400M-deep, 1.6B, 300M-backbone, 200M, ...")
    p.add_argument("--catalogue", help="a catalogue file of your own (the packaged one's format) instead")
    _add_listing(p)


def _add_listing(p: argparse.ArgumentParser, toggle: bool = True) -> None:
    p.add_argument("--listing", help="the Hub-listing overlay (default: the one `depthbench released sync` wrote, "
                                     "$HF_HOME/depthbench/hub_listing/aspect-ratio-scaling.json)")
    if toggle:
        p.add_argument("--no-listing", action="store_true", help="the shipped catalogue only, without the overlay")


def register_cli(subparsers) -> None:
    """Add ``depthbench released`` (``list``, ``eval``)."""
    p = subparsers.add_parser("released", help="the study's released checkpoints: list them, re-measure them",
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              description=_w("The aspect-ratio-scaling repositories of the study (arXiv 2609.32534): "
                                          "`sync` reads the organisation's Hub listing, `list` prints the catalogue, "
                                          "`eval` converts and re-measures a selection.") + "\n\n" + FIGURES)
    sub = p.add_subparsers(dest="released_command", metavar="<sync|list|eval>")
    sy = sub.add_parser("sync", help="read the organisation's Hub listing into a local overlay of the catalogue",
                        description="List every repository of the organisation through huggingface_hub (names, "
                                    "files, refs, each checkpoint's config.json) and record name, architecture, tier, "
                                    "depth, LR, steps and storage (per step or at the root) in an overlay in the HF "
                                    "cache, which `list` and `eval` merge with the shipped catalogue (also offline, "
                                    "from the last sync). A failure in the middle leaves the previous overlay as it "
                                    "was.")
    sy.add_argument("--endpoint", help="Hub endpoint (default HF_ENDPOINT, else huggingface.co)")
    sy.add_argument("--org", default="aspect-ratio-scaling", help="the organisation (default aspect-ratio-scaling)")
    sy.add_argument("--token", help="a Hub token (default: the saved one; private repositories need one)")
    _add_listing(sy, toggle=False)
    sy.set_defaults(func=_cmd_released_sync)
    ls = sub.add_parser("list", help="the catalogue of released repositories",
                        formatter_class=argparse.RawDescriptionHelpFormatter,
                        description=_w("A per-tier summary (named / unknown / published figures), then every released "
                                    "repository as the study names it, with its architecture, shape (d, L, d/L), "
                                    "peak LR, final step, storage and where each fact was read.") + "\n\n" + FIGURES)
    _add_selection(ls)
    ls.add_argument("--json", action="store_true", help="print the entries as JSON (with their sources and notes)")
    ls.set_defaults(func=_cmd_released_list)
    ev = sub.add_parser("eval", help="convert releases and re-measure their held-out loss (and lm-eval tasks)",
                        formatter_class=argparse.RawDescriptionHelpFormatter,
                        description=_w("Convert each selected release once (depthbench.from_released, cached), measure "
                                    "its held-out loss on --data (prepared with the release's tokenizer) and the "
                                    "--tasks, and write results.csv, the loss-vs-aspect-ratio plot and report.md "
                                    "as a sweep does, with the study's published figures beside. Resumable. The "
                                    "download size, parameters and FLOPs of the selection are printed first; above "
                                    "--confirm-above GB it needs --yes.") + "\n\n" + FIGURES)
    _add_selection(ev)
    ev.add_argument("--repo", action="append", help="a release repository by name (repeatable), e.g. one whose "
                                                    "name the catalogue does not know")
    ev.add_argument("--data", required=True, help="held-out token-shard folder (depthbench prepare-data)")
    ev.add_argument("--split", default="train",
                    help="split of --data to measure (default train: `depthbench prepare-data FILE` puts a file given "
                         "as input, the study's held-out parquet, into the train split)")
    ev.add_argument("--best-lr", action="store_true",
                    help="measure every LR known for each selected shape (the Hub listing of `released sync` knows "
                         "them) and report the best, as the study does (default: one LR per shape)")
    ev.add_argument("--yes", action="store_true", help="go ahead above --confirm-above")
    ev.add_argument("--confirm-above", type=float, default=20.0,
                    help="download size in GB above which --yes is needed (default 20)")
    ev.add_argument("-o", "--output", required=True, help="output folder (a sweep-like folder; rerun to resume)")
    ev.add_argument("--step", type=int, help="checkpoint step (default: the catalogue's final step, else the latest)")
    ev.add_argument("--max-tokens", type=_positive, help="measure at most this many tokens (default: the whole split)")
    ev.add_argument("--seq-len", type=_positive, help="window length (default: the model's context length)")
    ev.add_argument("--batch-size", type=_positive, default=8, help="windows per forward, and lm-eval's batch size")
    ev.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: cuda when available)")
    ev.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                    help="weights dtype (auto: bfloat16 on a bf16 GPU, else float32)")
    ev.add_argument("--tasks", help="lm-eval tasks/groups after the loss, e.g. depthbench_nll (default: none)")
    ev.add_argument("--limit", type=float, help="lm-eval documents per task")
    ev.add_argument("--nll-data-dir", help="local copies of the depthbench_nll datasets (depthbench eval --data-dir)")
    ev.add_argument("--include-path", help="lm-eval task folder (default: the repository's eval_tasks/)")
    ev.add_argument("--cache-dir", help="where conversions are kept (default $HF_HOME/depthbench/converted)")
    ev.add_argument("--readout", choices=["sum", "sum_norm"],
                    help="HC/mHC stream readout of the releases (default: decided per release from the evidence, as "
                         "depthbench convert does)")
    ev.set_defaults(func=_cmd_released_eval)
    p.set_defaults(func=functools.partial(_cmd_released, parser=p))
