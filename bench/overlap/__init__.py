"""The `overlap` kind: how much communication a step hides, and what communication and compute
cost each other (docs/overlap.md)."""
