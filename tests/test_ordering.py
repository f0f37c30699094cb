"""The workers' order (tests/ordering.py): every test runs once, each worker's share starts with its long tests,
longest first, the long tests are spread over the shares, a module's tests sharing a module fixture stay together,
and nothing changes when nothing is long."""

from types import SimpleNamespace

from tests.ordering import LONGEST_SECONDS, _shares, longest_first

LONGEST = next(iter(LONGEST_SECONDS))  # a nodeid the table knows


class Item:
    def __init__(self, nodeid: str, *, slow: bool = False, module_fixture: bool = False):
        self.nodeid, self.slow = nodeid, slow
        scope = "module" if module_fixture else "function"
        self._fixtureinfo = SimpleNamespace(name2fixturedefs={
            "fixture": [SimpleNamespace(scope=scope, baseid=nodeid.split("::")[0])],
            "_plugins_own": [SimpleNamespace(scope="class", baseid="")]})  # as pytest-django's autouse one

    def get_closest_marker(self, name):
        return object() if name == "slow" and self.slow else None

    def __repr__(self):
        return self.nodeid


def _split(ordered: list, workers: int) -> list[list]:
    shares, start = [], 0
    for size in _shares(len(ordered), workers):
        shares.append(ordered[start:start + size])
        start += size
    return shares


def test_each_share_starts_with_its_long_tests_longest_first_and_ends_quick():
    items = [Item(f"tests/a.py::quick_{n}") for n in range(30)]
    items[7:7] = [Item(f"tests/b.py::slow_{n}", slow=True) for n in range(5)]
    items.append(Item(LONGEST, slow=True))
    ordered = longest_first(list(items), 3)
    assert sorted(map(id, ordered)) == sorted(map(id, items))  # each test once
    shares = _split(ordered, 3)
    assert [share[0].slow for share in shares] == [True, True, True]  # every worker starts on a long test
    assert shares[0][0].nodeid == LONGEST
    counts = [sum(item.slow for item in share) for share in shares]
    assert counts[0] == 1 and sorted(counts[1:]) == [2, 3]  # the longest test's worker gets no other long one
    for share in shares:
        assert not share[-1].slow  # a share ends with quick tests, for the others to take over
    quick = [item.nodeid for item in ordered if not item.slow]
    assert quick == [item.nodeid for item in items if not item.slow]  # in their collection order


def test_tests_sharing_a_module_fixture_stay_together():
    items = [Item(f"tests/a.py::quick_{n}") for n in range(12)]
    items += [Item(f"tests/server.py::t{n}", slow=True, module_fixture=True) for n in range(3)]
    items += [Item(f"tests/c.py::slow_{n}", slow=True) for n in range(2)]
    ordered = [item.nodeid for item in longest_first(list(items), 3)]
    start = ordered.index("tests/server.py::t0")
    assert ordered[start:start + 3] == ["tests/server.py::t0", "tests/server.py::t1", "tests/server.py::t2"]


def test_nothing_long_or_one_worker_keeps_the_collection_order():
    quick = [Item(f"tests/a.py::quick_{n}") for n in range(10)]
    assert longest_first(list(quick), 3) == quick
    mixed = [*quick, Item(LONGEST, slow=True)]
    assert longest_first(list(mixed), 1) == mixed


def test_more_long_tests_than_a_share_holds_are_placed_one_by_one():
    items = [Item(f"tests/server.py::t{n}", slow=True, module_fixture=True) for n in range(7)]
    ordered = longest_first(list(items), 3)
    assert sorted(map(id, ordered)) == sorted(map(id, items))
