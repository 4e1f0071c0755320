"""``depthbench eval``: lm-eval on a checkpoint, a run or every run of a sweep (results files, model-card records,
a sweep's evaluation plots and report section)."""
