"""Example projects, shipped as package data (see orchestrator/examples.py)."""
