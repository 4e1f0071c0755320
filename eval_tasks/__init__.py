"""The lm-eval task folder of depthbench (task and group YAMLs, their ``utils.py`` loaders and data), installed as
the package data ``depthbench.eval_tasks``; :func:`depthbench.evaluation.harness.tasks_dir` gives its path
(``depthbench tasks-path`` prints it for ``lm_eval --include_path``). See README.md here."""
