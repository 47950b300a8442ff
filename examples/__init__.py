"""Example projects, shipped as package data (see orchestrator/sim/examples.py)."""
