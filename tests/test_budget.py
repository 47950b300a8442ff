"""Run budgets: stop before the iteration that would overrun, warn once, say when estimated."""

from __future__ import annotations

import pytest

from orchestrator.errors import EXIT_BUDGET, BudgetExhausted
from orchestrator.run.budget import Budget


def test_no_limits_never_stop() -> None:
    b = Budget()
    for _ in range(5):
        b.check_next()
        b.add(reported_tokens=10**6, estimated_tokens=0, cost_usd=9.0)
    assert b.warnings() == []


def test_first_iteration_always_runs_then_mean_predicts() -> None:
    b = Budget(run_tokens=1000)
    b.check_next()
    b.add(reported_tokens=400, estimated_tokens=50, cost_usd=None)
    b.check_next()  # 400 + 400 <= 1000
    b.add(reported_tokens=400, estimated_tokens=50, cost_usd=None)
    with pytest.raises(BudgetExhausted) as exc:  # 800 + 400 > 1000
        b.check_next()
    assert exc.value.exit_code == EXIT_BUDGET
    assert "budget.run_tokens" in str(exc.value)


def test_cost_budget_and_warning_once() -> None:
    b = Budget(run_cost_usd=1.0, warn_at=0.5)
    b.add(reported_tokens=10, estimated_tokens=0, cost_usd=0.4)
    assert b.warnings() == []
    b.check_next()
    b.add(reported_tokens=10, estimated_tokens=0, cost_usd=0.4)
    assert any("cost budget" in w for w in b.warnings())
    assert b.warnings() == []  # once
    with pytest.raises(BudgetExhausted, match=r"\$0\.80 of \$1\.00"):
        b.check_next()


def test_without_reported_usage_estimates_are_used_and_said() -> None:
    b = Budget(run_tokens=100, run_cost_usd=5.0)
    b.add(reported_tokens=None, estimated_tokens=60, cost_usd=None)
    warnings = " ".join(b.warnings())
    assert "estimate" in warnings and "cannot be enforced" in warnings
    with pytest.raises(BudgetExhausted, match="without agent-reported usage"):
        b.check_next()


def test_retries_add_spend_but_not_iterations() -> None:
    b = Budget(run_tokens=1000)
    b.add(reported_tokens=300, estimated_tokens=0, cost_usd=None)
    b.spend(250, None)  # a transient retry
    assert (b.spent_tokens, b.iterations) == (550, 1)
    with pytest.raises(BudgetExhausted):  # 550 + 550 (mean of 1 iteration) > 1000
        b.check_next()
