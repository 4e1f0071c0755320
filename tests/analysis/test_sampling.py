"""``depthbench.analysis.sampling``: windows drawn inside documents.

Run with ``python -m pytest tests/analysis/test_sampling.py -q``.
"""

from __future__ import annotations

import numpy as np
import pytest

from depthbench.analysis.sampling import WindowSpec, draw_windows


def test_windows_stay_inside_documents_without_replacement():
    eos = 0
    docs = [np.r_[np.arange(100 * k + 1, 100 * k + n), eos] for k, n in enumerate((40, 7, 33, 65, 12))]
    tokens = np.concatenate(docs)
    spec = WindowSpec(num_samples=5, seq_len=16, seed=3)
    w = draw_windows(tokens, eos, spec)
    assert w.shape == (5, 16)
    # inside one document: no EOS before the last position, and tokens consecutive within a document
    assert all((row[:-1] != eos).all() and (np.diff(row[:-1]) == 1).all() for row in w)
    assert len({tuple(r) for r in w}) == 5  # distinct windows (no replacement)
    assert (draw_windows(tokens, eos, spec) == w).all()  # seeded
    with pytest.raises(ValueError, match="inside single documents"):
        draw_windows(tokens, eos, WindowSpec(num_samples=9, seq_len=16))
    assert draw_windows(tokens, eos, WindowSpec(num_samples=9, seq_len=16, cross_documents=True)).shape == (9, 16)
