"""Remote code across transformers releases: export checkpoints here, load them elsewhere without depthbench.

Every checkpoint ships ``modeling/*.py`` as Hugging Face remote code, and a Hub user's transformers is not ours to
pin. This tool checks that a checkpoint saved by the checkout's depthbench loads with
``AutoModelForCausalLM.from_pretrained(..., trust_remote_code=True)`` under another transformers release, in a
Python environment where depthbench is not installed (its import is also blocked), and computes the same thing::

    # 1. with depthbench (the checkout): one tiny checkpoint per registered architecture + reference outputs
    python scripts/remote_code_matrix.py export /tmp/rc
    # 2. in a venv with only torch and transformers==X (no depthbench): load, compare, report
    /tmp/venv/bin/python scripts/remote_code_matrix.py load /tmp/rc --report /tmp/rc/report-X.json

``load`` compares, per architecture, the logits of a left-padded batch under sdpa (the default) and eager
attention, and the greedy ``generate()`` tokens with a dynamic and a static KV cache, with the exporting side's; it
also loads the decoder (``AutoModel``) and a task head. It exits 1 if any architecture differs or fails to load. For
a transformers release below the checkpoints' ``depthbench_min_transformers`` it checks instead that loading fails
with the error that names the supported minimum. ``.ci/remote_code_versions.sh`` runs both steps under the oldest
and the newest supported release; docs/compatibility.md#remote-code-and-transformers-versions has the results.
"""

from __future__ import annotations

import argparse
import importlib.abc
import json
import sys
import time
from pathlib import Path

#: Logits may differ by float rounding only (the same torch computes them; masks may be built differently).
LOGIT_TOLERANCE = 1e-5
NEW_TOKENS = 6
#: Backbone of the exported checkpoints (GQA, 3 blocks so every multi-block wiring has an interior block).
SHAPE = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64}


def _inputs(torch):
    """A left-padded batch: row 0 has 10 tokens, row 1 has 7 after 3 pads (id 0)."""
    ids = torch.randint(1, SHAPE["vocab_size"], (2, 10), generator=torch.Generator().manual_seed(7))
    mask = torch.ones_like(ids)
    ids[1, :3], mask[1, :3] = 0, 0
    return ids, mask


def _outputs(model, torch) -> dict:
    """What both sides compute: sdpa and eager logits of the padded batch, greedy tokens with a KV cache."""
    ids, mask = _inputs(torch)
    out = {}
    with torch.no_grad():
        for implementation in ("sdpa", "eager"):
            model.set_attn_implementation(implementation)
            out[f"logits_{implementation}"] = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
        model.set_attn_implementation("sdpa")
        for cache in ("dynamic", "static"):
            out[f"greedy_{cache}"] = model.generate(
                input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                do_sample=False, use_cache=True, cache_implementation=cache, pad_token_id=0, eos_token_id=None,
            )
    return out


def export(root: Path, arch_ids: list[str]) -> None:
    import torch

    from depthbench.registry import ARCHITECTURES

    root.mkdir(parents=True, exist_ok=True)
    for arch_id in arch_ids or list(ARCHITECTURES):
        arch = ARCHITECTURES[arch_id]
        torch.manual_seed(0)
        model = arch.causal_lm_class(arch.config_class(**SHAPE)).float().eval()
        model.save_pretrained(root / arch_id)
        torch.save(_outputs(model, torch), root / arch_id / "reference.pt")
        print(f"exported {arch_id}", flush=True)


class _BlockDepthbench(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "depthbench" or name.startswith("depthbench."):
            raise ImportError(f"{name} is blocked: remote code must not need depthbench")
        return None


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("+")[0].split(".")[:3] if part.isdigit())


def _load_one(folder: Path, torch, transformers) -> dict:
    config = json.loads((folder / "config.json").read_text())
    minimum = config.get("depthbench_min_transformers")
    kw = {"trust_remote_code": True}
    if minimum and _version_tuple(transformers.__version__) < _version_tuple(minimum):
        try:
            transformers.AutoModelForCausalLM.from_pretrained(folder, **kw)
        except Exception as exc:  # the refusal below the minimum must name it
            ok = minimum in str(exc)
            return {"ok": ok, "refused": f"{type(exc).__name__}: {str(exc)[:300]}"}
        return {"ok": False, "error": f"loaded below the supported minimum {minimum}"}
    ref = torch.load(folder / "reference.pt")
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, **kw).eval()
    got = _outputs(model, torch)
    diffs = {k: (got[k].double() - ref[k].double()).abs().max().item()
             for k in ("logits_sdpa", "logits_eager")}
    tokens_equal = all(torch.equal(got[k], ref[k]) for k in ("greedy_dynamic", "greedy_static"))
    base = transformers.AutoModel.from_pretrained(folder, **kw)
    head = transformers.AutoModelForSequenceClassification.from_pretrained(folder, num_labels=2, pad_token_id=0, **kw)
    ids, mask = _inputs(torch)
    with torch.no_grad():
        head(input_ids=ids, attention_mask=mask)
    classes = [type(m).__module__ for m in (model, base, head)]
    return {
        "ok": tokens_equal and max(diffs.values()) <= LOGIT_TOLERANCE
        and all(c.startswith("transformers_modules.") for c in classes),
        "max_abs_diff": diffs, "greedy_equal": tokens_equal, "classes": classes,
    }


def load(root: Path, report: Path | None) -> int:
    sys.meta_path.insert(0, _BlockDepthbench())
    import torch
    import transformers

    torch.set_num_threads(1)
    results = {"transformers": transformers.__version__, "torch": torch.__version__, "archs": {}}
    for folder in sorted(p for p in root.iterdir() if (p / "config.json").is_file()):
        start = time.perf_counter()
        try:
            entry = _load_one(folder, torch, transformers)
        except Exception as exc:  # reported per architecture
            entry = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:500]}"}
        entry["seconds"] = round(time.perf_counter() - start, 2)
        results["archs"][folder.name] = entry
        print(f"transformers {transformers.__version__} {folder.name:14s} {json.dumps(entry)}", flush=True)
    results["depthbench_imported"] = any(m == "depthbench" or m.startswith("depthbench.") for m in sys.modules)
    failed = [a for a, e in results["archs"].items() if not e["ok"]]
    results["failed"] = failed
    if report is not None:
        report.write_text(json.dumps(results, indent=1))
    ok = results["archs"] and not failed and not results["depthbench_imported"]
    print(f"transformers {transformers.__version__}: {len(results['archs']) - len(failed)}/{len(results['archs'])} "
          f"architectures OK" + (f"; failed: {', '.join(failed)}" if failed else ""), flush=True)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_export = sub.add_parser("export", help="save one tiny checkpoint per architecture (needs depthbench)")
    p_export.add_argument("root", type=Path)
    p_export.add_argument("--arch", default="", help="comma-separated architecture ids (default: all)")
    p_load = sub.add_parser("load", help="load the checkpoints as remote code and compare (without depthbench)")
    p_load.add_argument("root", type=Path)
    p_load.add_argument("--report", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    if args.command == "export":
        export(args.root, [a for a in args.arch.split(",") if a])
        return 0
    return load(args.root, args.report)


if __name__ == "__main__":
    sys.exit(main())
