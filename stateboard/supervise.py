"""Every process ``manage.py up`` starts dies with it, however ``up`` ends (SIGKILL too), grandchildren
included (granian's workers).

Two layers (Linux):

- Each child leads a session of its own (Ctrl-C reaches ``up`` alone, which stops them in order) and is
  started with ``PR_SET_PDEATHSIG``: the kernel sends it SIGTERM the moment ``up`` dies. (Set by this file
  run in the child, which then execs the command: the setting survives an exec, and no Python runs
  between fork and exec in ``up``, whose database pool has threads.) That alone cannot reach a
  grandchild (a fork clears the setting), and granian's workers do not exit when their parent does.
- A watchdog (this file, run by itself), in a session of its own so a signal to ``up``'s group
  does not reach it, reads a pipe only ``up`` writes to: the session of each child it starts. When the pipe
  closes without ``up`` saying it stopped them itself, ``up`` is gone: every process still in those
  sessions gets SIGTERM, and SIGKILL after ``GRACE`` seconds. A session holds a child's whole tree unless
  a process leaves it on purpose (``setsid``), which none of ours does.

Not a cgroup: that needs systemd or root; a supervisor (systemd, Kubernetes) that runs ``up`` kills its
whole cgroup anyway, and these layers cover ``up`` started by hand.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

GRACE = 3.0  # seconds between SIGTERM and SIGKILL once `up` is gone
PR_SET_PDEATHSIG = 1
DONE = "done"
EXEC = "--exec"
THIS = str(Path(__file__).resolve())


class Watchdog:
    """The watchdog process of one ``up``, and the children started under it."""

    def __init__(self, python: str):
        # -I: this file alone, with the standard library (no Django, no Celery, nothing from the project)
        self.python = python
        self.process = subprocess.Popen([python, "-I", THIS, str(os.getpid())], stdin=subprocess.PIPE,
                                        text=True, start_new_session=True)

    def start(self, command: list[str], **popen) -> subprocess.Popen:
        """``command`` in a session of its own, SIGTERM when ``up`` dies, and watched."""
        child = subprocess.Popen([self.python, "-I", THIS, EXEC, str(os.getpid()), *command],
                                 start_new_session=True, **popen)
        self._say(f"+{child.pid}")
        return child

    def forget(self, child: subprocess.Popen) -> None:
        """A child ``up`` has reaped (its pid may be reused): no longer watched."""
        self._say(f"-{child.pid}")

    def close(self) -> None:
        """``up`` stopped its children itself: the watchdog exits without touching anything."""
        self._say(DONE)
        try:
            self.process.stdin.close()
        except OSError:
            pass
        self.process.wait(timeout=10)

    def _say(self, line: str) -> None:
        try:
            self.process.stdin.write(line + "\n")
            self.process.stdin.flush()
        except OSError:  # the watchdog is gone: the death signal still stops the children
            pass


def exec_dying_with(parent: int, command: list[str]) -> None:
    """In a child of ``parent``: SIGTERM when ``parent`` dies (where prctl exists), then ``command``."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the watchdog alone
        pass
    if os.getppid() != parent:  # the parent died before the signal was armed
        sys.exit(1)
    os.execvp(command[0], command)


def session_members(sessions: set[int]) -> list[int]:
    """The live processes of ``sessions`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state, _, _, session = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:4]
        except (OSError, ValueError):
            continue
        if int(session) in sessions and state != "Z":
            found.append(int(entry.name))
    return found


def sessions_stop(sessions: set[int], grace: float = GRACE) -> None:
    """SIGTERM to every process of ``sessions``, SIGKILL to those still there ``grace`` seconds later."""
    deadline = time.monotonic() + grace
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in session_members(sessions):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        while sig == signal.SIGTERM and session_members(sessions) and time.monotonic() < deadline:
            time.sleep(0.1)


def main() -> int:
    """The watchdog: the sessions named on stdin, stopped if it closes before ``done``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only the pipe's end tells it to act
    sessions: set[int] = set()
    for line in sys.stdin:
        word = line.strip()
        if word == DONE:
            return 0
        if word[:1] in "+-" and word[1:].isdigit():
            (sessions.add if word[0] == "+" else sessions.discard)(int(word[1:]))
    if sessions:
        print(f"stateboard: `up` (pid {sys.argv[1]}) is gone; stopping the processes it started.", file=sys.stderr)
        sessions_stop(sessions)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == [EXEC]:
        exec_dying_with(int(sys.argv[2]), sys.argv[3:])
    sys.exit(main())
