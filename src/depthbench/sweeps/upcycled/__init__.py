"""``depthbench upcycle-study``: upcycle a pretrained model into several residual designs, train each on the same
tokens, analyse and compare them (:mod:`depthbench.sweeps.upcycled.study`; its report:
:mod:`depthbench.sweeps.upcycled.report`)."""
