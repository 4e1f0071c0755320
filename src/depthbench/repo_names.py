"""Repository names of the ``aspect-ratio-scaling`` organisation, both ways.

The study's released checkpoints (DepthBench, arXiv 2609.32534) are named
``<arch>-lr<peak lr>-llama-<budget>-L<depth>-pretrain``, e.g. ``block-attnres-lr2e-3-llama-400M-L32-pretrain``
(the Pre-LN runs of the 200M/300M/500M ladders use ``base`` instead of the architecture). depthbench publishes its
own runs under the same convention (:func:`default_repo_name`) and converted releases as ``<name>-hf``
(:func:`converted_repo_name`); :func:`parse_repo_name` reads the settings a name carries (the fallback of
``depthbench convert`` when a checkpoint's config is missing a field).
"""

from __future__ import annotations

import re

ORG = "aspect-ratio-scaling"

# Architecture names used in the organisation's repository names -> depthbench registry ids.
REPO_ARCH_NAMES: dict[str, str] = {
    "preln": "pre_ln", "base": "pre_ln", "pre-ln": "pre_ln", "postln": "post_ln", "postnorm": "post_ln",
    "periln": "peri_ln", "peri-ln": "peri_ln", "sandwich": "peri_ln", "lns": "lns", "deepnorm": "deepnorm",
    "keel": "keel", "hc": "hc", "mhc": "mhc", "attnres": "attnres", "full-attnres": "attnres",
    "block-attnres": "block_attnres", "moda": "moda", "depth-mup": "depth_mup", "completep": "completep",
    "mix-ln": "mix_ln", "denseformer": "denseformer",
}
_NAME_RE = re.compile(r"^(?P<arch>.+?)-lr(?P<lr>[0-9.]+e-?[0-9]+|[0-9.]+)-llama-(?P<budget>[0-9.]+[MBK])"
                      r"-L(?P<depth>[0-9]+)(?P<rest>(-[A-Za-z0-9.]+)*)$")


def repo_arch_name(arch_id: str) -> str:
    """The organisation's spelling of a registry id (``pre_ln`` -> ``preln``, ``block_attnres`` -> ...)."""
    preferred = {"pre_ln": "preln", "post_ln": "postln", "peri_ln": "periln"}
    return preferred.get(arch_id, arch_id.replace("_", "-"))


def format_lr(lr: float) -> str:
    """``0.002`` -> ``2e-3`` (the organisation's spelling)."""
    mantissa, exponent = f"{lr:.6e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def format_budget(total_params: int) -> str:
    """Parameter budget label: one significant digit from 100M up to 1B (the study's ``200M`` ... ``500M``
    ladders: ``405_400_000`` -> ``400M``), two otherwise (``1_615_300_000`` -> ``1.6B``, ``20_100_000`` -> ``20M``,
    ``266_816`` -> ``270K``); the count is rounded first, then written in K, M or B."""
    digits = 1 if 1e8 <= total_params < 1e9 else 2
    rounded = float(f"{total_params:.{digits}g}")
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if rounded >= scale:
            return f"{rounded / scale:g}{unit}"
    return f"{rounded:g}"


def default_repo_name(arch_id: str, total_params: int, depth: int, lr: float | None, org: str = ORG) -> str:
    """``<org>/<arch>-lr<lr>-llama-<budget>-L<depth>-pretrain`` for a depthbench run."""
    lr_part = f"-lr{format_lr(lr)}" if lr is not None else ""
    return f"{org}/{repo_arch_name(arch_id)}{lr_part}-llama-{format_budget(total_params)}-L{depth}-pretrain"


def converted_repo_name(source_repo: str, org: str | None = None) -> str:
    """Where a converted release is re-published: ``<org>/<name>-hf``."""
    namespace, _, name = source_repo.rpartition("/")
    return f"{org or namespace or ORG}/{name}-hf"


def parse_repo_name(repo: str) -> dict:
    """Settings carried by a release name: ``{"arch", "lr", "budget", "depth", "suffix"}``.

    Raises ``ValueError`` (naming the expected pattern) when the name does not follow the convention or names an
    architecture depthbench does not know.
    """
    name = repo.rstrip("/").split("/")[-1]
    match = _NAME_RE.match(name)
    if not match:
        raise ValueError(f"repository name {name!r} does not follow <arch>-lr<lr>-llama-<budget>-L<depth>-pretrain")
    arch_name = match["arch"].lower()
    if arch_name not in REPO_ARCH_NAMES:
        raise ValueError(f"repository name {name!r}: unknown architecture {arch_name!r}; known: "
                         f"{', '.join(sorted(REPO_ARCH_NAMES))}")
    return {"arch": REPO_ARCH_NAMES[arch_name], "lr": float(match["lr"]), "budget": match["budget"],
            "depth": int(match["depth"]), "suffix": match["rest"].lstrip("-")}
