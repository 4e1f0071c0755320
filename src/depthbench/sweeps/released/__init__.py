"""Re-measure the study from its released checkpoints: ``depthbench released eval``.

    depthbench released eval --arch pre_ln,hc,attnres --size 400M --data data/heldout -o runs/released-400m

Each selected release (:mod:`depthbench.hub.catalogue`) is one "run" of a sweep-like folder, so ``depthbench
report``, ``depthbench eval`` and ``depthbench analyze`` work on it as on a sweep::

    OUT/sweep.json                  kind "released": the selection so far and the measurement settings
    OUT/runs/<arch>__<shape>__lr<lr>__s<seed>/
        run_config.json             the release (repository, step, catalogue entry) and its converted config
        summary.json                status "finished" once the held-out loss is measured (eval.<split>)
        final/                      the converted model: links to the conversion cache of ``from_released``
                                    (README.md is a copy: ``depthbench eval`` writes its model-index there)
        eval/results.json           lm-eval tasks (``--tasks``), as ``depthbench eval`` writes them
    OUT/results.csv, loss_vs_aspect_ratio.png, report.md   as for a sweep, plus the study's published figures

Per release: the release's ``tokenizer/`` and ``config.json`` are fetched first and checked against the held-out
folder's tokenizer (a mismatch stops before any weights are downloaded), then the release is converted once
(``depthbench.from_released``: cached; a later run reuses the conversion), its held-out loss is measured
(:mod:`depthbench.sweeps.heldout`) and the lm-eval tasks run (:mod:`depthbench.evaluation.harness`). A release
whose ``summary.json`` says finished is skipped, so an interrupted run continues where it stopped; a release that
fails (not found, refused by the converter) is reported at the end after the others ran.
"""
