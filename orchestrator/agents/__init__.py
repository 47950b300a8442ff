"""Agent adapters: one module per coding-agent CLI, built by name through `get_agent`."""

from __future__ import annotations

from orchestrator.agents.base import (
    BUILTIN,
    Agent,
    AgentResult,
    AgentSettings,
    Usage,
    available,
    get_agent,
)

__all__ = ["BUILTIN", "Agent", "AgentResult", "AgentSettings", "Usage", "available", "get_agent"]
