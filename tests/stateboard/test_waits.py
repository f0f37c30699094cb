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


def _lease_app(waits, looks: list, may_wait: bytes = b"0.2"):
    """A LeaseWaitingApp over a stand-in for the WSGI app that answers every look 204 "may wait 0.2 s"."""
    from stateboard.waits import WAIT_HEADER, LeaseWaitingApp

    async def app(scope, receive, send):
        looks.append(1)
        await send({"type": "http.response.start", "status": 204, "headers": [(WAIT_HEADER.encode(), may_wait)]})
        await send({"type": "http.response.body", "body": b""})

    return LeaseWaitingApp(app, waits, 1024)


async def _lease(app, wait_seconds: bytes = b"0.2") -> list[dict]:
    sent, received = [], asyncio.Event()

    async def receive():
        if not received.is_set():
            received.set()
            return {"type": "http.request", "body": b'{"wait_seconds": ' + wait_seconds + b"}", "more_body": False}
        await asyncio.Event().wait()  # the client stays

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/api/v1/runs/lease/"}
    await app(scope, receive, send)
    return sent


def test_at_its_deadline_a_waiter_answers_its_last_look_while_listen_holds_and_looks_again_otherwise():
    """Deadlines that meet must not stampede the pipeline: unwoken while LISTEN held, nothing was queued for
    the waiter since its last look, so that answer is sent. Without LISTEN (lost, or SQLite) it looks again."""
    async def scenario(listening: bool):
        waits, looks = LeaseWaits(listen=True), []
        waits._listener_ensure = lambda: None
        waits.listening = listening
        sent = await _lease(_lease_app(waits, looks))
        assert sent[0]["status"] == 204 and all(name != b"stateboard-lease-wait" for name, _ in sent[0]["headers"])
        return len(looks)

    assert _run(scenario(True)) == 1
    assert _run(scenario(False)) == 2


def test_a_stop_answers_every_waiting_long_poll_at_once_and_no_request_waits_after_it():
    """The server told to stop (``LeaseWaits.stop``): a 10 s long-poll gets its last look's 204 now, not at
    its deadline (the drain would wait it out), and a lease asked afterwards answers at its first look."""
    import time

    async def scenario():
        waits, looks = LeaseWaits(listen=False), []
        app = _lease_app(waits, looks, b"10")
        started = time.monotonic()
        polling = asyncio.create_task(_lease(app, b"10"))
        await asyncio.sleep(0.3)
        assert not polling.done()
        waits.stop()
        sent = await asyncio.wait_for(polling, 1)
        answered = time.monotonic() - started
        assert sent[0]["status"] == 204 and answered < 1.5, answered
        before = len(looks)
        after = await asyncio.wait_for(_lease(app, b"10"), 1)
        assert after[0]["status"] == 204 and len(looks) == before + 1

    _run(scenario())


def test_stop_on_signals_runs_before_the_servers_own_handler_and_leaves_default_actions_alone():
    """granian's worker handles SIGTERM through its event loop: the hook answers the waiters and the
    server's handler still runs. A signal nobody handles keeps its default action (no hook)."""
    import os
    import signal

    from stateboard.waits import stop_on_signals

    async def scenario():
        loop, waits, servers = asyncio.get_running_loop(), LeaseWaits(listen=False), []
        loop.add_signal_handler(signal.SIGUSR2, lambda: servers.append("stop"))
        try:
            assert stop_on_signals(waits, (signal.SIGUSR2,)) is True
            assert stop_on_signals(waits, (signal.SIGUSR1,)) is False
            assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
            os.kill(os.getpid(), signal.SIGUSR2)
            for _ in range(50):
                await asyncio.sleep(0.02)
                if waits.stopping and servers:
                    break
            assert waits.stopping and servers == ["stop"]
        finally:
            loop.remove_signal_handler(signal.SIGUSR2)
            signal.signal(signal.SIGUSR2, signal.SIG_DFL)

    _run(scenario())


def test_a_woken_waiter_that_found_nothing_passes_the_wake_up_on_only_while_the_run_is_still_queued(monkeypatch):
    """Every process LISTENs, so each queued run wakes a waiter in each; the waiters that lost the race to
    another process find nothing. Passing the wake-up on then would walk their whole queue, a look per waiter
    for one run (the fleet's collapse past ~350 agents): it goes on only while ``queued_left`` says a run of
    that workflow is still queued (one a waiter may not take, by the workflow's ``agents``)."""
    from stateboard import waits as waits_module

    async def scenario(still_queued: bool) -> tuple[int, list[str]]:
        waits, looks, asked = LeaseWaits(listen=True), [], []
        waits._listener_ensure = lambda: None
        waits.listening = True
        monkeypatch.setattr(waits_module, "queued_left", lambda slug: asked.append(slug) or still_queued)
        app = _lease_app(waits, looks, may_wait=b"1")
        leases = [asyncio.create_task(_lease(app, b"1")) for _ in range(3)]
        await asyncio.sleep(0.05)  # each looked once and waits
        assert len(looks) == 3 and len(waits.queue) == 3
        waits.notify("a")  # a run of "a" was queued; the oldest waiter looks and finds nothing
        await asyncio.sleep(0.2)
        woken_looks = len(looks) - 3
        waits.stop()
        await asyncio.gather(*leases)
        return woken_looks, asked

    assert _run(scenario(False)) == (1, ["a"])  # taken elsewhere: the chain ends at the first waiter
    # Still queued: each waiter in turn looks once (the last has no budget left to pass it on).
    assert _run(scenario(True)) == (3, ["a", "a"])
