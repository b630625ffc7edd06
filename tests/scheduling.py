"""How ``make test`` spreads the suite over its xdist workers (tests/conftest.py's hook).

A work unit is a whole module (its module fixtures are built once), or every user of a costly
session fixture together (one worker builds it; the scheduler sees node ids only, so those
users are listed here by path). The shared-fixture groups go out first, in the order listed,
then the modules in collection order: integration before unit tests, so that small unit
modules fill the tail (xdist's own order, most tests first, left single-test DAG modules of
minutes for the end). A worker gets its next unit only when it is down to the one test it
holds back (an xdist worker runs a test once it knows the next), so that no unit waits
queued behind another while the other worker is idle.
"""

from __future__ import annotations

# costly session fixture -> the paths (files or folders) of every test that uses it
SHARED_FIXTURE_PATHS = {
    "pipeline": ("tests/integration/orchestration/test_precompute_dag.py",
                 "tests/integration/orchestration/test_multinode.py",
                 "tests/integration/reliability/test_pipeline_faults.py",
                 "tests/integration/model/test_two_tower_dag.py"),
    "model_data_root": ("tests/integration/model/",),
    "inference_inputs": ("tests/integration/model/",),
}


def work_group(nodeid: str) -> str:
    """The scheduling unit of a test: its fixture group (the first that lists it), else its
    module's path."""
    path = nodeid.split("::", 1)[0]
    for fixture, paths in SHARED_FIXTURE_PATHS.items():
        if path.startswith(paths):
            return fixture
    return path


def make_scheduler(config, log):
    """The xdist scheduler of the suite (``LoadScopeScheduling`` with the units above)."""
    from xdist.scheduler import LoadScopeScheduling

    class Groups(LoadScopeScheduling):
        def __init__(self, config, log=None) -> None:
            super().__init__(config, log)
            config.option.loadscopereorder = False  # collection order, not most tests first

        def _split_scope(self, nodeid: str) -> str:
            return work_group(nodeid)

        def _assign_work_unit(self, node) -> None:
            shared = next((g for g in SHARED_FIXTURE_PATHS if g in self.workqueue), None)
            if shared is not None:
                self.workqueue.move_to_end(shared, last=False)
            super()._assign_work_unit(node)

        def _reschedule(self, node) -> None:
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) <= 1:
                self._assign_work_unit(node)

    return Groups(config, log)
