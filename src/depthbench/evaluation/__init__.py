"""``depthbench eval``: lm-eval on a checkpoint, a run or every run of a sweep (results files, model-card records,
a sweep's evaluation plots and report section).

``harness`` runs lm-eval (task folder, model loading, one checkpoint, a sweep); ``results`` owns the results dicts
and ``results.md``; ``cards`` the model card's ``model-index``; ``sweep`` a sweep's rows, plots and report section;
``command`` the command line.
"""
