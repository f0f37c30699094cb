"""knowledge.ports: knowledge's one door to the ledger, wired by ledger's ready()."""

import ast
import pathlib

import pytest

from knowledge import ports

KNOWLEDGE = pathlib.Path(ports.__file__).parent


def test_every_port_is_wired_by_the_ledger_app():
    assert set(ports._impl) == set(ports.NAMES)


def test_an_unwired_port_raises_a_clear_error(monkeypatch):
    monkeypatch.setattr(ports, "_impl", {})
    with pytest.raises(ports.PortNotWired, match="event_is_verified is not wired"):
        ports.event_is_verified(event_id=1)


def test_wire_refuses_an_unknown_port():
    with pytest.raises(TypeError, match="no port named nope"):
        ports.wire(nope=lambda: None)


def test_knowledge_imports_nothing_from_ledger():
    found = []
    for path in KNOWLEDGE.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [f"{path.name}:{node.lineno} {n}" for n in names if n == "ledger" or n.startswith("ledger.")]
    assert found == []
