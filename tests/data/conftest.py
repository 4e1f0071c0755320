"""Fixtures of the data pipeline's tests."""

import pytest


@pytest.fixture(scope="module")
def tok():
    """A 512-token byte-level BPE trained on the pydoc corpus (one per test module)."""
    from depthbench.data import make_tiny_tokenizer
    from tests.helpers import pydoc_texts

    return make_tiny_tokenizer(pydoc_texts(), vocab_size=512)
