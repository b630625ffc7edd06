"""The suite's xdist work units (tests/scheduling.py): shared-fixture groups first, then whole
modules in collection order, the next unit only when a worker holds its last test."""

from collections import OrderedDict
from types import SimpleNamespace

from tests.scheduling import make_scheduler, work_group

NODEIDS = [
    "tests/integration/cache/test_x.py::test_one",
    "tests/integration/cache/test_x.py::test_two[a]",
    "tests/integration/model/test_train.py::test_three",
    "tests/integration/model/test_two_tower_dag.py::test_four",
    "tests/integration/orchestration/test_multinode.py::test_five",
    "tests/unit/test_u.py::Case::test_six",
]


class Node:
    """A worker as the scheduler sees it: the test indices it was sent."""

    def __init__(self) -> None:
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices):
        self.sent.extend(indices)


def scheduler_on(nodeids):
    config = SimpleNamespace(option=SimpleNamespace(loadscopereorder=True),
                             getvalue={"tx": ["2*popen"]}.get)
    sched = make_scheduler(config, None)
    sched.workqueue = OrderedDict()
    for nodeid in nodeids:
        sched.workqueue.setdefault(sched._split_scope(nodeid), {})[nodeid] = False
    node = Node()
    sched.registered_collections = {node: list(nodeids)}
    return sched, node


def test_units_are_the_listed_fixture_groups_else_modules():
    assert [work_group(n) for n in NODEIDS] == [
        "tests/integration/cache/test_x.py", "tests/integration/cache/test_x.py",
        "model_data_root", "pipeline", "pipeline", "tests/unit/test_u.py"]


def test_the_pipeline_goes_out_first_then_units_in_collection_order():
    sched, node = scheduler_on(NODEIDS)
    assert not sched.config.option.loadscopereorder
    order = []
    while sched.workqueue:
        sched._assign_work_unit(node)
        order.append(sorted(node.sent))
        node.sent.clear()
    assert order == [[3, 4], [2], [0, 1], [5]]


def test_a_worker_gets_more_only_when_it_holds_its_last_test():
    sched, node = scheduler_on(NODEIDS)
    sched._assign_work_unit(node)  # the pipeline: two tests
    sched._reschedule(node)
    assert sorted(node.sent) == [3, 4]  # two pending: nothing more yet
    sched.assigned_work[node]["pipeline"][NODEIDS[3]] = True
    sched._reschedule(node)
    assert sorted(node.sent) == [2, 3, 4]  # down to the one it holds back: the next unit
