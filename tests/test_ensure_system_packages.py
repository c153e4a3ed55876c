"""tools/ensure-system-packages.sh waits for a package lock another apt holds instead of failing at once.

The script runs against stand-ins for ``apt-get`` and ``id`` on a PATH without bubblewrap, so it finds a package
to install and "installs" it as root would; nothing is installed on this machine.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from pilot import paths

SCRIPT = paths.ROOT / "tools" / "ensure-system-packages.sh"
#: What the script itself runs besides apt-get (the stand-in folder is the whole PATH).
TOOLS = ("bash", "awk", "mktemp", "grep", "cat", "rm", "wc")

FAKE_APT = """#!/bin/bash
echo "$*" >> "{calls}"
n=$(wc -l < "{calls}")
if [ "$n" -le {held} ]; then
  echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)" >&2
  exit 100
fi
exit 0
"""


def _run(tmp_path: Path, held: int, timeout_s: int) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    calls.touch()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    (bin_dir / "id").write_text("#!/bin/sh\necho 0\n")  # root: apt-get is called without sudo
    (bin_dir / "sleep").write_text("#!/bin/sh\nexit 0\n")  # the pause between tries, without the wait
    (bin_dir / "apt-get").write_text(FAKE_APT.format(calls=calls, held=held))
    for stand_in in ("id", "sleep", "apt-get"):
        (bin_dir / stand_in).chmod(0o755)
    env = {"PATH": str(bin_dir), "APT_LOCK_TIMEOUT": str(timeout_s), "HOME": str(tmp_path)}
    proc = subprocess.run(
        [str(bin_dir / "bash"), str(SCRIPT), "sandbox"], env=env, capture_output=True, text=True, timeout=120
    )
    return proc, calls.read_text().splitlines()


def test_apt_waits_for_a_lock_another_apt_holds_then_installs(tmp_path):
    proc, calls = _run(tmp_path, held=2, timeout_s=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("another apt holds the package lock; waiting") == 2
    # Every call asks dpkg to wait for its lock; the update is retried until the lock is free, then the install.
    assert all(c.startswith("-o DPkg::Lock::Timeout=600 ") for c in calls)
    assert [c.split()[2] for c in calls] == ["update", "update", "update", "install"]
    assert "bubblewrap" in calls[-1] and "socat" in calls[-1]


def test_a_lock_still_held_at_the_deadline_fails_with_apts_own_message(tmp_path):
    proc, calls = _run(tmp_path, held=10_000, timeout_s=0)
    assert proc.returncode != 0
    assert "Could not get lock" in proc.stderr and calls == ["-o DPkg::Lock::Timeout=0 update -qq"]
