"""Layer analyses (angular distance, causal/permutation/usefulness scores, ...)."""
