"""Upcycling: the study's residual designs on language models that already exist (``depthbench upcycle``).

    from depthbench.upcycle import upcycle
    result = upcycle(model_or_folder_or_hub_id, "hc", grow_depth=4)
    result.save("out")

:func:`~depthbench.upcycle.core.upcycle` returns an :class:`~depthbench.upcycle.core.UpcycleResult` (the model, its
start: exact / bounded / changes, the measured deviation and loss change, a JSON report);
:func:`~depthbench.upcycle.checkpoint.save` writes it as an ordinary depthbench checkpoint. docs/upcycling.md
explains what is exact and why.
"""

from depthbench.upcycle.core import EXACT_TOLERANCE, SourceInfo, UpcycleResult, load_source, upcycle
from depthbench.upcycle.sources import FAMILIES, UpcycleError

__all__ = ["EXACT_TOLERANCE", "FAMILIES", "SourceInfo", "UpcycleError", "UpcycleResult", "load_source", "upcycle"]
