"""Run the whole product: migrate, then web + Celery worker + beat (and the demo fleet) until Ctrl-C; or,
with ``--role``, one kind of process of a deployment of many instances (SPEC §13)."""

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor

from ledger.schedules import periodic_tasks_ensure
from stateboard.supervise import Watchdog
from stateboard.webserver import port_served, processes_stop, web_command


def _local(host: str) -> str:
    """The address the demo fleet calls: the server's own, or loopback when it listens everywhere."""
    return "127.0.0.1" if host in ("", "0.0.0.0", "::") else host


def stop_on_sigterm(signum, frame):
    raise KeyboardInterrupt  # stop the children like Ctrl-C does


ROLES = ("web", "worker", "beat")


def process_commands(python: str, bind: str, *, name: str = "") -> dict[str, list[str]]:
    """The command line of each process kind; ``name`` tells the worker apart from other instances."""
    worker = [python, "-m", "celery", "-A", "stateboard", "worker", "--pool", "solo", "--loglevel", "INFO"]
    return {
        "web": web_command(python, bind),  # threaded workers sized to the machine (stateboard.webserver)
        "worker": worker + (["--hostname", f"{name}@%h"] if name else []),
        "beat": [python, "-m", "celery", "-A", "stateboard", "beat", "--loglevel", "INFO",
                 "--scheduler", "ledger.schedules.beat:TickScheduler",
                 "--schedule", str(settings.VAR_DIR / "celerybeat-schedule")],
    }


class Command(BaseCommand):
    help = ("Migrate, start the web server, a Celery worker and beat, then the simulated agent fleet "
            "(`demo`) unless --no-demo.")

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--no-demo", action="store_true", help="do not run the demo fleet (`manage.py demo`)")
        parser.add_argument("--check", action="store_true",
                            help="set everything up, start, answer /healthz, run `demo --once`, stop")
        parser.add_argument("--access-log", metavar="PATH",
                            help="log every web request to PATH ('-': standard output); off by default "
                                 "(WEB_ACCESS_LOG sets the same)")
        parser.add_argument("--role", choices=ROLES,
                            help="run only this kind of process, one instance of many sharing DATABASE_URL and "
                                 "CELERY_BROKER_URL: never migrates nor seeds the demo")

    def handle(self, *args, port, host, no_demo, check, role=None, access_log=None, **options):
        python = sys.executable
        bind = f"{host}:{port}"
        if access_log:  # the web server's command line and environment read it (stateboard.webserver)
            os.environ["WEB_ACCESS_LOG"] = access_log
        try:
            processes = process_commands(python, bind, name=f"{role}-{os.getpid()}" if role else "")
        except ValueError as exc:  # WEB_SERVER / WEB_WORKERS / WEB_THREADS that do not parse
            raise CommandError(str(exc))
        if role:
            return self._one_role(role, processes[role], bind)
        if port_served(host, port):  # a second `up` would serve beside the first, with a second worker and beat
            raise CommandError(f"Port {port} on {host} is already served (another `up`?): stop that first, "
                               "or choose another --port.")
        engine = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
        self.stdout.write(f"Database: {engine}; broker: {settings.CELERY_BROKER_URL.split('@')[-1]}")
        self.stdout.write("Applying migrations…")
        call_command("migrate", interactive=False, verbosity=0)
        periodic_tasks_ensure()
        env = dict(os.environ)
        if not os.environ.get("DATABASE_URL") and "SECURE_COOKIES" not in os.environ:
            env["SECURE_COOKIES"] = "0"  # the embedded demo is served over plain http on localhost
        if not (os.environ.get("EMAIL_HOST") or os.environ.get("EMAIL_BACKEND")):
            env["EMAIL_BACKEND"] = "django.core.mail.backends.console.EmailBackend"  # notifications on stdout
        signal.signal(signal.SIGTERM, stop_on_sigterm)
        watchdog = Watchdog(python)  # every child dies with `up`, however it ends (stateboard.supervise)

        def start(name):  # each child leads its own session, so a kill reaches its workers too
            return watchdog.start(processes[name], env=env, cwd=settings.BASE_DIR)

        children = {name: start(name) for name in processes}
        try:
            self._wait_healthy(bind, children["web"])
            self.stdout.write(self.style.SUCCESS(f"Stateboard is up: http://{bind}/  (API docs: http://{bind}/api/v1/docs/)"))
            if not no_demo:
                demo = [python, "manage.py", "demo", "--url", f"http://{_local(host)}:{port}"]
                if check:
                    self._demo_once(demo, env)
                else:
                    children["demo"] = watchdog.start(demo, env=env, cwd=settings.BASE_DIR)  # not restarted
                    self.stdout.write(f"Demo fleet started (pid {children['demo'].pid}); `up --no-demo` skips it.")
            if check:
                return
            while children["web"].poll() is None:
                time.sleep(1)
                for name in ("worker", "beat"):  # a dead worker or beat is restarted, not fatal
                    code = children[name].poll()
                    if code is not None:
                        self.stderr.write(f"{name} exited with status {code}; restarting it.")
                        watchdog.forget(children[name])
                        children[name] = start(name)
            self.stderr.write(f"Stopped because web exited with status {children['web'].returncode}.")
        except KeyboardInterrupt:
            self.stdout.write("Stopping…")
        finally:
            processes_stop(list(children.values()), wait=15)
            watchdog.close()

    def _one_role(self, role: str, command: list[str], bind: str) -> None:
        """`up --role`: this one process until it exits (its supervisor restarts it) or SIGTERM / Ctrl-C."""
        missing = [name for name in ("DATABASE_URL", "CELERY_BROKER_URL") if not os.environ.get(name)]
        if missing:
            raise CommandError(f"up --role {role} needs {' and '.join(missing)}: every instance shares one database "
                               "and one broker (the embedded defaults are for one machine; run `up` without --role).")
        try:
            executor = MigrationExecutor(connection)
            pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
        except DatabaseError as exc:
            raise CommandError(f"up --role {role} cannot reach the database: {exc}")
        if pending:
            raise CommandError(f"The database has {len(pending)} migrations not applied; --role never migrates: "
                               "run `manage.py migrate` once first.")
        if role == "beat":
            periodic_tasks_ensure()  # the beat entries (serialized: beats that start at once write them once)
        where = f" on http://{bind}/" if role == "web" else ""
        self.stdout.write(f"Stateboard {role}{where}; database and broker shared "
                          f"({settings.CELERY_BROKER_URL.split('@')[-1]}).")
        signal.signal(signal.SIGTERM, stop_on_sigterm)
        watchdog = Watchdog(sys.executable)
        child = watchdog.start(command, cwd=settings.BASE_DIR)
        try:
            code = child.wait()
        except KeyboardInterrupt:
            self.stdout.write("Stopping…")
            processes_stop([child], wait=15)
            return
        finally:
            watchdog.close()
        raise SystemExit(f"{role} exited with status {code}." if code else 0)

    def _demo_once(self, command, env):
        """`up --check`: one demo pass against the server just started; its check decides the exit."""
        result = subprocess.run([*command, "--once"], env=env, cwd=settings.BASE_DIR, capture_output=True,
                                text=True, timeout=240)
        self.stdout.write(result.stdout)
        if result.returncode:
            self.stderr.write(result.stderr)
            raise SystemExit(f"`demo --once` failed with status {result.returncode}.")
        self.stdout.write(self.style.SUCCESS("Demo pass done."))

    def _wait_healthy(self, bind, web):
        """Return once the web server answers /healthz (200 or 503: it serves); fail if it dies first."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if web.poll() is not None:
                raise SystemExit(f"The web server exited with status {web.returncode} before answering /healthz.")
            try:
                with urllib.request.urlopen(f"http://{bind}/healthz", timeout=3) as response:
                    self.stdout.write(f"/healthz answered {response.status}: {response.read().decode()}")
                    return
            except urllib.error.HTTPError as exc:  # 503: it serves, a dependency is down
                self.stdout.write(f"/healthz answered {exc.code}: {exc.read().decode()}")
                return
            except OSError:
                time.sleep(1)
        raise SystemExit("The web server did not answer /healthz within 60 s.")
