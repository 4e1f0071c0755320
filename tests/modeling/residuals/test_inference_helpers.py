"""The shared switches of the no-autograd fast paths (``fast_path``)."""

import torch
from depthbench.modeling.fast_path import derived_weights, inference_fast_path


def test_fast_path_only_in_eval_mode_without_autograd():
    module = torch.nn.Linear(2, 2).eval()
    assert not inference_fast_path(module)  # autograd on
    with torch.no_grad():
        assert inference_fast_path(module)
        # a training-mode module (e.g. the no-grad forward of reentrant activation checkpointing) keeps the
        # differentiable path, so that forward is bitwise the one recomputed in the backward pass
        assert not inference_fast_path(module.train())
    with torch.inference_mode():
        assert inference_fast_path(module.eval())


def test_derived_weights_rebuild_after_every_parameter_change():
    layer = torch.nn.Linear(3, 3)
    builds = []

    def build():
        builds.append(1)
        return layer.weight.sum() * 2

    with torch.no_grad():
        first = derived_weights(layer, "twice_sum", build, layer.weight)
        assert derived_weights(layer, "twice_sum", build, layer.weight) is first and len(builds) == 1
        layer.weight.add_(1.0)  # an optimizer step: in place, same storage
        after_step = derived_weights(layer, "twice_sum", build, layer.weight)
        torch.testing.assert_close(after_step, first + 18)
        layer.load_state_dict({"weight": torch.zeros(3, 3), "bias": torch.zeros(3)})
        torch.testing.assert_close(derived_weights(layer, "twice_sum", build, layer.weight), torch.tensor(0.0))
        layer.weight = torch.nn.Parameter(torch.ones(3, 3))  # a new storage
        torch.testing.assert_close(derived_weights(layer, "twice_sum", build, layer.weight), torch.tensor(18.0))
    assert len(builds) == 4
