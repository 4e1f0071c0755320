"""The Hub family's commands: ``depthbench publish`` (:mod:`depthbench.hub.publish`), ``depthbench convert``
(:mod:`depthbench.hub.convert`) and ``depthbench export-llama`` (:mod:`depthbench.hub.export_llama`).

    depthbench publish runs/hc-L24 --dry-run
    depthbench convert aspect-ratio-scaling/preln-lr2e-3-llama-400M-L24-pretrain --step 7600 -o preln-L24
    depthbench export-llama runs/preln-L24 -o preln-L24-llama

The handlers import their library module when they run (registering the parsers needs only convert's dtype names).
"""

from __future__ import annotations

import argparse
import os


# ================================================================================================ publish
def _cmd_publish(args: argparse.Namespace) -> int:
    from depthbench.hub.publish import publish

    publish(args.path, repo=args.repo, private=args.private, revisions=args.revisions, dry_run=args.dry_run,
            org=args.org, lm_eval_json=args.lm_eval_json)
    return 0


def _add_publish(subparsers) -> None:
    p = subparsers.add_parser(
        "publish", help="upload a run, a sweep or a converted model to the Hugging Face Hub",
        description="Upload a training run's final export with its model card (and with --revisions every "
                    "checkpoint as a branch step-NNNNNN), every finished run of a sweep plus a collection, or a "
                    "`depthbench convert` output. Only changed files are uploaded. Authentication: HF_TOKEN or "
                    "`hf auth login`.")
    p.add_argument("path", help="run folder, sweep folder (with sweep.json) or HF model folder")
    p.add_argument("--repo", help="target repository NAMESPACE/NAME (runs only; default: the organisation's name "
                                  "<arch>-lr<lr>-llama-<budget>-L<depth>-pretrain, or <source>-hf for conversions)")
    p.add_argument("--org", "--namespace", dest="org",
                   help="namespace of default names (default: the user of the token, from whoami)")
    p.add_argument("--private", action="store_true", help="create the repositories (and collection) private")
    p.add_argument("--revisions", action="store_true", help="also upload every checkpoint to a branch step-NNNNNN")
    p.add_argument("--dry-run", action="store_true", help="print the plan (repos, branches, files, sizes) only")
    p.add_argument("--lm-eval-json", help="lm-eval results JSON to add to the card's model-index")
    p.set_defaults(func=_cmd_publish)


# ================================================================================================ convert
def _cmd_convert(args: argparse.Namespace) -> int:
    from depthbench import atomic
    from depthbench.hub.convert import CONVERSION_RECORD, convert

    out = convert(args.source, args.output, step=args.step, arch=args.arch, config_path=args.config,
                  tokenizer_dir=args.tokenizer, repo_name=args.repo_name, revision=args.revision,
                  overwrite=args.overwrite, readout=args.readout, dtype=args.dtype)
    record = atomic.read_json(os.path.join(out, CONVERSION_RECORD))
    print(f"converted {record['source_repo']} (step {record['step']}) -> {out} as {record['arch']} "
          f"({record['dtype']})")
    for note in record["notes"]:
        print(f"  note: {note}")
    return 0


def _add_convert(subparsers) -> None:
    from depthbench.hub.convert import DTYPES

    p = subparsers.add_parser(
        "convert", help="convert a released OLMo-core checkpoint of the study into depthbench's HF format",
        description="Convert aspect-ratio-scaling/NAME (downloading only the model part of a step), a local release "
                    "or step folder (config.json + model_and_optim/) or a plain state dict into a from_pretrained "
                    "folder (safetensors, remote code, tokenizer, model card). Unrepresentable settings are refused.")
    p.add_argument("source", help="Hub repo id, local release or step folder, or state-dict file (.pt/.safetensors)")
    p.add_argument("-o", "--output", required=True, help="output folder")
    p.add_argument("--step", type=int, help="training step (default: the last one in the repository)")
    p.add_argument("--arch", help="registry id, when neither config.json nor the name gives it")
    p.add_argument("--config", help="experiment config.json to read the settings from (plain state dicts)")
    p.add_argument("--tokenizer", help="tokenizer folder to copy (default: the release's tokenizer/)")
    p.add_argument("--repo-name", help="release name to read settings from for a local source")
    p.add_argument("--revision", help="Hub revision of the release repository")
    p.add_argument("--readout", choices=("sum", "sum_norm"),
                   help="HC / native-mHC stream readout when config.json leaves it open (default: decided from the "
                        "loss of both on a built-in text sample): sum = sum the streams, then the final norm (the "
                        "study's newest code); sum_norm = final norm per stream, then sum (older code)")
    p.add_argument("--dtype", choices=DTYPES, help="dtype of the converted weights (default: the checkpoint's)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    p.set_defaults(func=_cmd_convert)


# ================================================================================================ export-llama
def _cmd_export_llama(args: argparse.Namespace) -> int:
    from depthbench.hub.export_llama import export_llama

    out = export_llama(args.checkpoint, args.output, overwrite=args.overwrite, revision=args.revision)
    print(f"wrote a stock LlamaForCausalLM to {out} (loads without trust_remote_code)")
    return 0


def _add_export_llama(subparsers) -> None:
    p = subparsers.add_parser(
        "export-llama", help="export a pre_ln checkpoint as a stock LlamaForCausalLM (no remote code)",
        description="Write a pre_ln checkpoint as a plain Llama folder for tools that only know Llama. Other "
                    "architectures are refused with the reason. The export's logits are checked against the source.")
    p.add_argument("checkpoint", help="training run folder (its final/ export), depthbench HF folder or Hub id "
                   "of a pre_ln model")
    p.add_argument("-o", "--output", required=True, help="output folder")
    p.add_argument("--revision", default=None, help="branch, tag or commit of a Hub id (e.g. step-001000)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    p.set_defaults(func=_cmd_export_llama)


def register_cli(subparsers) -> None:
    """Add ``depthbench publish``, ``depthbench convert`` and ``depthbench export-llama``."""
    _add_publish(subparsers)
    _add_convert(subparsers)
    _add_export_llama(subparsers)
