"""The order the xdist workers run the tests in (the plugin ``LongestFirst``, registered by tests/conftest.py).

``--dist worksteal`` hands each of the N workers one contiguous Nth of the collection, then lets a worker that ran
out take the back half of another's queue (the tests not started yet). A long test near the end of a worker's share
starts late and runs on alone after the others are done: the run's tail. So each share starts with its long tests,
longest first, with its quick tests spread between them (the long ones mostly wait on processes, servers or a
browser; the quick ones use the cores meanwhile), and ends with a third of its quick tests, which idle workers
take over. Which share gets which long test: the least loaded so far, longest test first. Only the order changes,
never what runs; ``-n 0``, another ``--dist`` and ``-m "not slow"`` (nothing long) keep the collection's order.
"""

import pytest

# Seconds each of the longest tests takes alone (`-n 0` on the 2-core machine; the slowest of --durations=30 of a
# full run): a nodeid, or a nodeid before its parameters to cover each of them. Any other `slow` test counts as
# SLOW_SECONDS, any other test as QUICK_SECONDS. A name that no longer exists here only loses its place.
LONGEST_SECONDS = {
    "tests/bench/test_instructions.py::test_bench_instructions_counts_each_loop": 44,
    "tests/stateboard/test_up.py::test_up_migrates_seeds_and_serves_on_sqlite": 42,
    "tests/browser/test_approvals_browser.py::"
    "test_a_reason_typed_at_human_speed_survives_the_refresh_and_no_page_logs_an_error": 38,
    "tests/bench/test_ledger.py::test_bench_ledger_prints_positive_figures": 28,
    "tests/bench/test_fleet.py::test_bench_fleet_steps_agents_without_then_with_the_trace_export_and_prints_the_capacity": 24,
    "tests/bench/test_pages.py::test_bench_pages_prints_every_page": 22,
}
SLOW_SECONDS = 5.0
QUICK_SECONDS = 0.1
LONG = SLOW_SECONDS  # a unit of tests this long or longer is placed as a long one
QUICK_END = 3  # the last third of a share's quick tests come after its long ones (a margin for a long test
#                that takes longer than its estimate: it still ends before the share does)


def _seconds(item) -> float:
    for key in (item.nodeid, item.nodeid.split("[", 1)[0]):
        if key in LONGEST_SECONDS:
            return float(LONGEST_SECONDS[key])
    return SLOW_SECONDS if item.get_closest_marker("slow") else QUICK_SECONDS


def _shares(count: int, workers: int) -> list[int]:
    """How many tests worksteal gives each worker at the start (xdist.scheduler.worksteal.check_schedule)."""
    sizes, left = [], count
    for i in range(workers):
        sizes.append(left // (workers - i))
        left -= sizes[-1]
    return sizes


def _units(items) -> list[list]:
    """The items in runs that must stay together: a module's tests that share a module- or class-scoped fixture
    (set up again whenever the tests between them come from elsewhere), else each test alone."""
    units, by_module = [], {}
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        shared = info is not None and any(  # one of this suite's (a plugin's, as pytest-django's, has no baseid)
            definitions[-1].scope in ("module", "class", "package") and definitions[-1].baseid
            for definitions in info.name2fixturedefs.values() if definitions)
        if not shared:
            units.append([item])
            continue
        module = item.nodeid.split("::", 1)[0]
        if module not in by_module:
            by_module[module] = []
            units.append(by_module[module])
        by_module[module].append(item)
    return units


def longest_first(items: list, workers: int) -> list:
    """``items`` reordered for ``workers`` worksteal workers (see above); the same list when nothing is long."""
    seconds = {id(item): _seconds(item) for item in items}
    units = _units(items)
    weight = [sum(seconds[id(item)] for item in unit) for unit in units]
    long = sorted((i for i in range(len(units)) if weight[i] >= LONG), key=lambda i: (-weight[i], i))
    if not long or workers < 2:
        return items
    capacity = _shares(len(items), workers)
    load, placed = [0.0] * workers, [[] for _ in range(workers)]
    quick = [units[i] for i in range(len(units)) if weight[i] < LONG]
    pending = [(weight[i], units[i]) for i in long]
    while pending:
        seconds_of, unit = pending.pop(0)
        fits = [w for w in range(workers) if len(unit) <= capacity[w]]
        if not fits:  # more tests than any share has room for (a few files on many workers): placed one by one
            pending = sorted(pending + [(seconds[id(item)], [item]) for item in unit], key=lambda p: -p[0])
            continue
        w = min(fits, key=lambda w: (load[w], w))
        placed[w].append(unit)
        capacity[w] -= len(unit)
        load[w] += seconds_of
    rest = iter(item for unit in quick for item in unit)  # in collection order (pytest-django's: db tests first)
    ordered = []
    for w in range(workers):
        fill = [next(rest) for _ in range(capacity[w])]
        end = len(fill) - len(fill) // QUICK_END  # the share's last tests: quick ones only
        gaps = len(placed[w])
        for g, unit in enumerate(placed[w]):  # a long unit, then its part of the other quick tests
            ordered.extend(unit)
            ordered.extend(fill[g * end // gaps:(g + 1) * end // gaps])
        ordered.extend(fill[end:] if gaps else fill)
    assert len(ordered) == len(items)
    return ordered


class LongestFirst:
    """The plugin (registered by tests/conftest.py): the order, once the marks are set, `-m` has deselected and
    pytest-django has put the database tests first."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        workerinput = getattr(config, "workerinput", None)  # an xdist worker: each computes the same order
        if workerinput is None or config.getvalue("dist") != "worksteal":
            return
        items[:] = longest_first(items, int(workerinput["workercount"]))
