"""``depthbench sweep``, ``depthbench report`` and ``depthbench demo``: architectures x aspect ratios at a fixed
parameter budget (the study's main experiment), its result files and report, and the offline CPU demo."""
