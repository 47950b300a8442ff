"""Data package: prompt and config templates shipped with ralph-index.

Read with importlib.resources.
"""
