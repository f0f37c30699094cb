"""The run page's drawing is generated from ledger/machine.py and stays readable."""

import itertools

from ledger.domain import machine
from ledger.web import drawing


def _overlaps(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_drawing_edges_are_the_machine_edges():
    """Every edge of the machine is drawn (edges of the many-state causes summed up in the legend),
    and one of those is drawn once the run took it."""
    drawn = {(e["from"], e["to"]) for e in drawing.state_machine([], "captured")["edges"]}
    rare_only = {(a, b) for a, b in machine.EDGES if set(machine.causes(a, b)) <= drawing.RARE}
    assert drawn == set(machine.EDGES) - rare_only
    taken = drawing.state_machine([(7, {"from": "completed", "to": "restore"})], "restore")["edges"]
    assert ("completed", "restore") in {(e["from"], e["to"]) for e in taken}
    assert all(state in drawing.GRID for pair in machine.EDGES for state in pair)


def test_drawing_labels_name_the_causes():
    edges = {(e["from"], e["to"]): e for e in drawing.state_machine([], "captured")["edges"]}
    for (a, b), edge in edges.items():
        assert edge["causes"] == "/".join(machine.causes(a, b))


def test_drawing_labels_overlap_neither_each_other_nor_boxes():
    """Readable: no label box overlaps another label or a state box, and all sit inside the canvas."""
    path = [(3, {"from": "captured", "to": "restore"}), (5, {"from": "restore", "to": "fresh"}),
            (7, {"from": "fresh", "to": "execute"}), (9, {"from": "execute", "to": "checkpointed"}),
            (12, {"from": "checkpointed", "to": "execute"}), (14, {"from": "execute", "to": "failed"})]
    for transitions in ([], path):
        m = drawing.state_machine(transitions, "failed")
        labels = [e["label_box"] for e in m["edges"]]
        boxes = [drawing._box(s) for s in drawing.GRID]
        for a, b in itertools.combinations(labels, 2):
            assert not _overlaps(a, b), (a, b)
        for label in labels:
            assert not any(_overlaps(label, box) for box in boxes), label
            assert 0 <= label[0] and label[2] <= m["width"] and 0 <= label[1] and label[3] <= m["height"]


def test_drawing_numbers_taken_edges_with_the_ledger_seq():
    """The numbers on the path are the seq of each transition event, not step counts."""
    m = drawing.state_machine([(4, {"from": "captured", "to": "restore"}), (6, {"from": "restore", "to": "fresh"}),
                               (11, {"from": "fresh", "to": "execute"})], "execute")
    taken = {(e["from"], e["to"]): e["steps"] for e in m["edges"] if e["taken"]}
    assert taken == {("captured", "restore"): "#4", ("restore", "fresh"): "#6", ("fresh", "execute"): "#11"}
    assert m["path"] == ["captured", "restore", "fresh", "execute"]
    assert [n["name"] for n in m["nodes"] if n["current"]] == ["execute"]


def test_drawing_shows_a_taken_lease_expiry():
    m = drawing.state_machine([(2, {"from": "captured", "to": "failed"})], "failed")
    edge = next(e for e in m["edges"] if (e["from"], e["to"]) == ("captured", "failed"))
    assert edge["taken"] and edge["causes"] == "lease_expired" and edge["steps"] == "#2"
    assert "lease_expired" in m["legend"]
