"""Reset and lay out the workspace of one attempt.

The worker sees exactly: ``BRIEF.md``, ``POLICY.md`` (the common policy with
the arm's documentation appended), a copy of the scenario's ``inputs/``, an
empty ``outputs/`` for the deliverables and the completion record, and by
arm: ``CHECKPOINT.md`` and ``selfcheck.py`` (A4), ``portal_credentials.json``
(arms with the portal, when the scenario uses it). Nothing of the oracle,
the rubric, the solver or other runs is copied in; the sandbox hides the
repository itself (``pilot.agents.sandbox``). The input hashes are taken
right after the copy, for the evaluator's E check.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pilot import paths, protocol
from pilot.protocol import Arm

COMPLETION_RECORD = "completion_record.json"
#: The harness's own copy of the agent's event stream, in the run folder (never mounted in the sandbox).
TRANSCRIPT_NAME = "transcript.jsonl"
#: The harness's records of the agent's launches (command lines, stderr, refused connections), never mounted.
HARNESS_RECORD_DIR = "record"
CREDENTIALS_NAME = "portal_credentials.json"

CHECKPOINT_TEMPLATE = """# Checkpoint

Keep this file up to date while you work. If the session is interrupted, it
is what the resumed session reads first.

## Done

(nothing yet)

## Remaining

(everything in BRIEF.md)

## Decisions

(none yet)
"""


class WorkspaceError(ValueError):
    """A workspace cannot be laid out (names the path and the reason)."""


@dataclass
class Workspace:
    """One attempt's workspace and what was laid into it."""

    root: Path
    arm: str
    scenario: str
    input_hashes: dict[str, str] = field(default_factory=dict)
    extras: list[str] = field(default_factory=list)

    @property
    def inputs(self) -> Path:
        return self.root / "inputs"

    @property
    def outputs(self) -> Path:
        return self.root / "outputs"

    @property
    def completion_record(self) -> Path:
        return self.outputs / COMPLETION_RECORD

    @property
    def checkpoint(self) -> Path:
        return self.root / "CHECKPOINT.md"

    @property
    def selfcheck(self) -> Path:
        return self.root / "selfcheck.py"


def transcript_path(run_dir: Path) -> Path:
    """The harness's copy of a run's event stream: what every count, cost and deviation is read from.

    The run folder itself is never mounted in the agent's sandbox; only its
    ``workspace/`` and the agent's scratch folders are.
    """
    return Path(run_dir) / TRANSCRIPT_NAME


def harness_record_dir(run_dir: Path) -> Path:
    """The folder of the harness's launch records of a run (``launch-N.json``, ``stderr-N.log``, refused
    connections)."""
    return Path(run_dir) / HARNESS_RECORD_DIR


def _safe_reset(root: Path) -> None:
    root = root.resolve()
    protected = {Path("/"), Path.home().resolve(), paths.ROOT.resolve(), paths.PROTOCOL_DIR.resolve()}
    if (
        root in protected
        or paths.PROTOCOL_DIR.resolve().is_relative_to(root)
        or root.is_relative_to(paths.PROTOCOL_DIR.resolve())
    ):
        raise WorkspaceError(
            f"{root}: refusing to reset a workspace here (it would touch the repository or the protocol)"
        )
    if root.is_symlink() or root.is_file():
        root.unlink()
    elif root.exists():
        shutil.rmtree(root)


def lay_out(scenario: Any, arm: Arm, root: Path, *, portal: Any = None) -> Workspace:
    """Reset ``root`` and lay out the workspace of ``scenario`` under ``arm``.

    ``portal`` is a started portal instance (``pilot.portal.PortalInstance``)
    for arms with the portal feature on scenarios that use it.
    """
    from pilot.oracles import hash_inputs

    root = Path(root)
    _safe_reset(root)
    root.mkdir(parents=True)
    brief = Path(scenario.brief_path)
    if not brief.is_file():
        raise WorkspaceError(f"{brief}: the scenario's brief is missing")
    shutil.copyfile(brief, root / "BRIEF.md")
    (root / "POLICY.md").write_text(protocol.arm_instructions(arm), encoding="utf-8")
    inputs = Path(scenario.inputs_dir)
    if not inputs.is_dir():
        raise WorkspaceError(f"{inputs}: the scenario's inputs folder is missing")
    shutil.copytree(inputs, root / "inputs", symlinks=False)
    (root / "outputs").mkdir()
    ws = Workspace(root=root, arm=arm.id, scenario=scenario.id)
    if arm.feature("checkpoint"):
        ws.checkpoint.write_text(CHECKPOINT_TEMPLATE, encoding="utf-8")
        ws.extras.append(ws.checkpoint.name)
    if arm.feature("self_check"):
        from pilot.oracles import install_selfcheck

        # The public tool, with the deliverables as the brief states them; nothing of the oracle.
        written = Path(install_selfcheck(scenario, root))
        ws.extras.append(written.name)
    if arm.feature("portal") and portal is not None:
        written = Path(portal.write_credentials(root))
        ws.extras.append(written.name)
    ws.input_hashes = hash_inputs(root / "inputs")
    return ws
