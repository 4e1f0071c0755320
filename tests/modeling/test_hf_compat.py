"""The one owner of transformers version differences (``modeling/hf_compat.py``): the version gate, and each
fallback against the installed transformers itself (its Llama's signature, its attention registry, its masks
written out by hand). Which names remote code may import unguarded is checked in test_remote_code.py.

    python -m pytest tests/modeling/test_hf_compat.py -q
"""

from __future__ import annotations

import inspect
import json

import pytest
import torch
from depthbench.modeling import hf_compat
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from tests.helpers import ARCH_IDS


def test_checkpoints_name_the_oldest_supported_transformers(checkpoints):
    from depthbench.modeling.hf_compat import MIN_TRANSFORMERS, check_transformers_version

    config = json.loads((checkpoints.get(ARCH_IDS[0]).path / "config.json").read_text())
    assert config["depthbench_min_transformers"] == MIN_TRANSFORMERS
    check_transformers_version()  # the installed release is supported
    with pytest.raises(ImportError, match=rf"needs transformers>={MIN_TRANSFORMERS}, but transformers 4.57.6 is"):
        check_transformers_version("4.57.6")
    check_transformers_version(MIN_TRANSFORMERS + ".dev0")  # pre-releases of the minimum count as it


@pytest.mark.parametrize("version, supported", [
    ("5.0.0", True), ("5.0.0rc1", True), ("5.10.4", True), ("5.2.1+cu121", True), ("5.24.0.dev0", True), ("6.0", True),
    ("4.57.6", False), ("4.100.0", False), ("4.99.99+cu121", False),
])
def test_releases_compare_by_major_minor_patch(version, supported):
    """Numeric order (``4.100`` is older than ``5.0``), pre-releases and local versions count as their release."""
    if supported:
        hf_compat.check_transformers_version(version)
    else:
        with pytest.raises(ImportError, match=f"transformers {version.replace('+', '[+]')} is installed"):
            hf_compat.check_transformers_version(version)


def test_an_older_release_is_refused_naming_both_versions_and_the_fix():
    with pytest.raises(ImportError) as info:
        hf_compat.check_transformers_version("4.57.6")
    message = str(info.value)
    assert "transformers 4.57.6 is installed" in message
    assert f"pip install 'transformers>={hf_compat.MIN_TRANSFORMERS}'" in message


def test_cache_field_is_the_keyword_of_the_installed_llama():
    parameters = inspect.signature(LlamaForCausalLM.forward).parameters
    assert hf_compat.CACHE_FIELD == ("cache" if "cache" in parameters else "past_key_values")


def test_attention_interface_finds_what_transformers_registered():
    def default(*args, **kwargs):
        return None

    assert hf_compat.attention_interface("eager", default) is default
    assert hf_compat.attention_interface("sdpa", default) is sdpa_attention_forward


def test_sliding_window_mask_is_the_band_written_by_hand():
    """With a ``sliding_window`` the eager mask lets query i see keys j with ``i - window < j <= i``; without one,
    every ``j <= i``."""
    length, window = 7, 3
    embeds = torch.zeros(1, length, 8)
    positions = torch.arange(length)[None]
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    for sliding_window, allowed in ((None, j <= i), (window, (j <= i) & (j > i - window))):
        config = LlamaConfig(hidden_size=8, num_attention_heads=2, num_hidden_layers=1, sliding_window=sliding_window)
        config._attn_implementation = "eager"
        mask = hf_compat.causal_mask(config, embeds, None, DynamicCache(config=config), positions)
        assert mask.shape == (1, 1, length, length)
        assert torch.equal(mask[0, 0] == 0, allowed)


def test_cache_update_hands_on_cache_position_only_when_given():
    calls = []

    class Recording:
        def update(self, *args):
            calls.append(args)
            return args[:2]

    key, value = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    positions = torch.arange(3)
    assert hf_compat.cache_update(Recording(), key, value, 5) == (key, value)
    hf_compat.cache_update(Recording(), key, value, 5, cache_position=positions)
    assert calls[0] == (key, value, 5)
    assert calls[1][:3] == (key, value, 5) and calls[1][3] == {"cache_position": positions}
