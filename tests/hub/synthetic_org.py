"""A synthetic ``aspect-ratio-scaling`` organisation for the loopback Hub (tests/hub/hub_server.py): 160+
repositories named as the study names its runs, with the file layout its trainer writes, but tiny placeholder
checkpoint files (the listing reads names, files, sizes and each checkpoint's ``config.json``, never weights).

What it holds (``ORG_REPOS``: repository -> how it was made, so tests compare the listing with the truth):

* every tier of the study's README table, each shape at its architectures, with a peak LR per tier (the
  LR-unknown tiers get one here, as the real Hub names carry one);
* several LRs per shape: HC, mHC and Full AttnRes at 400M L16-L32 also at 1e-3 and 4e-3, Pre-LN at 1.6B at two LRs;
* MoDA spelled as the study's runs are (``prenorm-moda``) and the post-norm variant (``postnorm-moda``);
* LNS at 2e-3 (the name the Hub lists) and 1e-2 (the launch script's LR) at L32;
* root-stored final checkpoints (``config.json`` + ``model_and_optim/`` at the root) for the deep 400M runs and
  1.6B, per-step ``step<N>/`` folders elsewhere (0, 3000, 6000, 7600 at 400M);
* the fixed-backbone HC / mHC L16 runs labelled ``400M`` in their names (at 3e-3), whose config.json has
  the 300M-backbone width;
* names that do not parse, a private repository, a repository without any checkpoint.
"""

from __future__ import annotations

import json

from depthbench.repo_names import format_lr
from depthbench.shapes import get_grid

ORG = "aspect-ratio-scaling"
BLOCK = {"pre_ln": "default", "peri_ln": "peri_norm", "lns": "default_scaled", "deepnorm": "deepnorm",
         "keel": "keel", "hc": "hc", "mhc": "mhc", "attnres": "attnres", "block_attnres": "attnres", "moda": "moda"}
NAMES = {"pre_ln": "preln", "peri_ln": "periln", "block_attnres": "block-attnres", "moda": "prenorm-moda"}
TEN = ["pre_ln", "peri_ln", "lns", "deepnorm", "keel", "hc", "mhc", "attnres", "block_attnres", "moda"]
LADDER = ["pre_ln", "hc", "mhc", "attnres", "block_attnres"]
# tier -> (size label, grid, depths, architectures, LR, steps, storage)
TIERS = {
    "400M": ("400M", "400m", [16, 20, 24, 28, 32], TEN, 2e-3, [0, 3000, 6000, 7600], "steps"),
    "400M-deep": ("400M", "400m", [36, 42, 70], ["hc", "mhc", "attnres"], 2e-3, [7600], "root"),
    "1.6B": ("1.6B", "1.6b", [28, 40, 54], ["pre_ln", "hc", "attnres"], 1e-3, [30400], "root"),
    "300M-backbone": ("300M", "300m-backbone", [42, 56, 70], ["hc", "mhc"], 2e-3, [7600], "steps"),
    "200M": ("200M", "200m", [12, 18, 24], LADDER, 3e-3, [3800], "steps"),
    "300M": ("300M", "300m", [14, 21, 28], LADDER, 3e-3, [5700], "steps"),
    "500M": ("500M", "500m", [17, 26, 34], LADDER, 2e-3, [9500], "steps"),
}
UNPARSABLE = ["notes-and-logs", "hc-llama-400M-L24-pretrain", "gpt2-lr2e-3-llama-400M-L24-pretrain"]
PRIVATE = "hc-lr3e-3-llama-400M-L24-pretrain"
WITHOUT_CHECKPOINT = "deepnorm-lr2e-3-llama-400M-L36-pretrain"


def _name(arch: str, tier: str, lr: float, size: str, depth: int) -> str:
    base = "base" if arch == "pre_ln" and tier in ("200M", "300M", "500M") else NAMES.get(arch, arch)
    return f"{ORG}/{base}-lr{format_lr(lr)}-llama-{size}-L{depth}-pretrain"


def config_json(arch: str, d: int, L: int, final_step: int, block: str | None = None) -> bytes:
    return json.dumps({"model": {"d_model": d, "n_layers": L, "vocab_size": 50304,
                                 "block": {"name": block or BLOCK.get(arch, "default"), "attention": {"n_heads": 16}}},
                       "trainer": {"max_duration": {"value": final_step, "unit": "steps"}}}).encode()


def checkpoint_files(prefix: str, arch: str, d: int, L: int, final_step: int, block: str | None = None,
                     size: int = 64) -> dict[str, bytes]:
    return {f"{prefix}config.json": config_json(arch, d, L, final_step, block),
            f"{prefix}model_and_optim/.metadata": b"placeholder metadata",
            f"{prefix}model_and_optim/__0_0.distcp": b"\0" * size}


def release_files(arch: str, d: int, L: int, steps: list[int], storage: str, block: str | None = None) -> dict:
    files = {"tokenizer/tokenizer.json": b"{}", "README.md": b"# release\n"}
    if storage == "root":
        files.update(checkpoint_files("", arch, d, L, steps[-1], block, size=d))
    else:
        for step in steps:
            files.update(checkpoint_files(f"step{step}/", arch, d, L, steps[-1], block, size=d + step % 7))
    return files


def build_org() -> dict[str, dict]:
    """``{repo: {"files": {...}, "private": bool, "truth": {...}}}`` of the synthetic organisation."""
    repos: dict[str, dict] = {}

    def add(repo, arch, tier, lr, depth, d, steps, storage, block=None, variant=None, private=False):
        repos[repo] = {"files": release_files(arch, d, depth, steps, storage, block), "private": private,
                       "truth": {"arch": arch, "tier": tier, "lr": lr, "depth": depth, "d": d, "steps": steps,
                                 "storage": storage, "variant": variant}}

    for tier, (size, grid, depths, archs, lr, steps, storage) in TIERS.items():
        for arch in archs:
            for depth in depths:
                d = get_grid(grid).shape(depth).hidden_size
                add(_name(arch, tier, lr, size, depth), arch, tier, lr, depth, d, steps, storage)
    backbone16 = get_grid("300m-backbone").shape(16).hidden_size  # the L16 run, labelled 400M by its name
    for arch in ("hc", "mhc"):
        add(_name(arch, "300M-backbone", 3e-3, "400M", 16), arch, "300M-backbone", 3e-3, 16, backbone16, [7600],
            "steps")
    grid400 = get_grid("400m")
    for arch in ("hc", "mhc", "attnres"):
        for lr in (1e-3, 4e-3):
            for depth in (16, 20, 24, 28, 32):
                add(_name(arch, "400M", lr, "400M", depth), arch, "400M", lr, depth,
                    grid400.shape(depth).hidden_size, [0, 3000, 6000, 7600], "steps")
    for depth in (16, 20, 24, 28, 32):
        add(f"{ORG}/postnorm-moda-lr2e-3-llama-400M-L{depth}-pretrain", "moda", "400M", 2e-3, depth,
            grid400.shape(depth).hidden_size, [0, 3000, 6000, 7600], "steps", block="post_norm_moda",
            variant="post_norm")
    add(f"{ORG}/lns-lr1e-2-llama-400M-L32-pretrain", "lns", "400M", 1e-2, 32, grid400.shape(32).hidden_size,
        [0, 3000, 6000, 7600], "steps")
    add(_name("pre_ln", "1.6B", 2e-3, "1.6B", 28), "pre_ln", "1.6B", 2e-3, 28,
        get_grid("1.6b").shape(28).hidden_size, [30400], "root")
    add(f"{ORG}/{PRIVATE}", "hc", "400M", 3e-3, 24, grid400.shape(24).hidden_size, [7600], "steps", private=True)
    for name in UNPARSABLE:
        repos[f"{ORG}/{name}"] = {"files": {"README.md": b"not a release\n"}, "private": False, "truth": None}
    repos[f"{ORG}/{WITHOUT_CHECKPOINT}"] = {"files": {"README.md": b"coming soon\n",
                                                      "tokenizer/tokenizer.json": b"{}"}, "private": False,
                                            "truth": None}
    return repos


def publish_org(server, repos: dict[str, dict]) -> None:
    for repo, spec in repos.items():
        server.add_repo(repo, spec["files"], private=spec["private"])
