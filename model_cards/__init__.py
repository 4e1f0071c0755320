"""Model-card templates (Jinja, rendered by huggingface_hub's ``ModelCard.from_template``); see README.md here."""
