"""The lease waits' bookkeeping (stateboard.waits.LeaseWaits), in one event loop, no server."""

import asyncio

from stateboard.waits import LeaseWaits, Waiter, _receive_of, workflows_of


def _run(coroutine):
    return asyncio.run(coroutine)


async def _parked(waits, *filters, seconds=5):
    waiters = [Waiter(frozenset(f)) for f in filters]
    tasks = [asyncio.create_task(waits.wait(w, seconds)) for w in waiters]
    await asyncio.sleep(0)
    return waiters, tasks


def test_a_notification_wakes_the_oldest_waiter_that_takes_the_workflow():
    async def scenario():
        waits = LeaseWaits(listen=False)
        waits.listen = True  # no listener task in this test: notifications are sent by hand
        waits._listener_ensure = lambda: None
        _, tasks = await _parked(waits, {"b"}, set(), {"a"})
        waits.notify("a")
        await asyncio.sleep(0.01)
        done = [t.done() for t in tasks]
        assert done == [False, True, False]  # the "b" waiter cannot take it; the next (any workflow) can
        assert tasks[1].result() == ("a", 2)  # it may pass the wake-up on to two more
        waits.notify("a", 0)  # nothing left to pass on
        await asyncio.sleep(0.01)
        assert [t.done() for t in tasks] == [False, True, False]
        waits.wake_all()
        await asyncio.gather(*tasks)
        assert not waits.queue

    _run(scenario())


def test_the_generation_counts_every_wake_up():
    waits = LeaseWaits(listen=False)
    before = waits.generation
    waits.notify("a")
    waits.wake_all()
    assert waits.generation == before + 2


def test_without_notify_a_waiter_looks_again_within_a_second():
    async def scenario():
        waits = LeaseWaits(listen=False)
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await waits.wait(Waiter(frozenset()), 30) is None
        return loop.time() - started

    assert _run(scenario()) <= 1.5


def test_workflows_of_a_body_and_the_replayed_receive():
    assert workflows_of(b'{"workflows": ["a", 3, "b"], "wait_seconds": 5}') == {"a", "b"}
    assert workflows_of(b"not json") == frozenset() and workflows_of(b"[1]") == frozenset()

    async def scenario():
        receive = _receive_of(b"body")
        return [await receive(), await receive()]

    first, second = _run(scenario())
    assert first == {"type": "http.request", "body": b"body", "more_body": False}
    assert second == {"type": "http.disconnect"}


def test_a_waiter_whose_client_went_is_never_woken_and_a_wake_up_goes_on():
    async def scenario():
        waits = LeaseWaits(listen=True)
        waits._listener_ensure = lambda: None
        gone = asyncio.get_running_loop().create_future()
        tasks = [asyncio.create_task(waits.wait(Waiter(frozenset(), gone), 5)),
                 asyncio.create_task(waits.wait(Waiter(frozenset()), 5))]
        await asyncio.sleep(0)
        gone.set_result(None)  # its client went: the next wake-up skips it, though it is still queued
        waits.notify("a")
        await asyncio.sleep(0.01)
        assert tasks[0].done() and tasks[0].result() is None
        assert tasks[1].result() == ("a", 1) and not waits.queue

    _run(scenario())
