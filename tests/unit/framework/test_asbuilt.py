"""Values worked out from a snapshot's nodes as built are kept in its memo, once per snapshot."""

from types import SimpleNamespace

from kai.framework.asbuilt import nodes_as_built
from kai.framework.memo import Memo, MemoKey

KEY: MemoKey[object] = MemoKey("test/none")


def _session(nodes, before=None):
    snapshot = SimpleNamespace(memo=Memo(), memo_before=before.snapshot.memo if before else Memo(), nodes=nodes)
    return SimpleNamespace(snapshot=snapshot)


def test_a_value_of_none_is_worked_out_once_per_snapshot_and_taken_over_while_the_nodes_are_the_same():
    calls = []

    def compute():
        calls.append(1)

    nodes = [object(), object()]
    first = _session(nodes)
    assert nodes_as_built(first, KEY, compute) is None
    assert nodes_as_built(first, KEY, compute) is None
    assert len(calls) == 1
    assert nodes_as_built(_session(list(nodes), before=first), KEY, compute) is None
    assert len(calls) == 1
    assert nodes_as_built(_session([object()], before=first), KEY, compute) is None
    assert len(calls) == 2
