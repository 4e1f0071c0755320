"""``depthbench.cards``: the model cards depthbench writes (HF exports, ``sft`` folders, ``eval``'s starting card),
filled from a run's own files and read back with huggingface_hub's loaders (``ModelCard``, ``metadata_load``).

The cards of a trained run use the session fixture ``hub_run`` (one tiny HC run with HF exports, tests/conftest.py);
the pieces (training data, losses, lm-eval rows, the other templates) are checked on hand-written files.

    python -m pytest tests/test_cards.py -q
"""

from __future__ import annotations

import importlib.metadata
import json

import pytest

from depthbench.cards import write_card
from depthbench.hub import publish as pub

ORG = "aspect-ratio-scaling"


# ================================================================================================ a trained run's card
def test_card_loads_with_huggingface_hub_loaders(hub_run, tmp_path):
    from huggingface_hub import ModelCard, metadata_load

    export = tmp_path / "export"
    export.mkdir()
    for f in (hub_run / "final").iterdir():
        (export / f.name).write_bytes(f.read_bytes())
    path = write_card(str(export), run_dir=str(hub_run), repo_id=f"{ORG}/hc-test",
                      lm_eval={"results": {"depthbench_synthetic": {"acc,none": 0.5, "acc_stderr,none": 0.1}}})
    card = ModelCard.load(path)
    meta = metadata_load(path)
    summary = json.loads((hub_run / "summary.json").read_text())
    results = {(r.dataset_type, r.metric_type): r.metric_value for r in card.data.eval_results}
    for split, loss in summary["eval"].items():
        assert results[(split, "loss")] == pytest.approx(loss, abs=1e-6)
    assert results[("depthbench_synthetic", "acc")] == 0.5
    assert meta["model-index"][0]["name"] == "hc-test" and meta["license"] == "apache-2.0"
    text = card.text
    assert "arxiv.org/abs/2409.19606" in text and "2609.32534" in text  # the architecture's paper and the study
    assert "| 2 | 32 | 16.00 |" in text  # L, d, d/L
    assert f"{summary['final_train_loss']:.4f}" in text and "![training and held-out loss](loss_curve.png)" in text
    assert (export / "loss_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert "[More Information Needed]" not in text
    written_by = f"This card was written by depthbench {importlib.metadata.version('depthbench')}."
    assert written_by in " ".join(text.split())  # the installed package's version (setup.py reads __version__)


def test_card_size_label_matches_the_repository_name(hub_run):
    from huggingface_hub import ModelCard
    from transformers import AutoModelForCausalLM

    from depthbench.cards import card_files

    repo = pub.default_repo_for(str(hub_run / "final"), str(hub_run), ORG)
    label = repo.split("-llama-")[1].split("-")[0]
    card = ModelCard(card_files(str(hub_run / "final"), str(hub_run), repo)["README.md"].decode())
    total = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(hub_run / "final").parameters())
    assert f"| {total:,} ({label}) |" in card.text


def test_card_says_what_loading_needs_and_names_the_data_without_local_paths(hub_run, tmp_path):
    from huggingface_hub import ModelCard
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    import depthbench
    from depthbench.cards import card_files

    card = ModelCard(card_files(str(hub_run / "final"), str(hub_run), f"{ORG}/x")["README.md"].decode())
    assert card.data.datasets == ["data"]  # the prepared folder's name (the corpus came from local files)
    assert str(tmp_path.parent) not in card.content and str(hub_run.parent) not in card.content
    # a pre_ln export: stock transformers does not know its model_type, so it needs remote code too
    assert "depthbench_pre_ln" not in CONFIG_MAPPING_NAMES
    export = tmp_path / "preln"
    depthbench.build_model("pre_ln", vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                           num_attention_heads=2).save_pretrained(export)
    text = ModelCard(card_files(str(export), None, f"{ORG}/p")["README.md"].decode()).text
    assert "other than Pre-LN" not in text
    assert "Every architecture, Pre-LN included, needs `trust_remote_code=True`" in text
    assert "depthbench export-llama" in text  # the way to a checkpoint that loads without remote code


def test_card_names_a_hub_dataset_by_its_id(hub_run, tmp_path):
    import shutil

    from huggingface_hub import ModelCard

    from depthbench.cards import card_files

    run = tmp_path / "run"
    shutil.copytree(hub_run, run, symlinks=True)
    data = tmp_path / "fineweb-sample"
    data.mkdir()
    (data / "meta.json").write_text(json.dumps({"tokenizer": "allenai/OLMo-1B-hf", "sources": [
        {"kind": "hf", "path": "HuggingFaceFW/fineweb-edu", "split": "auto"}]}))
    config = json.loads((run / "run_config.json").read_text())
    config["config"]["data"]["data_dir"] = str(data)
    (run / "run_config.json").write_text(json.dumps(config))
    card = ModelCard(card_files(str(run / "final"), str(run), f"{ORG}/x")["README.md"].decode())
    assert card.data.datasets == ["HuggingFaceFW/fineweb-edu"]
    assert "HuggingFaceFW/fineweb-edu" in card.text and "allenai/OLMo-1B-hf" in card.text
    assert str(tmp_path) not in card.content


def test_a_step_branch_card_reports_that_step_not_the_final_model(hub_run):
    """The card of ``step-000002`` holds the losses logged at step 2 (read here from metrics.jsonl by hand), not
    the finished run's final losses, and its model-index too."""
    from huggingface_hub import ModelCard

    from depthbench.cards import card_files

    rows = [json.loads(line) for line in (hub_run / "metrics.jsonl").read_text().splitlines()]
    train2 = next(r["train/loss"] for r in rows if r["step"] == 2 and "train/loss" in r)
    eval2 = next(r["eval/eval/loss"] for r in rows if r["step"] == 2 and "eval/eval/loss" in r)
    final = json.loads((hub_run / "summary.json").read_text())
    card = ModelCard(card_files(str(hub_run / "checkpoints/ckpt-000002/hf"), str(hub_run), f"{ORG}/x",
                                revision="step-000002")["README.md"].decode())
    assert f"| final train loss (step 2) | {train2:.4f} |" in card.text
    assert f"{final['final_train_loss']:.4f}" not in card.text
    losses = {r.dataset_split: r.metric_value for r in card.data.eval_results if r.metric_type == "loss"}
    assert losses["eval"] == pytest.approx(eval2, abs=1e-6) and losses["eval"] != final["eval"]["eval"]


# ================================================================================================ the pieces
def test_a_checkpoint_branch_names_its_step():
    from depthbench.cards import revision_step

    assert [revision_step(r) for r in ("step-000120", "step-7", "main", None, "step-12a", "v1-step-3")] == \
        [120, 7, None, None, None, None]


def _run_config(data_dir) -> dict:
    return {"config": {"data": {"data_dir": str(data_dir)}}}


def test_training_data_names_hub_datasets_by_id_and_local_files_by_name(tmp_path):
    from depthbench.cards import CardInputs, training_data

    tokenizer = tmp_path / "tokenizers" / "my-tok"
    tokenizer.mkdir(parents=True)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "meta.json").write_text(json.dumps({"tokenizer": str(tokenizer), "sources": [
        {"kind": "hf", "path": "org/web", "split": "train"}, {"kind": "hf", "path": "org/web", "split": "test"},
        {"kind": "file", "path": str(tmp_path / "raw" / "books.txt")}, {"kind": "file"}, "not a source"]}))
    names, description = training_data(CardInputs(model_config={}, run_config=_run_config(corpus)))
    assert names == ["org/web", "corpus"]  # each Hub id once; the prepared folder stands for the local files
    assert description == "`corpus`: `org/web` (Hub dataset); local files `books.txt`; tokenizer `my-tok`"
    assert str(tmp_path) not in description
    (corpus / "meta.json").write_text(json.dumps({"tokenizer": "<tiny test tokenizer>", "sources": []}))
    assert training_data(CardInputs(model_config={}, run_config=_run_config(corpus))) == (["corpus"], "`corpus`")
    assert training_data(CardInputs(model_config={})) == ([], None)


def test_losses_come_from_the_summary_unless_the_run_moved_on_since():
    """A resumed run's ``metrics.jsonl`` goes past the step its old ``summary.json`` was written at: the card's
    held-out losses are then the newest logged ones; lm-eval metrics become entries, their stderr and aliases not;
    results recorded earlier (``depthbench eval``) stay unless the same dataset and metric is computed again."""
    from huggingface_hub import EvalResult

    from depthbench.cards import CardInputs, eval_results

    metrics = [{"step": 2, "train/loss": 3.0, "eval/web/loss": 2.9}, {"step": 4, "train/loss": 2.5},
               {"step": 4, "eval/web/loss": 2.4, "eval/books/loss": 2.7}]
    summary = {"steps": 4, "final_train_loss": 2.5, "eval": {"web": 2.45}}
    lm_eval = {"results": {"piqa": {"acc,none": 0.75, "acc_stderr,none": 0.1, "alias": "piqa", "note,none": "x"}}}
    kept = EvalResult(task_type="text-generation", dataset_type="hellaswag", dataset_name="hellaswag",
                      metric_type="acc", metric_value=0.3)
    stale = EvalResult(task_type="text-generation", dataset_type="piqa", dataset_name="piqa", metric_type="acc",
                       metric_value=0.1)

    def rows(**kwargs):
        inputs = CardInputs(model_config={}, metrics=metrics, lm_eval=lm_eval, recorded=[kept, stale], **kwargs)
        return {(r.dataset_name, r.metric_type): r.metric_value for r in eval_results(inputs, "m")}

    assert rows(summary=summary) == {("held-out web", "loss"): 2.45, ("piqa", "acc"): 0.75, ("hellaswag", "acc"): 0.3}
    metrics.append({"step": 6, "train/loss": 2.2, "eval/web/loss": 2.1})  # resumed, no new summary yet
    assert rows(summary=summary) == {("held-out books", "loss"): 2.7, ("held-out web", "loss"): 2.1,
                                     ("piqa", "acc"): 0.75, ("hellaswag", "acc"): 0.3}


def test_collect_inputs_needs_the_export_s_config_and_keeps_a_step_s_own_rows(tmp_path):
    from depthbench.cards import collect_inputs

    with pytest.raises(ValueError, match=f"{tmp_path} has no config.json: a model card needs the exported model's"):
        collect_inputs(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "depthbench_pre_ln"}))
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"steps": 4, "final_train_loss": 1.0}))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "train/loss": 5.0 - s}) + "\n"
                                               for s in (1, 2, 3, 4)))
    at_2 = collect_inputs(str(tmp_path), str(run), step=2)
    assert [r["step"] for r in at_2.metrics] == [1, 2] and at_2.summary is None
    at_4 = collect_inputs(str(tmp_path), str(run), step=4)
    assert len(at_4.metrics) == 4 and at_4.summary == {"steps": 4, "final_train_loss": 1.0}


def test_an_unknown_model_type_is_refused_naming_the_known_ones():
    from depthbench.cards import arch_for
    from depthbench.registry import ARCHITECTURES

    with pytest.raises(ValueError) as exc:
        arch_for({"model_type": "llama"})
    message = str(exc.value)
    assert message.startswith("model_type 'llama' is not a depthbench architecture; known: ")
    assert all(a.model_type in message for a in ARCHITECTURES.values())


# ================================================================================================ other cards
def test_an_sft_card_puts_only_hub_names_in_its_metadata(tmp_path):
    from huggingface_hub import ModelCard

    from depthbench.cards import write_sft_card

    summary = {"rows": 12, "epochs": 2, "steps": 6, "final_train_loss": 0.5}
    (tmp_path / "from-hub").mkdir()
    card = ModelCard.load(write_sft_card(tmp_path / "from-hub", "org/base-model", "org/commonsense", summary))
    assert (card.data.base_model, card.data.datasets, card.data.model_name) == \
        ("org/base-model", ["org/commonsense"], "from-hub")
    assert "Supervised fine-tune of `org/base-model`" in card.text and "12 rows, 2 epoch(s), 6 optimizer steps" in \
        card.text
    base, data, out = tmp_path / "base", tmp_path / "rows.jsonl", tmp_path / "local"
    base.mkdir()
    out.mkdir()
    data.write_text("{}\n")
    card = ModelCard.load(write_sft_card(out, str(base), str(data), summary))
    assert card.data.base_model is None and card.data.datasets is None
    assert f"Supervised fine-tune of `{base.resolve()}`" in card.text


def test_the_card_eval_starts_names_the_model():
    from huggingface_hub import ModelCard

    from depthbench.cards import evaluated_card

    card = ModelCard(str(evaluated_card("my-run")))  # as huggingface_hub parses it back
    assert (card.data.library_name, card.data.pipeline_tag) == ("transformers", "text-generation")
    assert card.text.lstrip().startswith("# my-run") and "Evaluated with `depthbench eval`." in card.text
