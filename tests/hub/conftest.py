"""The Hub tests talk to the loopback Hub (tests/hub/hub_server.py) on 127.0.0.1, which is there offline too.

Other test modules set ``HF_HUB_OFFLINE=1`` when they are imported; huggingface_hub reads it once, when it is
first imported, so whether the Hub tests could reach the loopback Hub depended on which test file happened to
import huggingface_hub first. Here huggingface_hub's offline switch is off for every Hub test.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _loopback_hub_is_reachable(monkeypatch):
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
