"""The run page's drawings are generated from ledger/domain/machine.py and the run's own events."""

from ledger.domain import machine
from ledger.web import drawing

PATH = [{"seq": 1, "from": "captured", "to": "restore", "cause": "decided"},
        {"seq": 2, "from": "restore", "to": "fresh", "cause": "decided"},
        {"seq": 5, "from": "fresh", "to": "execute", "cause": "started", "stage": "build"},
        {"seq": 7, "from": "execute", "to": "failed", "cause": "failed", "stage": "build"}]


def test_path_lists_the_states_in_order_with_causes_and_seq():
    path = drawing.run_path(PATH, "failed")
    assert [s["state"] for s in path["steps"]] == ["captured", "restore", "fresh", "execute", "failed"]
    assert [(s["cause"], s["seq"]) for s in path["steps"][1:]] == [("decided", 1), ("decided", 2), ("started", 5),
                                                                   ("failed", 7)]
    assert path["steps"][-1]["current"] and path["now"]["terminal"] and path["now"]["step"]["seq"] == 7
    assert all(s["allowed"] for s in path["steps"][1:])


def test_full_machine_lists_every_transition_once_and_marks_the_taken():
    table = drawing.machine_table(PATH, "failed")
    assert {r["state"] for r in table["rows"]} == set(machine.RunState.values) and table["states"] == 17
    listed = {(r["state"], c, e["to"]) for r in table["rows"] for e in r["out"] for c in e["causes"]}
    assert listed == {(str(a), c, str(b)) for a, c, b in machine.TRANSITIONS}
    taken = {(r["state"], e["to"]) for r in table["rows"] for e in r["out"] if e["taken"]}
    assert taken == {("captured", "restore"), ("restore", "fresh"), ("fresh", "execute"), ("execute", "failed")}
