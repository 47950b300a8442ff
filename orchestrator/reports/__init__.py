"""A/B arms, reports and charts from ledgers, replaying a history."""
