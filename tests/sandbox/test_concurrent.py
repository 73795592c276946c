"""Two judges of one problem at once, one of them hostile: private input (tests, the other run's
program) reaches the supervisor through inherited descriptors only, so the hostile program finds
nothing of the other run under the temporary roots, in ``/proc`` or in kernel objects, and its
forged answer never passes (with the kernel layers and in the guard-only mode)."""

from __future__ import annotations

import secrets
import threading
import time

from cel_lens import sandbox as sb

# reads every file under the temporary roots but its own directory, and every descriptor of every
# process it can see, for the other run's expected answer; returns it as its own
STEAL = r'''
import os, re, time
PATTERN = re.compile(rb"cel-secret-[0-9a-f]{16}")
ME = os.path.realpath(os.getcwd())
SEEN = []

def look(path):
    try:
        with open(path, "rb") as f:
            found = PATTERN.search(f.read(1 << 22))
    except OSError:
        return None
    SEEN.append(path)
    return found.group().decode() if found else None

def sweep():
    for root in ROOTS:
        for top, dirs, files in os.walk(root):
            if os.path.realpath(top).startswith(ME):
                continue
            for name in files:
                hit = look(os.path.join(top, name))
                if hit:
                    return hit
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for fd in fds:
                hit = look(f"/proc/{pid}/fd/{fd}")
                if hit:
                    return hit
    return None

def steal():
    deadline = time.monotonic() + WINDOW
    while time.monotonic() < deadline:
        hit = sweep()
        if hit:
            return hit
    return None

FOUND = steal()
print("found", FOUND, "read", len(SEEN), "files")
def answer(x):
    return FOUND
'''


def _benign(secret: str) -> str:
    """A right answer that also leaves it in a file of its own directory while it runs."""
    return (f"import time\nSECRET = {secret!r}\nwith open('answer.txt', 'w') as f:\n    f.write(SECRET)\n"
            "time.sleep(0.3)\ndef answer(x):\n    return SECRET\n")


def test_a_hostile_judge_finds_nothing_of_a_concurrent_one(mode, tmp_path):
    """The hostile program polls the temporary roots and ``/proc`` while three honest runs of the
    same problem start and end beside it; it must find no answer and must not pass (before, it read
    the other run's tests file, expected answer included, and passed)."""
    secret = "cel-secret-" + secrets.token_hex(8)
    tests = [f"assert answer(1) == {secret!r}"]
    root = tmp_path / "sandboxes"
    root.mkdir()
    hostile = STEAL.replace("ROOTS", repr([str(root)])).replace("WINDOW", "3.0")
    outcome: dict[str, sb.Outcome] = {}

    def run_hostile() -> None:
        outcome["hostile"] = sb.run(hostile, timeout=8.0, tests=tests, allow=True, tmp_root=str(root))

    thread = threading.Thread(target=run_hostile)
    thread.start()
    time.sleep(0.5)  # the hostile program is polling before the honest runs start
    honest = [sb.run(_benign(secret), timeout=5.0, tests=tests, allow=True, tmp_root=str(root)) for _ in range(3)]
    thread.join()
    assert all(o.passed for o in honest), honest
    bad = outcome["hostile"]
    assert not bad.passed, bad
    assert "found None" in bad.stdout, bad.stdout
    assert list(root.iterdir()) == []
