"""Run budgets: stop before an iteration that would overrun the run's token or dollar limit.

`budget.run_tokens` and `budget.run_cost_usd` cap what the agent spends in one `ralph run`
(agent-reported totals: prompt-side input incl. cache + output tokens, and cost). Before each
iteration the next one is estimated as the mean of the iterations so far; if spent + estimate
would pass a limit, the run stops with `BudgetExhausted` (exit 3). The first iteration always
runs (there is nothing to estimate from) unless a limit is already reached.

When an agent reports no usage, the tokens fall back to our own estimate (prompt tokens as
counted with tiktoken) and the run says so; cost cannot be estimated and is then not enforced
(we say that too rather than pretend).
`budget.warn_at` (a fraction, e.g. 0.8) prints one warning when a limit is that far used.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator import tokens
from orchestrator.errors import BudgetExhausted


@dataclass
class Budget:
    run_tokens: int | None = None
    run_cost_usd: float | None = None
    warn_at: float = 0.8
    spent_tokens: int = 0
    spent_cost: float = 0.0
    iterations: int = 0
    estimated_iterations: int = 0  # iterations whose tokens are our estimate, not reported
    uncosted_iterations: int = 0  # iterations with no reported cost
    _warned: set[str] = field(default_factory=set)

    def add(
        self, *, reported_tokens: int | None, estimated_tokens: int, cost_usd: float | None
    ) -> None:
        """Count one finished iteration."""
        self.iterations += 1
        if reported_tokens is None:
            self.estimated_iterations += 1
            self.spent_tokens += estimated_tokens
        else:
            self.spent_tokens += reported_tokens
        if cost_usd is None:
            self.uncosted_iterations += 1
        else:
            self.spent_cost += cost_usd

    def spend(self, tokens_used: int | None, cost_usd: float | None) -> None:
        """Count what a non-iteration attempt (limit hit, transient retry) spent: it adds to
        the totals but not to the iteration count the next-iteration estimate divides by."""
        self.spent_tokens += tokens_used or 0
        self.spent_cost += cost_usd or 0.0

    def _mean(self, total: float, n: int) -> float:
        return total / n if n else 0.0

    def check_next(self) -> None:
        """Raise BudgetExhausted if the next iteration (at the mean so far) would overrun."""
        if self.run_tokens is not None:
            nxt = self._mean(self.spent_tokens, self.iterations)
            if self.spent_tokens >= self.run_tokens or (
                self.iterations and self.spent_tokens + nxt > self.run_tokens
            ):
                raise BudgetExhausted(
                    f"token budget: {tokens.fmt(self.spent_tokens)} of "
                    f"{tokens.fmt(self.run_tokens)} spent in {self.iterations} iteration(s); "
                    f"the next one (~{tokens.fmt(nxt)} at the mean so far) would overrun it"
                    f"{self._estimate_note()}. Raise budget.run_tokens in ralph.yaml or "
                    "--budget-tokens, then run again to continue."
                )
        costed = self.iterations - self.uncosted_iterations
        if self.run_cost_usd is not None and costed:
            nxt_cost = self._mean(self.spent_cost, costed)
            if self.spent_cost + nxt_cost > self.run_cost_usd:
                raise BudgetExhausted(
                    f"cost budget: ${self.spent_cost:.2f} of ${self.run_cost_usd:.2f} spent; "
                    f"the next iteration (~${nxt_cost:.2f} at the mean so far) would overrun "
                    "it. Raise budget.run_cost_usd in ralph.yaml or --budget-usd, then run "
                    "again to continue."
                )

    def _estimate_note(self) -> str:
        if not self.estimated_iterations:
            return ""
        return (
            f" ({self.estimated_iterations} iteration(s) without agent-reported usage "
            "counted at our prompt-token estimate)"
        )

    def warnings(self) -> list[str]:
        """New warnings since the last call (each limit warns once)."""
        out = []
        if (
            self.run_tokens
            and "tokens" not in self._warned
            and self.spent_tokens >= self.warn_at * self.run_tokens
        ):
            self._warned.add("tokens")
            out.append(
                f"{self.spent_tokens / self.run_tokens:.0%} of the token budget "
                f"({tokens.fmt(self.run_tokens)}) used{self._estimate_note()}"
            )
        if (
            self.run_cost_usd
            and "cost" not in self._warned
            and self.spent_cost >= self.warn_at * self.run_cost_usd
        ):
            self._warned.add("cost")
            out.append(
                f"{self.spent_cost / self.run_cost_usd:.0%} of the cost budget "
                f"(${self.run_cost_usd:.2f}) used"
            )
        if self.run_cost_usd and "nocost" not in self._warned and self.uncosted_iterations:
            self._warned.add("nocost")
            out.append(
                "the agent reports no cost: budget.run_cost_usd cannot be enforced "
                "for those iterations"
            )
        if self.run_tokens and "estimated" not in self._warned and self.estimated_iterations:
            self._warned.add("estimated")
            out.append(
                "the agent reports no token usage: the token budget uses our "
                "prompt-token estimates (output not counted)"
            )
        return out
