"""Helpers of the human wave's tests: a small dry-run study with one agent run, a wave of three participants,
a participant's way through the site (Flask's test client, or a real browser), and a recording judge.

The study is OPS-01 (operations, one CSV deliverable, no portal) under arm A1, once, on the simulated backend,
made by the real commands in a repository root of its own (``PILOT_ROOT``), so nothing is written under the
repository's ``analysis/data``. Its agent run is judged by the simulated judges, and so are its human runs.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from view_support import pilot

from pilot.judges.backend import JudgeReply, JudgeRequest

SCENARIO = "OPS-01"
DELIVERABLE = "reorder_plan.csv"
WAVE = "w1"
#: Three participants of the scenario's occupation, one of each route of eligibility and spelling of it.
PARTICIPANTS = """participant_id,contact,occupation,eligibility
P01,ana.lima@example.org,operations,practice
P02,ben.okafor@example.org,Operations,final-year
P03,@cy_rahman,operations,practice
"""
CONTACTS = ("ana.lima@example.org", "ben.okafor@example.org", "@cy_rahman")
GOOD_CSV = b"sku,description,on_hand,reorder_point,order_qty\nA-100,widget,12,20,40\n"


def build_study(root: Path, name: str = "hw") -> Path:
    """A finished dry-run study of OPS-01 under A1 (one run), in ``root`` (a repository root of the tests')."""
    pilot(root, "study", "create", name, "--scenarios", SCENARIO, "--arms", "A1", "--pilot-repeats", "1", "--seed", "3")
    pilot(root, "study", "run", name, "--no-progress")
    return root / "analysis" / "data" / name


def copy_study(folder: Path, target: Path) -> Path:
    return Path(shutil.copytree(folder, target, symlinks=True))


def write_participants(folder: Path, text: str = PARTICIPANTS) -> Path:
    path = folder / "participants.csv"
    path.write_text(text, encoding="utf-8")
    path.chmod(0o600)
    return path


def links(study_folder: Path, wave: str = WAVE) -> dict[str, str]:
    """Sign-in path by participant id ("experimenter" for the experimenter's)."""
    rows = csv.DictReader((study_folder / "human" / wave / "links.csv").read_text(encoding="utf-8").splitlines())
    return {r["participant_id"] or "experimenter": r["path"] for r in rows}


@dataclass
class RecordingJudge:
    """A judge backend that keeps every prompt it is given and answers as the simulated judges do."""

    name: str = "simulated"
    prompts: list[str] = field(default_factory=list)

    def complete(self, request: JudgeRequest) -> JudgeReply:
        from pilot.simulated.judge import new_judge

        self.prompts.append(request.prompt)
        return new_judge().complete(request)  # type: ignore[no-any-return]


class Participant:
    """One participant's way through the site with Flask's test client."""

    def __init__(self, app: Any, path: str) -> None:
        self.client = app.test_client()
        resp = self.client.get(path)
        assert resp.status_code == 303, resp.status_code
        self.first = resp.headers["Location"]
        self.session_id = self.first.split("/")[2]
        page = self.client.get(self.first).get_data(as_text=True)
        self.csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]

    def post(self, tail: str, **data: Any) -> Any:
        return self.client.post(f"/s/{self.session_id}/{tail}", data={"csrf": self.csrf, **data})

    def get(self, tail: str) -> Any:
        return self.client.get(f"/s/{self.session_id}/{tail}")

    def consent_and_start(self) -> None:
        assert self.post("consent", decision="agree").status_code == 303
        assert self.post("start").status_code == 303

    def upload(self, data: bytes, filename: str, name: str = DELIVERABLE) -> Any:
        return self.client.post(
            f"/s/{self.session_id}/upload/{name}",
            data={"csrf": self.csrf, "file": (io.BytesIO(data), filename)},
            content_type="multipart/form-data",
        )

    def submit(self, status: str = "completed", questions: str = "", **extra: Any) -> Any:
        return self.post("record", action="submit", status=status, questions=questions, notes="", **extra)


@contextmanager
def scripted_assistant(study_folder: Path, wave: str = WAVE, usd: str | None = None) -> Iterator[Any]:
    """H1's assistant whose upstream is the project's scripted model server, behind the real metering proxy."""
    from decimal import Decimal

    from pilot.human import store
    from pilot.human.assistant import Assistant, Settings
    from pilot.simulated.scripted_model import ScriptedModelServer

    with store.open_store(study_folder) as st:
        settings = Settings.from_mapping(store.wave(st.conn, wave).assistant)
    if usd is not None:
        settings = Settings(Decimal(usd), settings.max_tokens, settings.max_message_chars, settings.model)
    with ScriptedModelServer(seed=1, record_dir=study_folder.parent / "scripted") as server:
        assistant = Assistant(settings, upstream_url=server.base_url, api_key=server.api_key)
        try:
            yield assistant
        finally:
            assistant.close()


def every_text(study_folder: Path) -> str:
    """Every text the study folder holds but the links file (the store's tables dumped, every other file read)."""
    import sqlite3

    out = []
    conn = sqlite3.connect(study_folder / "study.sqlite")
    for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
        for row in conn.execute(f"SELECT * FROM {table}"):
            out.append(" ".join(str(v) for v in row))
    conn.close()
    for path in study_folder.rglob("*"):
        if path.is_file() and path.name != "links.csv" and not path.name.startswith("study.sqlite"):
            out.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(out)
