"""Reproduction suite for published claims about the Transformer block."""
