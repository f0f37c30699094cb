"""Lease long-polls waited in the event loop, not in a web thread (SPEC §11.3).

The web tier serves Django's WSGI app from a thread pool inside an ASGI server (``stateboard.asgi``).
A ``POST /runs/lease/`` passes through the one request pipeline like any request; when it finds no
queued run and asked to wait, the view answers 204 with ``WAIT_HEADER`` (the seconds it may wait)
instead of sleeping. ``LeaseWaits`` then parks the request as a future — no thread, no database
connection — and sends the same request through the pipeline again when a run is queued: PostgreSQL
``NOTIFY`` (one ``LISTEN`` connection per process) names the queued run's workflow, and the oldest
waiter that could take it is woken; one that finds nothing passes the wake-up on while the run is still
queued (``queued_left``: when a waiter of another process took it, the chain ends). On SQLite, which
cannot notify, a waiter retries once a second. At its deadline a waiter gets the last 204: while LISTEN
held, its last look's answer (nothing was queued for it since), so deadlines that meet cost no looks.

A waiter whose client went away (``http.disconnect``) is out of the queue at once, never woken; a lease
granted to a request whose client is known to be gone is given back at once (``lease_releaser``, wired
by the ledger app), so the run is queued for a live agent instead of lapsing with its lease.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

WAITS_OUTSIDE = "stateboard.lease_waits_outside"  # WSGI environ key: set by the ASGI entry, not by a client
WAIT_HEADER = "stateboard-lease-wait"  # the view's answer to the ASGI entry, never sent to a client
GRANT_HEADER = "stateboard-lease-granted"  # likewise: "<run id> <lease id> <event count>" of a lease it granted
CHANNEL = "stateboard_queued"  # NOTIFY payload: the queued run's workflow slug
LEASE_PATH = "/api/v1/runs/lease/"
POLL_SECONDS = 1.0  # without NOTIFY (SQLite)
RECONNECT_SECONDS = 1.0

log = logging.getLogger(__name__)


def _no_releaser(*, run_id: str, lease_id: str, event_count: int) -> bool:
    raise RuntimeError("No lease releaser is wired (the ledger app sets stateboard.waits.lease_releaser).")


lease_releaser: Callable[..., bool] = _no_releaser


def _anything_queued(workflow: str) -> bool:
    return True  # unwired (no ledger app): every wake-up is passed on, as far as its budget goes


queued_left: Callable[[str], bool] = _anything_queued  # wired by the ledger app (``services.queued_left``)


@dataclass(eq=False)
class Waiter:
    workflows: frozenset[str]  # empty: any workflow
    gone: asyncio.Future | None = None  # done once its client went away
    woken: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())

    def takes(self, slug: str | None) -> bool:
        if self.gone is not None and self.gone.done():
            return False
        return slug is None or not self.workflows or slug in self.workflows


class LeaseWaits:
    """The waiting lease requests of one process, oldest first, and the wake-ups that reach them."""

    def __init__(self, listen: bool):
        self.listen = listen  # False: poll (no NOTIFY)
        self.queue: deque[Waiter] = deque()
        self.generation = 0  # counts wake-ups: a request that missed one while it ran retries at once
        self.listening = False  # LISTEN in effect: every run queued from now on wakes a waiter
        self.stopping = False  # the server was told to stop (``stop``): nobody waits any more
        self._listener: asyncio.Task | None = None

    def notify(self, slug: str | None, budget: int | None = None) -> None:
        """A run of ``slug`` (None: of any workflow) may be leasable: wake the oldest waiter that could
        take it, carrying how many more may be woken if it finds nothing."""
        self.generation += 1
        budget = len(self.queue) if budget is None else budget
        for waiter in self.queue:
            if budget > 0 and waiter.takes(slug) and not waiter.woken.done():
                self.queue.remove(waiter)
                waiter.woken.set_result((slug, budget - 1))
                return

    def stop(self) -> None:
        """The server is stopping: every waiter answers now (its last look's 204) and none waits again, so the
        server's drain does not wait out the long-polls (they hold nothing: an agent just asks again)."""
        self.stopping = True
        self.wake_all()

    def wake_all(self) -> None:
        """After a lost LISTEN connection: whatever was notified meanwhile is unknown, so everyone looks."""
        self.generation += 1
        while self.queue:
            waiter = self.queue.popleft()
            if not waiter.woken.done():
                waiter.woken.set_result((None, 0))

    async def wait(self, waiter: Waiter, seconds: float):
        """Until woken (``(slug, budget)``), or ``seconds`` pass or its client goes away (None)."""
        if self.listen:
            self._listener_ensure()
        else:
            seconds = min(seconds, POLL_SECONDS)
        self.queue.append(waiter)
        try:
            await asyncio.wait([waiter.woken, *([waiter.gone] if waiter.gone is not None else [])],
                               timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if waiter in self.queue:
                self.queue.remove(waiter)
        if not waiter.woken.done():
            return None
        if waiter.gone is not None and waiter.gone.done():  # woken as its client went: the next one looks
            self.notify(*waiter.woken.result())
            return None
        return waiter.woken.result()

    def _listener_ensure(self) -> None:
        if self._listener is None or self._listener.done():
            self._listener = asyncio.get_running_loop().create_task(self._listen())

    async def _listen(self) -> None:
        import psycopg

        while True:
            try:
                async with await psycopg.AsyncConnection.connect(conninfo(), autocommit=True) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    self.listening = True
                    self.wake_all()  # anything queued before LISTEN took effect is looked for now
                    async for note in conn.notifies():
                        self.notify(note.payload or None)
            except asyncio.CancelledError:
                raise
            except Exception:  # the database went away: waiters fall back on their deadlines meanwhile
                log.warning("lease waits: LISTEN connection lost; reconnecting", exc_info=True)
            finally:
                self.listening = False
            await asyncio.sleep(RECONNECT_SECONDS)


def conninfo() -> str:
    """The default database's connection string for the LISTEN connection."""
    from django.conf import settings
    from psycopg.conninfo import make_conninfo

    db = settings.DATABASES["default"]
    params = {"dbname": db.get("NAME"), "user": db.get("USER"), "password": db.get("PASSWORD"),
              "host": db.get("HOST"), "port": str(db.get("PORT") or "")}
    params.update({key: value for key, value in (db.get("OPTIONS") or {}).items()
                   if isinstance(value, (str, int)) and key not in ("client_encoding", "prepare_threshold")})
    return make_conninfo(**{key: value for key, value in params.items() if value not in (None, "")})


class Captured:
    """One pass of a request through the WSGI app, held until we know whether to send it."""

    def __init__(self):
        self.start: dict | None = None
        self.body: list[dict] = []

    async def send(self, message: dict) -> None:
        if message["type"] == "http.response.start":
            self.start = message
        else:
            self.body.append(message)

    def header_pop(self, header: str) -> bytes | None:
        """The value of one of the view's headers to this entry, removed from what the client gets."""
        if self.start is None:
            return None
        headers, found = [], None
        for name, value in self.start.get("headers", []):
            if name.lower() == header.encode():
                found = value
            else:
                headers.append((name, value))
        self.start = {**self.start, "headers": headers}
        return found

    def wait_seconds(self) -> float | None:
        """The seconds the view said this request may wait, with the header removed."""
        value = self.header_pop(WAIT_HEADER)
        if value is None or self.start["status"] != 204:
            return None
        try:
            return float(value)
        except ValueError:
            return None

    def granted(self) -> tuple[str, str, int] | None:
        """The lease the view granted (run id, lease id, event count), with the header removed."""
        value = self.header_pop(GRANT_HEADER)
        parts = value.decode("latin-1").split() if value is not None and self.start["status"] == 200 else []
        return (parts[0], parts[1], int(parts[2])) if len(parts) == 3 and parts[2].isdigit() else None

    async def replay(self, send) -> None:
        await send(self.start)
        for message in self.body:
            await send(message)


def workflows_of(body: bytes) -> frozenset[str]:
    """The workflow filter of a lease body, for waking only waiters that could take a run (a body the
    view refused never waits, so anything unreadable here just means "any")."""
    try:
        workflows = json.loads(body or b"{}").get("workflows") or []
        return frozenset(w for w in workflows if isinstance(w, str))
    except (ValueError, AttributeError, TypeError):
        return frozenset()


class LeaseWaitingApp:
    """ASGI: every request to ``wsgi_app`` (an ASGI adapter of Django's WSGI app); a lease that may wait
    is re-sent through it when woken, until it gets a run or its deadline passes."""

    def __init__(self, asgi_app, waits: LeaseWaits, body_limit: int):
        self.app, self.waits, self.body_limit = asgi_app, waits, body_limit

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":  # the LISTEN task starts on first use; a stop answers every waiter
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    stop_on_signals(self.waits)
                await send({"type": f"{message['type']}.complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != LEASE_PATH:
            return await self.app(scope, receive, send)
        arrived = time.monotonic()  # wait_seconds counts from here, not from the first look's answer
        body, unread = await body_read(receive, self.body_limit)
        if unread:  # (a body over the limit: refused at the first look, it never waits)
            send = closing(send)
        deadline, slug_budget, gone = None, 0, None
        try:
            while True:
                generation = self.waits.generation
                captured = Captured()
                await self.app(scope, _receive_of(body), captured.send)
                granted = captured.granted()
                if granted and gone is not None:
                    await asyncio.sleep(0)  # a disconnect that arrived during the look is seen now
                    if gone.done():  # nobody to give the run to: it goes back to the queue
                        await asyncio.get_running_loop().run_in_executor(None, lease_release, *granted)
                        return await _nothing(send)
                seconds = captured.wait_seconds()
                if seconds is None or self.waits.stopping:
                    return await captured.replay(send)
                if deadline is None:
                    deadline = arrived + seconds
                    gone = asyncio.get_running_loop().create_task(client_gone(receive))
                elif slug_budget and await asyncio.get_running_loop().run_in_executor(
                        None, queued_still, slug_budget[0]):
                    # Woken but found nothing it may take, and the run is still queued: the next waiter may.
                    self.waits.notify(slug_budget[0], slug_budget[1])
                    generation += 1  # its own wake-up is no news to it (it would look again at once)
                remaining = deadline - time.monotonic()
                if remaining <= 0 or gone.done():
                    return await captured.replay(send)
                if self.waits.generation != generation:
                    slug_budget = 0
                    continue  # a run was queued while this request looked: look again now
                listened = self.waits.listening
                woken = await self.waits.wait(Waiter(workflows_of(body), gone), remaining)
                if gone.done() or self.waits.stopping:  # gone, or the server stops: its last answer now
                    return await captured.replay(send)
                if woken is None and listened and self.waits.listening and time.monotonic() >= deadline:
                    # Its deadline, unwoken while LISTEN held: nothing was queued for it since its last look,
                    # so its last answer stands (a look now would only stampede when many deadlines meet).
                    return await captured.replay(send)
                slug_budget = woken if woken and woken[1] > 0 else 0
        finally:
            if gone is not None:
                gone.cancel()


def stop_on_signals(waits: LeaseWaits, signals=(signal.SIGTERM, signal.SIGINT)) -> bool:
    """When the worker is told to stop, answer its long-polls at once (``waits.stop``) instead of letting the
    server's drain wait them out (up to their deadline, or its kill timeout). Chained before the handler the
    server installed (granian's, through the event loop, is a Python handler too); nothing is installed
    where none is (the default action stays) or off the main thread. Whether it was installed."""
    loop = asyncio.get_running_loop()
    installed = False
    for sig in signals:
        previous = signal.getsignal(sig)
        if not callable(previous):
            continue

        def on_signal(signum, frame, previous=previous):
            loop.call_soon_threadsafe(waits.stop)
            previous(signum, frame)

        try:
            signal.signal(sig, on_signal)
        except ValueError:  # not the main thread
            return installed
        installed = True
    return installed


async def client_gone(receive) -> None:
    """Returns once the client has gone away: after the whole body, a server's next message is
    ``http.disconnect``, sent when the connection closes (one that sends anything else never tells)."""
    if (await receive())["type"] != "http.disconnect":
        await asyncio.get_running_loop().create_future()  # until cancelled


def queued_still(slug: str | None) -> bool:
    """Whether a woken waiter that found nothing passes its wake-up on: only while a run of ``slug`` is still
    queued and not being taken (every process LISTENs, so every process wakes a waiter for each queued run;
    the ones that lost the race would otherwise wake their whole queue in turn). On a thread of its own."""
    from django.db import connections

    if slug is None:
        return True
    try:
        return queued_left(slug)
    except Exception:  # as before the check: the next waiter looks
        log.exception("lease waits: could not tell whether a run of %s is still queued", slug)
        return True
    finally:
        connections.close_all()


def lease_release(run_id: str, lease_id: str, event_count: int) -> None:
    """Give back a lease whose answer could not be delivered (on a thread of its own: the ORM is sync)."""
    from django.db import connections

    try:
        if lease_releaser(run_id=run_id, lease_id=lease_id, event_count=event_count):
            log.info("lease waits: run %s given back (its lease's client went away)", run_id)
    except Exception:  # the lease then lapses as it would have
        log.exception("lease waits: could not give back run %s", run_id)
    finally:
        connections.close_all()


async def _nothing(send) -> None:
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


async def body_read(receive, limit: int) -> tuple[bytes, bool]:
    """The request's body as it came, read up to ``limit`` bytes and one more: enough for Django to refuse a
    larger one (413); a client that went away mid-body leaves what it sent (400 ``body_incomplete``).

    The rest of a larger body is read and dropped (up to ``DRAIN_BYTES`` within ``DRAIN_SECONDS``), so the
    connection is left at the next request's first byte, never in the middle of this one's body. The
    second value says some is still unread: the answer must then close the connection (``closing``)."""
    chunks, size = [], 0
    while size <= limit:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if not message.get("more_body"):
            return b"".join(chunks), False
    return b"".join(chunks), not await _rest_drop(receive)


DRAIN_BYTES = 16 * 1024 * 1024
DRAIN_SECONDS = 2.0


async def _rest_drop(receive) -> bool:
    """Read and drop the rest of a body; whether it came to its end in time."""
    dropped = 0
    try:
        async with asyncio.timeout(DRAIN_SECONDS):
            while dropped <= DRAIN_BYTES:
                message = await receive()
                if message["type"] != "http.request" or not message.get("more_body"):
                    return True
                dropped += len(message.get("body", b""))
    except TimeoutError:
        pass
    return False


def closing(send):
    """``send`` with ``Connection: close`` on the answer (its request's body was left unread)."""

    async def send_closing(message: dict) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
        await send(message)

    return send_closing


def _receive_of(body: bytes):
    """An ASGI ``receive`` that gives ``body`` once, then a disconnect (each look of a lease reads it anew)."""
    sent = False

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    return receive
