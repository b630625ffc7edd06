"""``make demo``: the product's showcase on embedded defaults.

Simulates a small world into the data root, validates it against the log contract and prints
the realism summary. Later stages (speculation, inference, publishing, the Airflow cycle)
extend this script as they land.
"""

from __future__ import annotations

import logging
import sys
import time

from solaris_lib.cli import configure_logging
from solaris_lib.config import load_settings
from solaris_lib.layout import DataLayout
from solaris_lib.simulate.config import WorldConfig

log = logging.getLogger("solaris.demo")
DEMO_WORLD = WorldConfig(users=1500, items=2000, days=6, seed=7)


def banner(text: str) -> None:
    print(f"\n=== {text} ===", flush=True)


def simulate(layout: DataLayout, world: WorldConfig) -> None:
    from solaris_lib.simulate.world import Simulator

    banner(f"1. simulate {world.users:,} users, {world.items:,} live campaigns, {world.days} days")
    result = Simulator(world).run(layout.logs, overwrite=True)
    print(f"wrote {result.rows:,} rows in {result.files} hourly partitions "
          f"({result.rows_per_s:,.0f} rows/s) to {result.out}")


def validate(layout: DataLayout) -> None:
    from solaris_lib.logs.validate import validate_dir

    banner("2. validate the logs against the contract")
    reports = validate_dir(layout.logs)
    bad = [r for r in reports if r.error]
    rows = sum(r.rows_read for r in reports)
    quarantined = sum(r.rows_quarantined for r in reports)
    print(f"{len(reports)} files, {rows:,} rows, {quarantined:,} quarantined, {len(bad)} failed")
    if bad:
        raise SystemExit(f"demo: {bad[0].path}: {bad[0].error}")


def summarize(layout: DataLayout) -> None:
    from solaris_lib.simulate.summary import format_summary
    from solaris_lib.simulate.summary import summarize as compute

    banner("3. realism of the simulated world (measured from the logs)")
    print(format_summary(compute(layout.logs)))


def main() -> int:
    configure_logging(verbose=False)
    started = time.perf_counter()
    layout = DataLayout.from_settings(load_settings())
    simulate(layout, DEMO_WORLD)
    validate(layout)
    summarize(layout)
    print(f"\ndemo finished in {time.perf_counter() - started:.0f} s; data under {layout.root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
