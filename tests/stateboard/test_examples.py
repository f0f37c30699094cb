"""``python -m stateboard.examples.NAME``, each run as a real process against a live server: what it prints and
what the ledger holds afterwards."""

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from ledger import services
from ledger.models import Effect, LedgerEvent, Run
from stateboard.client import Client
from tests.factories import make_agent, make_operator

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]  # each example runs as a process

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def env(live_server):
    agent, token = make_agent()
    _, owner = make_operator("owner")
    return {**os.environ, "STATEBOARD_URL": live_server.url, "STATEBOARD_TOKEN": token,
            "STATEBOARD_OWNER_TOKEN": owner, "PYTHONUNBUFFERED": "1", "AGENT": agent.username}


def run_example(name: str, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", f"stateboard.examples.{name}", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


class Example:
    """An example running in the background; ``until(text)`` reads its output up to a line holding text."""

    def __init__(self, name: str, env: dict, *args: str):
        self.process = subprocess.Popen([sys.executable, "-m", f"stateboard.examples.{name}", *args], env=env,
                                        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: queue.Queue = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=lambda: [self.lines.put(line.rstrip()) for line in self.process.stdout],
                         daemon=True).start()

    def until(self, text: str, timeout: float = 20) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                continue
            self.output.append(line)
            if text in line:
                return line
        raise AssertionError(f"no {text!r} in:\n" + "\n".join(self.output))

    def finish(self, timeout: float = 20) -> int:
        code = self.process.wait(timeout=timeout)
        time.sleep(0.1)
        while not self.lines.empty():
            self.output.append(self.lines.get())
        return code

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def test_example_hello_runs_once_then_decides_noop(env):
    """The first run creates the workflow and passes every stage with the publish verified; the second is a
    noop that performs nothing; new inputs are a fresh run of their own. One effect per input, each verified."""
    first = run_example("hello", env)
    assert first.returncode == 0, first.stderr
    assert "created workflow 'hello'" in first.stdout
    assert "decided fresh / no_checkpoint" in first.stdout and "publish: verified" in first.stdout
    assert first.stdout.strip().splitlines()[-1].split()[2] == "completed"

    second = run_example("hello", {**env, "STATEBOARD_OWNER_TOKEN": ""})
    assert second.returncode == 0, second.stderr
    assert "decided noop / verified_effect_same_fingerprint" in second.stdout
    assert "publish" not in second.stdout and "created" not in second.stdout

    changed = run_example("hello", env, "--source", "v2")
    assert "decided fresh / input_changed" in changed.stdout and "publish: verified" in changed.stdout

    runs = Run.objects.filter(workflow__slug="hello").order_by("created_at")
    assert [r.state for r in runs] == ["completed", "noop", "completed"]
    assert sorted(Effect.objects.filter(run__workflow__slug="hello").values_list("status", flat=True)) == [
        "verified", "verified"]
    assert LedgerEvent.objects.filter(run=runs[1]).exclude(kind__in=("decided", "transition")).count() == 0


def test_example_without_its_workflow_or_token_says_what_to_set(env):
    """No owner token and no workflow yet: it exits naming the variable and the command; no token at all: too."""
    missing = run_example("hello", {**env, "STATEBOARD_OWNER_TOKEN": ""})
    assert missing.returncode == 1 and "STATEBOARD_OWNER_TOKEN" in missing.stderr
    assert "create_operator" in missing.stderr and not Run.objects.exists()
    no_token = run_example("hello", {**env, "STATEBOARD_TOKEN": ""})
    assert no_token.returncode == 1 and "create_agent" in no_token.stderr


def test_example_scheduled_leases_and_serves_each_tick(env):
    """The agent long-polls lease; each schedule tick's run is leased by it at once and served to completed;
    it exits after --max-runs."""
    agent = Example("scheduled", env, "--max-runs", "2")
    try:
        agent.until("waiting for runs of hello-scheduled")
        for slot in ("2026-12-06T01:00:00Z", "2026-12-06T01:05:00Z"):
            services.schedule_tick(workflow_slug="hello-scheduled", slot=slot)
            agent.until(f"(tick {slot})")
            agent.until(": completed")
        assert agent.finish() == 0
    finally:
        agent.stop()
    assert agent.output[-1] == "served 2 run(s)"
    runs = Run.objects.filter(workflow__slug="hello-scheduled").order_by("created_at")
    assert [(r.trigger, r.trigger_key, r.state) for r in runs] == [
        ("schedule", "schedule:2026-12-06T01:00:00Z", "completed"),
        ("schedule", "schedule:2026-12-06T01:05:00Z", "completed")]
    leased = LedgerEvent.objects.filter(run__in=runs, kind="leased")
    assert sorted(e.actor for e in leased) == [f"agent:{env['AGENT']}"] * 2


def test_example_approval_waits_for_the_editor_then_the_executor_deploys(env, live_server):
    """The deploy is proposed and waits; once an editor approves, the executor performs and verifies it
    (actor system:executor), and the agent completes the run."""
    agent = Example("approval", env)
    try:
        agent.until("waiting for an editor")
        _, editor_token = make_operator("editor")
        with Client(live_server.url, editor_token) as editor:
            pending = [a for a in editor.get_all("/approvals/", status="pending")]
            assert len(pending) == 1 and pending[0]["stage"] == "deploy"
            editor.post(f"/approvals/{pending[0]['id']}/approve/", {"reason": "looks right"})
        agent.until("performed by the executor and verified")
        agent.until(": completed")
        assert agent.finish() == 0
    finally:
        agent.stop()
    run = Run.objects.get(workflow__slug="hello-deploy")
    assert run.state == "completed"
    effect = Effect.objects.get(run=run)
    assert effect.status == "verified" and effect.stage == "deploy"
    deploy = LedgerEvent.objects.filter(run=run, stage="deploy", kind__in=("proposed", "started", "verified"))
    assert [(e.kind, e.actor) for e in deploy.order_by("seq")] == [
        ("proposed", f"agent:{env['AGENT']}"), ("started", "system:executor"), ("verified", "system:executor")]


def test_example_mcp_config_starts_the_mcp_server_it_names(env):
    """The printed block is what an MCP client runs: started from it, the server lists the eight tools and
    answers a lease with the configured agent's token."""
    printed = run_example("mcp_config", env)
    assert printed.returncode == 0, printed.stderr
    server = json.loads(printed.stdout)["mcpServers"]["stateboard"]
    assert server["args"] == ["-m", "stateboard.mcp"]
    assert server["env"] == {"STATEBOARD_URL": env["STATEBOARD_URL"], "STATEBOARD_TOKEN": env["STATEBOARD_TOKEN"]}
    params = StdioServerParameters(command=server["command"], args=server["args"], env=server["env"])

    async def session_of_the_config():
        async with stdio_client(params) as streams, ClientSession(*streams) as session:
            await session.initialize()
            tools = (await session.list_tools()).tools
            leased = await session.call_tool("stateboard_lease", {})
            return [tool.name for tool in tools], leased

    names, leased = anyio.run(session_of_the_config)
    assert len(names) == 8 and all(name.startswith("stateboard_") for name in names)
    assert not leased.is_error and json.loads(leased.content[0].text) == {"run": None}
