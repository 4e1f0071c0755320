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
    "block-attnres": "block_attnres", "moda": "moda", "prenorm-moda": "moda", "postnorm-moda": "moda",
    "depth-mup": "depth_mup", "completep": "completep", "mix-ln": "mix_ln", "denseformer": "denseformer",
}
#: Name forms that select a variant of an architecture (the converter reads the same from ``model.block.name``):
#: post-norm MoDA is the study's ``post_norm_moda`` block, converted as ``moda`` with ``moda_post_norm=True``.
REPO_NAME_VARIANTS: dict[str, str] = {"postnorm-moda": "post_norm"}
_SCRIPT = "keyu-wang-2002/DepthBench examples/pretrain_400m.sh (commit 100da5f4)"
_README = "keyu-wang-2002/DepthBench README.md, section 'Checkpoints'"
#: Where each name form is used by the study (a form without an entry here is depthbench's own alias).
REPO_NAME_SOURCES: dict[str, str] = {
    "preln": f"{_README} (its example repository preln-lr2e-3-llama-400M-L24-pretrain)",
    "base": f"{_README}: 'Pre-LN uses base at 200M / 300M / 500M'",
    "periln": f"{_SCRIPT}: run pretrain-periln-400M-lr2e-3", "lns": f"{_SCRIPT}: run pretrain-lns-400M-lr1e-2",
    "deepnorm": f"{_SCRIPT}: run pretrain-deepnorm-400M-lr2e-3", "keel": f"{_SCRIPT}: run pretrain-keel-400M-lr2e-3",
    "hc": "keyu-wang-2002/DepthBench examples/pretrain_hyper_connections_shape.sh (L16-L32)",
    "mhc": "keyu-wang-2002/DepthBench examples/pretrain_hyper_connections_shape.sh (L16-L32)",
    "postnorm": f"{_SCRIPT}: run pretrain-postnorm-400M-lr2e-3",
    "attnres": f"{_SCRIPT}: run pretrain-attnres-400M-lr2e-3",
    "block-attnres": "the organisation's Hub listing (block-attnres-lr2e-3-llama-400M-L16 ... L32-pretrain)",
    "prenorm-moda": f"{_SCRIPT}: run pretrain-prenorm-moda-400M-lr2e-3 (examples/pretrain_moda.py)",
    "postnorm-moda": f"{_SCRIPT}: run pretrain-postnorm-moda-400M-lr2e-3 (examples/pretrain_postnorm_moda.py)",
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


def default_repo_name(arch_id: str, total_params: int, depth: int, lr: float | None, org: str = ORG,
                      seed: int | None = None) -> str:
    """``<org>/<arch>-lr<lr>-llama-<budget>-L<depth>-pretrain`` for a depthbench run; with ``seed`` (a sweep with
    several seeds per point, so that each seed has a repository of its own) ``...-pretrain-s<seed>``."""
    lr_part = f"-lr{format_lr(lr)}" if lr is not None else ""
    seed_part = f"-s{seed}" if seed is not None else ""
    return (f"{org}/{repo_arch_name(arch_id)}{lr_part}-llama-{format_budget(total_params)}-L{depth}-pretrain"
            f"{seed_part}")


def converted_repo_name(source_repo: str, org: str | None = None) -> str:
    """Where a converted release is re-published: ``<org>/<name>-hf``."""
    namespace, _, name = source_repo.rpartition("/")
    return f"{org or namespace or ORG}/{name}-hf"


def parse_repo_name(repo: str) -> dict:
    """Settings carried by a release name: ``{"arch", "lr", "budget", "depth", "suffix", "name", "variant"}``
    (``name``: the architecture as the name spells it; ``variant``: :data:`REPO_NAME_VARIANTS`' entry or ``None``).

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
            "depth": int(match["depth"]), "suffix": match["rest"].lstrip("-"), "name": arch_name,
            "variant": REPO_NAME_VARIANTS.get(arch_name)}
