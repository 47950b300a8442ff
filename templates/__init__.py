"""Data package: prompt and config templates shipped with ralph-index (read via importlib.resources)."""
