"""Lease long-polls waited in the event loop, not in a web thread (SPEC §11.3).

The web tier serves Django's WSGI app from a thread pool inside an ASGI server (``stateboard.asgi``).
A ``POST /runs/lease/`` passes through the one request pipeline like any request; when it finds no
queued run and asked to wait, the view answers 204 with ``WAIT_HEADER`` (the seconds it may wait)
instead of sleeping. ``LeaseWaits`` then parks the request as a future — no thread, no database
connection — and sends the same request through the pipeline again when a run is queued: PostgreSQL
``NOTIFY`` (one ``LISTEN`` connection per process) names the queued run's workflow, and the oldest
waiter that could take it is woken; one that finds nothing passes the wake-up on. On SQLite, which
cannot notify, a waiter retries once a second. At its deadline a waiter gets the last 204.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from dataclasses import dataclass, field

WAITS_OUTSIDE = "stateboard.lease_waits_outside"  # WSGI environ key: set by the ASGI entry, not by a client
WAIT_HEADER = "stateboard-lease-wait"  # the view's answer to the ASGI entry, never sent to a client
CHANNEL = "stateboard_queued"  # NOTIFY payload: the queued run's workflow slug
LEASE_PATH = "/api/v1/runs/lease/"
POLL_SECONDS = 1.0  # without NOTIFY (SQLite)
RECONNECT_SECONDS = 1.0

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Waiter:
    workflows: frozenset[str]  # empty: any workflow
    woken: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())

    def takes(self, slug: str | None) -> bool:
        return slug is None or not self.workflows or slug in self.workflows


class LeaseWaits:
    """The waiting lease requests of one process, oldest first, and the wake-ups that reach them."""

    def __init__(self, listen: bool):
        self.listen = listen  # False: poll (no NOTIFY)
        self.queue: deque[Waiter] = deque()
        self.generation = 0  # counts wake-ups: a request that missed one while it ran retries at once
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

    def wake_all(self) -> None:
        """After a lost LISTEN connection: whatever was notified meanwhile is unknown, so everyone looks."""
        self.generation += 1
        while self.queue:
            waiter = self.queue.popleft()
            if not waiter.woken.done():
                waiter.woken.set_result((None, 0))

    async def wait(self, waiter: Waiter, seconds: float):
        """Until woken (``(slug, budget)``) or ``seconds`` pass (None)."""
        if self.listen:
            self._listener_ensure()
        else:
            seconds = min(seconds, POLL_SECONDS)
        self.queue.append(waiter)
        try:
            return await asyncio.wait_for(asyncio.shield(waiter.woken), seconds)
        except asyncio.TimeoutError:
            if waiter.woken.done():  # woken as its time ran out: the wake-up goes to the next one
                slug, budget = waiter.woken.result()
                self.notify(slug, budget)
            return None
        finally:
            if waiter in self.queue:
                self.queue.remove(waiter)

    def _listener_ensure(self) -> None:
        if self._listener is None or self._listener.done():
            self._listener = asyncio.get_running_loop().create_task(self._listen())

    async def _listen(self) -> None:
        import psycopg

        while True:
            try:
                async with await psycopg.AsyncConnection.connect(conninfo(), autocommit=True) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    self.wake_all()  # anything queued before LISTEN took effect is looked for now
                    async for note in conn.notifies():
                        self.notify(note.payload or None)
            except asyncio.CancelledError:
                raise
            except Exception:  # the database went away: waiters fall back on their deadlines meanwhile
                log.warning("lease waits: LISTEN connection lost; reconnecting", exc_info=True)
            await asyncio.sleep(RECONNECT_SECONDS)


def conninfo() -> str:
    """The default database's connection string for the LISTEN connection."""
    from django.conf import settings
    from psycopg.conninfo import make_conninfo

    db = settings.DATABASES["default"]
    params = {"dbname": db.get("NAME"), "user": db.get("USER"), "password": db.get("PASSWORD"),
              "host": db.get("HOST"), "port": str(db.get("PORT") or "")}
    params.update({key: value for key, value in (db.get("OPTIONS") or {}).items()
                   if isinstance(value, (str, int)) and key not in ("client_encoding",)})
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

    def wait_seconds(self) -> float | None:
        """The seconds the view said this request may wait, with the header removed."""
        if self.start is None or self.start["status"] != 204:
            return None
        headers, seconds = [], None
        for name, value in self.start.get("headers", []):
            if name.lower() == WAIT_HEADER.encode():
                try:
                    seconds = float(value)
                except ValueError:
                    seconds = None
            else:
                headers.append((name, value))
        self.start = {**self.start, "headers": headers}
        return seconds

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
        if scope["type"] == "lifespan":  # nothing to start or stop: the LISTEN task starts on first use
            while True:
                message = await receive()
                await send({"type": f"{message['type']}.complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != LEASE_PATH:
            return await self.app(scope, receive, send)
        arrived = time.monotonic()  # wait_seconds counts from here, not from the first look's answer
        body = await body_read(receive, self.body_limit)
        deadline, slug_budget = None, 0
        while True:
            generation = self.waits.generation
            captured = Captured()
            await self.app(scope, _receive_of(body), captured.send)
            seconds = captured.wait_seconds()
            if seconds is None:
                return await captured.replay(send)
            if deadline is None:
                deadline = arrived + seconds
            elif slug_budget:  # woken but found nothing: the next waiter may take it
                self.waits.notify(slug_budget[0], slug_budget[1])
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return await captured.replay(send)
            if self.waits.generation != generation:
                slug_budget = 0
                continue  # a run was queued while this request looked: look again now
            woken = await self.waits.wait(Waiter(workflows_of(body)), remaining)
            slug_budget = woken if woken and woken[1] > 0 else 0


async def body_read(receive, limit: int) -> bytes:
    """The request's body as it came, read up to ``limit`` bytes and one more: enough for Django to refuse a
    larger one (413); a client that went away mid-body leaves what it sent (400 ``body_incomplete``)."""
    chunks, size = [], 0
    while size <= limit:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if not message.get("more_body"):
            break
    return b"".join(chunks)


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
