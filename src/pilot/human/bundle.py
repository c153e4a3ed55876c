"""A human session's workspace: the agents' bundle, laid out where the study keeps an attempt's files.

The participant gets what an agent gets (``pilot.workspace.lay_out``):
``BRIEF.md`` (the scenario's brief, copied), ``POLICY.md`` (the common policy
of ``protocol/arms/policy.md`` with the condition's environment documentation,
``protocol/human/H0.md`` or ``H1.md``, appended, as an arm's documentation is
appended for an agent), a copy of the scenario's ``inputs/`` and an empty
``outputs/``. The input hashes are taken right after the copy, for the same
input-hash check. The workspace lies in the attempt's folder of the study
(``workspaces/<run id>/attempt-1/workspace``), so the viewer, the evaluator
and the judges find a human run's files where they find an agent's.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from pilot import paths, protocol
from pilot.workspace import Workspace

#: The completion record's file name in ``outputs/`` (the form writes it).
COMPLETION_RECORD = "completion_record.json"
#: What the site says before the common policy: whose policy it is and who "you" is.
POLICY_PREFACE = (
    "Every worker in this study, people and AI agents alike, receives the working policy below. "
    'Read "you" as yourself. The documentation of your own working environment follows it.'
)


class BundleError(ValueError):
    """A session's workspace cannot be laid out (names the path and the reason)."""


def condition_doc(condition: str) -> Path:
    """The environment documentation of a condition (``protocol/human/<condition>.md``)."""
    path = paths.HUMAN_DIR / f"{condition}.md"
    if not path.is_file():
        raise BundleError(f"{paths.shown(path)}: the environment documentation of condition {condition} is missing")
    return path


def policy_text(condition: str) -> str:
    """The common policy with the condition's documentation appended, as the participant reads it."""
    return (
        protocol.common_policy(paths.ARMS_DIR).rstrip()
        + "\n\n"
        + condition_doc(condition).read_text(encoding="utf-8").strip()
        + "\n"
    )


def lay_out(scenario: Any, condition: str, root: Path) -> Workspace:
    """Lay out the session's workspace in ``root`` (which must not exist yet)."""
    from pilot.oracles import hash_inputs

    root = Path(root)
    if root.exists():
        raise BundleError(f"{root}: a session's workspace is laid out once, and this one exists already")
    brief = Path(scenario.brief_path)
    inputs = Path(scenario.inputs_dir)
    if not brief.is_file():
        raise BundleError(f"{brief}: the scenario's brief is missing")
    if not inputs.is_dir():
        raise BundleError(f"{inputs}: the scenario's inputs folder is missing")
    root.mkdir(parents=True)
    shutil.copyfile(brief, root / "BRIEF.md")
    (root / "POLICY.md").write_text(policy_text(condition), encoding="utf-8")
    shutil.copytree(inputs, root / "inputs", symlinks=False)
    (root / "outputs").mkdir()
    # The agents' workspace type: its arm is the condition here, and nothing is laid in beyond the bundle.
    return Workspace(root=root, arm=condition, scenario=scenario.id, input_hashes=hash_inputs(root / "inputs"))


def requested_files(scenario: Any) -> list[Any]:
    """The deliverables a participant uploads (every file the brief asks for but the completion record, a form here)."""
    return list(scenario.file_deliverables)


def study_caps(scenario_id: str) -> protocol.Caps:
    """The scenario's caps of ``study.yml`` (its wall limit is the session's)."""
    return protocol.study().caps_for(scenario_id)
