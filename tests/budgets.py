"""Time budgets for tests that check *what* is served, not how fast: CI machines are small and
loaded (Spark JVMs, other tests), so a lookup's product default of 20 ms would make correctness
tests flaky. Timing is measured by benchmarks/, never asserted here."""

TEST_TIMEOUT_MS = 2000.0
