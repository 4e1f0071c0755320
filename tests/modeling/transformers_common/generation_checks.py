"""Our stand-in for transformers' ``GenerationTesterMixin`` (its file, ``tests/generation/test_utils.py``, is not in
the sdist): the generation contract a decoder-only model is held to, checked for a model tester's model classes.

transformers' ``test_modeling_common.py`` imports ``GenerationTesterMixin`` from that missing file; the suite
(``suite.py``) hands it this class instead, so the common tests' own check that a model able to ``generate`` is
tested by the generation mixin holds. Every check is written here from the documented ``generate`` contract
(``GenerateDecoderOnlyOutput`` / ``GenerateBeamDecoderOnlyOutput``); the names are those of the transformers tests
they stand for:

* ``test_greedy_generate(_dict_outputs(_use_cache))``, ``test_sample_generate(_dict_output)``,
  ``test_beam_search_generate(_dict_output(s_use_cache))``, ``test_beam_sample_generate(_dict_output)``: shapes
  of ``sequences``, ``scores``, ``logits``, per-step ``attentions`` (``[B, H, T_q, T_kv]``) and ``hidden_states``
  (``L + 1`` of ``[B, T_q, d]``), the cache length, beam scores and indices; the same tokens with and without the
  cache; the same samples for the same seed;
* ``test_generate_continue_from_past_key_values``, ``test_left_padding_compatibility``,
  ``test_generate_from_inputs_embeds``, ``test_past_key_values_format``,
  ``test_prompt_lookup_decoding_matches_greedy_search``, ``test_assisted_decoding_matches_greedy_search``,
  ``test_generate_with_static_cache``.
"""

from __future__ import annotations

import copy

import torch

NEW_TOKENS = 3
BATCH = 2


class GenerationTesterMixin:
    """Mixed into a ``unittest.TestCase`` with ``model_tester`` (``prepare_config_and_inputs_for_common``,
    ``num_hidden_layers``, ``num_attention_heads``, ``hidden_size``) and ``all_generative_model_classes``."""

    all_generative_model_classes: tuple = ()

    # ------------------------------------------------------------------------------------------------ helpers
    def _generation_setup(self, model_class, attn_implementation: str = "eager"):
        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        config = copy.deepcopy(config)
        config._attn_implementation = attn_implementation
        torch.manual_seed(0)
        model = model_class(config).eval()
        ids = inputs["input_ids"][:BATCH]
        return model, ids, torch.ones_like(ids)

    def _generate(self, model, ids, mask, **kwargs):
        kw = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, pad_token_id=model.config.pad_token_id,
                  eos_token_id=None)
        kw.update(kwargs)
        with torch.no_grad():
            return model.generate(input_ids=ids, attention_mask=mask, **kw)

    def _generative_classes(self):
        if not self.all_generative_model_classes:
            self.skipTest("no generative model class")
        return self.all_generative_model_classes

    def _check_dict_outputs(self, model, out, prompt: int, use_cache: bool, rows: int, beams: int = 1):
        """The shape contract of ``generate(..., return_dict_in_generate=True, output_*=True)``."""
        tester, layers = self.model_tester, self.model_tester.num_hidden_layers
        self.assertEqual(tuple(out.sequences.shape), (rows, prompt + NEW_TOKENS))
        for name in ("scores", "logits"):
            steps = getattr(out, name)
            self.assertEqual(len(steps), NEW_TOKENS, name)
            for step in steps:
                self.assertEqual(tuple(step.shape), (BATCH * beams, model.config.vocab_size), name)
        self.assertEqual(len(out.attentions), NEW_TOKENS)
        self.assertEqual(len(out.hidden_states), NEW_TOKENS)
        for step, (attentions, hidden) in enumerate(zip(out.attentions, out.hidden_states, strict=True)):
            kv_len = prompt + step
            q_len = kv_len if not use_cache else (prompt if step == 0 else 1)  # no cache: the whole sequence
            self.assertEqual(len(attentions), layers)
            for weights in attentions:
                self.assertEqual(tuple(weights.shape), (BATCH * beams, tester.num_attention_heads, q_len, kv_len))
            self.assertEqual(len(hidden), layers + 1)
            for state in hidden:
                self.assertEqual(tuple(state.shape), (BATCH * beams, q_len, tester.hidden_size))
        cache = getattr(out, "cache", None) if hasattr(out, "cache") else getattr(out, "past_key_values", None)
        if use_cache:
            self.assertIsNotNone(cache)
            self.assertEqual(cache.get_seq_length(), prompt + NEW_TOKENS - 1)
        else:
            self.assertIsNone(cache)
        if beams > 1:
            self.assertEqual(tuple(out.sequences_scores.shape), (rows,))
            self.assertEqual(out.beam_indices.shape[0], rows)

    def _dict_generate(self, do_sample: bool, num_beams: int, use_cache: bool):
        for model_class in self._generative_classes():
            with self.subTest(model_class.__name__):
                model, ids, mask = self._generation_setup(model_class)
                torch.manual_seed(0)
                out = self._generate(
                    model, ids, mask, do_sample=do_sample, num_beams=num_beams, use_cache=use_cache,
                    num_return_sequences=num_beams, output_scores=True, output_logits=True,
                    output_attentions=True, output_hidden_states=True, return_dict_in_generate=True,
                )
                self._check_dict_outputs(model, out, ids.shape[1], use_cache, BATCH * num_beams, beams=num_beams)

    def _same_tokens_with_and_without_cache(self, **kwargs):
        for model_class in self._generative_classes():
            with self.subTest(model_class.__name__):
                model, ids, mask = self._generation_setup(model_class, "sdpa")
                torch.manual_seed(0)
                cached = self._generate(model, ids, mask, use_cache=True, **kwargs)
                torch.manual_seed(0)
                uncached = self._generate(model, ids, mask, use_cache=False, **kwargs)
                self.assertEqual(cached.shape, (BATCH * kwargs.get("num_return_sequences", 1), ids.shape[1] + 3))
                self.assertTrue(torch.equal(cached, uncached))

    # ------------------------------------------------------------------------------------ greedy, sample, beams
    def test_greedy_generate(self):
        self._same_tokens_with_and_without_cache(do_sample=False)

    def test_greedy_generate_dict_outputs(self):
        self._dict_generate(do_sample=False, num_beams=1, use_cache=False)

    def test_greedy_generate_dict_outputs_use_cache(self):
        self._dict_generate(do_sample=False, num_beams=1, use_cache=True)

    def test_sample_generate(self):
        self._same_tokens_with_and_without_cache(do_sample=True, top_k=10, num_return_sequences=2)

    def test_sample_generate_dict_output(self):
        self._dict_generate(do_sample=True, num_beams=1, use_cache=True)

    def test_beam_search_generate(self):
        self._same_tokens_with_and_without_cache(do_sample=False, num_beams=2, num_return_sequences=2)

    def test_beam_search_generate_dict_output(self):
        self._dict_generate(do_sample=False, num_beams=2, use_cache=False)

    def test_beam_search_generate_dict_outputs_use_cache(self):
        self._dict_generate(do_sample=False, num_beams=2, use_cache=True)

    def test_beam_sample_generate(self):
        self._same_tokens_with_and_without_cache(do_sample=True, num_beams=2, num_return_sequences=2)

    def test_beam_sample_generate_dict_output(self):
        self._dict_generate(do_sample=True, num_beams=2, use_cache=True)

    # ---------------------------------------------------------------------------------------- cache and inputs
    def test_generate_continue_from_past_key_values(self):
        """Generating 3 tokens, then 3 more from the returned cache, gives the 6 tokens of one call."""
        for model_class in self._generative_classes():
            with self.subTest(model_class.__name__):
                model, ids, mask = self._generation_setup(model_class, "sdpa")
                whole = self._generate(model, ids, mask, max_new_tokens=6, min_new_tokens=6)
                first = self._generate(model, ids, mask, return_dict_in_generate=True)
                cache = first.cache if hasattr(first, "cache") else first.past_key_values
                cont = self._generate(model, first.sequences, torch.ones_like(first.sequences),
                                      **{"cache" if hasattr(first, "cache") else "past_key_values": cache})
                self.assertTrue(torch.equal(whole, cont))

    def test_left_padding_compatibility(self):
        """Left padding (with the matching mask and positions) does not change the last token's logits."""
        for model_class in self._generative_classes():
            with self.subTest(model_class.__name__):
                model, ids, mask = self._generation_setup(model_class, "sdpa")
                pad = torch.full((BATCH, 3), model.config.pad_token_id, dtype=ids.dtype)
                padded_ids = torch.cat([pad, ids], dim=1)
                padded_mask = torch.cat([torch.zeros_like(pad), mask], dim=1)
                positions = (padded_mask.cumsum(-1) - 1).clamp(min=0)
                with torch.no_grad():
                    plain = model(input_ids=ids, attention_mask=mask).logits[:, -1]
                    padded = model(input_ids=padded_ids, attention_mask=padded_mask, position_ids=positions)
                torch.testing.assert_close(padded.logits[:, -1], plain, rtol=1e-5, atol=1e-5)

    def test_generate_from_inputs_embeds(self):
        """``generate(inputs_embeds=...)`` continues as ``generate(input_ids=...)`` does (decoder-only: the
        returned sequences hold the new tokens only)."""
        for model_class in self._generative_classes():
            with self.subTest(model_class.__name__):
                model, ids, mask = self._generation_setup(model_class, "sdpa")
                from_ids = self._generate(model, ids, mask)
                embeds = model.get_input_embeddings()(ids)
                kw = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, eos_token_id=None,
                          pad_token_id=model.config.pad_token_id)
                with torch.no_grad():
                    from_embeds = model.generate(inputs_embeds=embeds, attention_mask=mask, **kw)
                self.assertTrue(torch.equal(from_embeds, from_ids[:, ids.shape[1]:]))

    def test_past_key_values_format(self):
        """The returned cache holds, per layer, keys and values ``[B, H_kv, T, head_dim]``."""
        for model_class in self._generative_classes():
            with self.subTest(model_class.__name__):
                model, ids, mask = self._generation_setup(model_class, "sdpa")
                with torch.no_grad():
                    out = model(input_ids=ids, attention_mask=mask, use_cache=True)
                cache = out.cache if hasattr(out, "cache") else out.past_key_values
                config = model.config
                head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
                expected = (BATCH, config.num_key_value_heads, ids.shape[1], head_dim)
                self.assertEqual(len(cache.layers), config.num_hidden_layers)
                for layer in cache.layers:
                    self.assertEqual(tuple(layer.keys.shape), expected)
                    self.assertEqual(tuple(layer.values.shape), expected)

    def test_generate_with_static_cache(self):
        """A static cache gives the dynamic cache's greedy tokens."""
        for model_class in self._generative_classes():
            with self.subTest(model_class.__name__):
                model, ids, mask = self._generation_setup(model_class, "sdpa")
                dynamic = self._generate(model, ids, mask)
                static = self._generate(model, ids, mask, cache_implementation="static")
                self.assertTrue(torch.equal(dynamic, static))

    # ------------------------------------------------------------------------------------ candidate decoding
    def test_prompt_lookup_decoding_matches_greedy_search(self):
        for model_class in self._generative_classes():
            with self.subTest(model_class.__name__):
                model, ids, mask = self._generation_setup(model_class, "sdpa")
                ids, mask = ids[:1], mask[:1]  # candidate decoding runs one sequence at a time
                greedy = self._generate(model, ids, mask)
                lookup = self._generate(model, ids, mask, prompt_lookup_num_tokens=2)
                self.assertTrue(torch.equal(greedy, lookup))

    def test_assisted_decoding_matches_greedy_search(self):
        for model_class in self._generative_classes():
            with self.subTest(model_class.__name__):
                model, ids, mask = self._generation_setup(model_class, "sdpa")
                ids, mask = ids[:1], mask[:1]
                greedy = self._generate(model, ids, mask)
                torch.manual_seed(1)
                assistant = type(model)(copy.deepcopy(model.config)).eval()  # a different draft model
                assisted = self._generate(model, ids, mask, assistant_model=assistant)
                self.assertTrue(torch.equal(greedy, assisted))
