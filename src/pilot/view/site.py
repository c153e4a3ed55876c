"""The viewer's pages, rendered once for the live server and the static export alike.

:class:`Links` makes every address a page uses: absolute paths for the live
server, relative ``.html`` paths for the static site (so that it works from
``file://`` and on any static host). Templates are Jinja with autoescaping
on and no ``|safe`` anywhere: every string that came from a run (the
transcript, file names, judges' comments) is escaped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from pilot import protocol
from pilot.judges.deck_pdf import is_deck, slides_name
from pilot.view import aggregates, changes, files, oracle_text, sessions, usage
from pilot.view.study import COLUMN_LABELS, DEFAULT_COLUMNS, INDEX_COLUMNS, NARROW_COLUMNS, StudyReader

STATIC_FILES = ("view.css", "view.js")
SIMULATED_BANNER = (
    "SIMULATED: this study ran on the simulated backend (a dry run). Its numbers come from a stated generative model "
    "and are not findings."
)
REHEARSAL_BANNER = (
    "REHEARSAL: this study rehearsed the real harness against the scripted model server (no key, no network). "
    "Its numbers check the harness and are not findings."
)


#: Deliverable types a static host may serve as they are: none of them runs script in the site's origin.
INERT_SUFFIXES = frozenset(
    {".xlsx", ".xlsm", ".docx", ".pptx", ".pdf", ".csv", ".tsv", ".txt", ".md", ".json", ".png", ".jpg", ".jpeg"}
)
#: Added to any other deliverable's name in the static site (an agent's .html or .svg must not run beside the pages).
NEUTRAL_SUFFIX = ".download"


def exported_name(name: str) -> str:
    """The file name a deliverable gets in the static site (the link still downloads it under its own name)."""
    return name if Path(name).suffix.lower() in INERT_SUFFIXES else name + NEUTRAL_SUFFIX


#: Deliverable types a browser opens in the tab from file://, where it ignores a link's download attribute.
SHOWN_IN_TAB = frozenset({".pdf", ".json", ".txt", ".md", ".csv", ".tsv", ".png", ".jpg", ".jpeg"})
#: The static site's script copy of such a file, which the page turns into a download (:mod:`pilot.view.export`).
WRAPPER_SUFFIX = ".dl.js"


def wrapped(name: str) -> bool:
    """Whether the static site keeps a script copy of a deliverable, so that it downloads from file:// too."""
    return Path(name).suffix.lower() in SHOWN_IN_TAB


@dataclass(frozen=True)
class Links:
    """Addresses of the viewer's pages, live (``static=False``) or as files of the static site."""

    static: bool = False
    depth: int = 0  # folders between this page and the site's root (static only)

    def _root(self) -> str:
        return "../" * self.depth if self.static else "/"

    def at(self, depth: int) -> Links:
        return Links(self.static, depth)

    def index(self) -> str:
        return self._root() + ("index.html" if self.static else "")

    def run(self, run_id: str) -> str:
        return self._root() + f"runs/{quote(run_id, safe='')}" + (".html" if self.static else "")

    def scenario(self, sid: str) -> str:
        return self._root() + f"scenarios/{quote(sid, safe='')}" + (".html" if self.static else "")

    def scenarios(self) -> str:
        return self._root() + "scenarios" + (".html" if self.static else "")

    def overview(self) -> str:
        return self._root() + "overview" + (".html" if self.static else "")

    def why(self) -> str:
        return self._root() + "why" + (".html" if self.static else "")

    def runs(self, **filters: Any) -> str:
        """The index with its run list filtered (the filters live in the address's hash, so this works from file://
        too)."""
        parts = [f"{quote(k, safe='')}={quote(str(v), safe='')}" for k, v in filters.items() if v not in (None, "")]
        return self.index() + ("#" + "&".join(parts) if parts else "")

    def file(self, run_id: str, attempt_no: int, name: str) -> str:
        stored = exported_name(name) if self.static else name
        return self._root() + f"files/{quote(run_id, safe='')}/attempt-{int(attempt_no)}/{quote(stored, safe='')}"

    def file_wrapper(self, run_id: str, attempt_no: int, name: str) -> str | None:
        """The static site's script copy of a deliverable a browser would show rather than save (:func:`wrapped`)."""
        if not self.static or not wrapped(name):
            return None
        return self.file(run_id, attempt_no, name) + WRAPPER_SUFFIX

    def slides(self, run_id: str, attempt_no: int, name: str) -> str:
        """A delivered deck's slides as PDF: rendered on request live, written under ``slides/`` in the static site."""
        where = self._root() + f"slides/{quote(run_id, safe='')}/attempt-{int(attempt_no)}/"
        return where + quote(slides_name(name) if self.static else name, safe="")

    def asset(self, name: str) -> str:
        return self._root() + f"static/{name}"


def _env() -> Environment:
    env = Environment(
        loader=PackageLoader("pilot.view", "templates"),
        autoescape=select_autoescape(default=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = _num
    env.filters["usd"] = _usd
    env.filters["yesno"] = _yesno
    env.filters["short_id"] = short_id
    env.filters["slides_name"] = slides_name
    env.filters["kilo"] = kilo
    env.filters["token_title"] = token_title
    env.filters["pct"] = pct
    env.filters["for_people"] = oracle_text.for_people
    env.filters["intent"] = oracle_text.criterion_intent
    env.tests["deck"] = is_deck
    env.globals["rate"] = rate
    env.globals["labels"] = COLUMN_LABELS
    return env


def kilo(value: Any) -> str:
    """A token count for a table cell: 950, 12.3k, 1.25M."""
    if _missing(value):
        return "–"
    n = float(value)
    if n < 1000:
        return f"{n:.0f}"
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.2f}M"


def token_title(t: usage.Tokens) -> str:
    """A run's tokens in full, for a cell's title."""
    return (
        f"{t.requests} request(s): input {t.input:,}, cache writes {t.cache_write:,}, cache reads {t.cache_read:,}, "
        f"output {t.output:,}; metered ${float(t.cost_usd):,.4f}"
    )


def pct(value: Any, digits: int = 0) -> str:
    return "–" if _missing(value) else f"{100 * float(value):.{digits}f}%"


def short_id(value: Any, keep: int = 8) -> str:
    """A session UUID cut to its first characters (the whole one goes in a title)."""
    text = "" if value is None else str(value)
    return text if len(text) <= keep + 1 else text[:keep] + "…"


def rate(k: int, n: int) -> str:
    """``k/n (p%)``, a rate never shown without its counts; ``0/0`` has no percentage."""
    return f"{k}/{n}" + (f" ({100 * k / n:.0f}%)" if n else "")


@dataclass
class Tally:
    """Runs of one group (an arm and model, a scenario and arm) and how many were scored and accepted."""

    runs: int = 0
    scored: int = 0  # S known
    accepted: int = 0

    def add(self, row: dict[str, Any]) -> None:
        self.runs += 1
        if row.get("S") is not None:
            self.scored += 1
            self.accepted += bool(row.get("S"))


def arm_model_groups(rows: list[dict[str, Any]], worker_model: str) -> list[tuple[str, str, Tally]]:
    """(arm, model, tally) with each arm's worker-model runs first and every other model
    (the sensitivity runs) apart."""
    tallies: dict[tuple[str, str], Tally] = {}
    for r in rows:
        tallies.setdefault((r["arm"], str(r.get("model") or "")), Tally()).add(r)
    return [
        (a, m, t)
        for (a, m), t in sorted(tallies.items(), key=lambda kv: (kv[0][0], kv[0][1] != worker_model, kv[0][1]))
    ]


_ENV: Environment | None = None


def env() -> Environment:
    global _ENV
    if _ENV is None:
        _ENV = _env()
    return _ENV


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def _num(value: Any, digits: int = 1) -> str:
    if _missing(value):
        return "–"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    try:
        return f"{float(value):.{digits}f}"
    except (TypeError, ValueError):
        return str(value)


def _usd(value: Any, digits: int = 2) -> str:
    return "–" if _missing(value) else f"${float(value):,.{digits}f}"


def _yesno(value: Any) -> str:
    return "–" if value is None else ("yes" if value else "no")


def _sort_key(value: Any) -> str:
    """What the index sorts a cell by (numbers as numbers, missing last)."""
    if _missing(value):
        return ""
    if isinstance(value, bool):
        return str(int(value))
    return str(value)


def _common(reader: StudyReader, links: Links, simulated: bool, title: str) -> dict[str, Any]:
    from pilot import backends

    # A dry run's label wins; a rehearsal (whose judges are the real CLI's) is labelled by its own backend.
    label = backends.SIMULATED_LABEL if simulated else reader.label()
    banner = {backends.SIMULATED_LABEL: SIMULATED_BANNER, backends.REHEARSAL_LABEL: REHEARSAL_BANNER}.get(label, "")
    return {
        "study": reader.info,
        "links": links,
        "simulated": bool(label),
        "label": label,
        "banner": banner,
        "title": title,
    }


def render_index(
    reader: StudyReader,
    links: Links,
    *,
    live: bool = False,
    rows: list[dict] | None = None,
    simulated: bool | None = None,
) -> str:
    rows = rows if rows is not None else reader.index_rows()
    simulated = reader.simulated(rows) if simulated is None else simulated
    overview = reader.overview()
    columns = list(INDEX_COLUMNS)
    values = {c: sorted({str(r.get(c)) for r in rows if r.get(c) is not None}) for c in FILTERS}
    running = overview["total"]["waiting"] + overview["total"]["in_flight"] > 0
    return (
        env()
        .get_template("index.html")
        .render(
            **_common(reader, links, simulated, f"Study {reader.name}"),
            rows=rows,
            columns=columns,
            default_columns=DEFAULT_COLUMNS,
            narrow_columns=NARROW_COLUMNS,
            values=values,
            filters=FILTERS,
            cap_values=sorted({c for r in rows for c in r.get("cap_kinds") or []}),
            session_values=sorted({r["sessions"] for r in rows if r.get("sessions") is not None}),
            csv=csv_payload(rows),
            groups=arm_model_groups(rows, reader.info.worker_model),
            overview=overview,
            sort_key=_sort_key,
            refresh=live and running,
            running=running,
        )
    )


#: The index's drop-down filters (each also a key of the address's hash).
FILTERS = ("arm", "model", "scenario", "wave", "status")
#: What the index's CSV adds to the run table's columns.
CSV_EXTRA = (
    "charge_usd",
    "sessions",
    "hit_cap",
    "tokens",
    "input_tokens",
    "cache_write_tokens",
    "cache_read_tokens",
    "output_tokens",
    "token_requests",
    "metered_usd",
)


def _csv_value(value: Any) -> Any:
    """A run-table value as the exported CSV writes it (true/false, missing as empty)."""
    if _missing(value):
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, (int, float, str)) else str(value)


def csv_payload(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The columns and values the index's "download CSV" writes for the rows its filters show (run-table order)."""
    from pilot import runtable

    names = [c.name for c in runtable.columns()]
    names += [c.name for c in runtable.OPTIONAL_COLUMNS if any(c.name in r for r in rows)]
    names += list(CSV_EXTRA)
    out = []
    for r in rows:
        t = r.get("tokens_detail")
        extra = (
            {
                "input_tokens": t.input,
                "cache_write_tokens": t.cache_write,
                "cache_read_tokens": t.cache_read,
                "output_tokens": t.output,
                "token_requests": t.requests,
                "metered_usd": str(t.cost_usd),
            }
            if t is not None
            else {}
        )
        out.append([_csv_value({**r, **extra}.get(n)) for n in names])
    return {"columns": names, "rows": out}


def _scenario_meta(sids: list[str]) -> dict[str, Any]:
    from pilot.scenarios import load_scenario

    out = {}
    for sid in sids:
        try:
            out[sid] = load_scenario(sid)
        except Exception:  # noqa: BLE001 - a scenario that no longer loads is listed by its id alone
            out[sid] = None
    return out


def render_scenarios(
    reader: StudyReader, links: Links, *, rows: list[dict] | None = None, simulated: bool | None = None
) -> str:
    """Every scenario of the study with its runs and its acceptance (worker model only)."""
    rows = rows if rows is not None else reader.index_rows()
    simulated = reader.simulated(rows) if simulated is None else simulated
    worker = reader.info.worker_model
    sids = sorted(set(reader.info.scenarios) | {r["scenario"] for r in rows})
    tallies = {sid: Tally() for sid in sids}
    other = {sid: 0 for sid in sids}
    for r in rows:
        if r.get("model") == worker:
            tallies[r["scenario"]].add(r)
        else:
            other[r["scenario"]] += 1
    return (
        env()
        .get_template("scenarios.html")
        .render(
            **_common(reader, links, simulated, "Scenarios"),
            sids=sids,
            meta=_scenario_meta(sids),
            tallies=tallies,
            other=other,
            worker=worker,
        )
    )


def render_overview(
    reader: StudyReader, links: Links, *, rows: list[dict] | None = None, simulated: bool | None = None
) -> str:
    """Scenario × arm: accepted / scored per cell for the worker model, each cell linking to its runs."""
    rows = rows if rows is not None else reader.index_rows()
    simulated = reader.simulated(rows) if simulated is None else simulated
    worker = reader.info.worker_model
    mine = [r for r in rows if r.get("model") == worker]
    sids = sorted({r["scenario"] for r in mine})
    arms = sorted({r["arm"] for r in mine})
    cells: dict[tuple[str, str], Tally] = {}
    per_arm = {a: Tally() for a in arms}
    for r in mine:
        cells.setdefault((r["scenario"], r["arm"]), Tally()).add(r)
        per_arm[r["arm"]].add(r)
    return (
        env()
        .get_template("overview.html")
        .render(
            **_common(reader, links, simulated, "Scenario × arm"),
            sids=sids,
            arms=arms,
            cells=cells,
            per_arm=per_arm,
            worker=worker,
            left_out=len(rows) - len(mine),
        )
    )


def render_why(
    reader: StudyReader, links: Links, *, rows: list[dict] | None = None, simulated: bool | None = None
) -> str:
    """The aggregates of why runs fail: criteria, deviations, violations and caps per arm, acceptance and cost."""
    from pilot.view import charts

    rows = rows if rows is not None else reader.index_rows()
    simulated = reader.simulated(rows) if simulated is None else simulated
    agg = aggregates.aggregates(rows, reader.info.worker_model, reader.info.seed)
    return (
        env()
        .get_template("why.html")
        .render(
            **_common(reader, links, simulated, "Why runs are not accepted"),
            agg=agg,
            intervals=charts.interval_plot(agg.acceptance),
            scatter=charts.scatter_plot(agg.points, agg.q),
        )
    )


def render_run(
    reader: StudyReader,
    links: Links,
    run_id: str,
    *,
    simulated: bool | None = None,
    row: dict | None = None,
    slides_refused: dict[tuple[int, str], str] | None = None,
    order: list[str] | None = None,
) -> str:
    """A run's page.

    ``slides_refused`` ((attempt, deck) -> reason): decks whose slides the
    static export could not render; ``order``: every run id in the run
    table's order (prev and next), read from the store when not given.
    """
    data = reader.run(run_id, row=row)
    simulated = reader.simulated([data["row"]] if data["row"] else []) if simulated is None else simulated
    judged = judged_deliverables(reader, data)
    downloads = []
    for a in data["attempts"]:
        outs = files.output_files(a["files"].outputs, reader.folder)
        # A deck is offered with its slides as PDF; where the static export could not render them, the reason instead.
        downloads.append(
            (a, [(f, (slides_refused or {}).get((a["attempt_no"], f.name)) if is_deck(f.name) else None) for f in outs])
        )
    q = protocol.study().q
    convs = [c for _, c in data["conversations"] if c is not None]
    charged = [a["charged_usd"] for a in data["attempts"] if a["charged_usd"] is not None]
    rec = data["record"]
    final = data["final"]
    folder = final["files"].folder if final is not None and data["run"] is not None else None
    record = usage.read_usage(folder) if folder is not None else usage.UsageRecord()
    final_conv = next((c for a, c in data["conversations"] if a.get("final")), None)
    session_of = {
        str(it.meta.get("message_id")): it.session
        for it in (final_conv.items if final_conv else [])
        if it.meta.get("message_id")
    }
    per_session: dict[int | None, usage.Tokens] = {}
    for r in record.requests:
        per_session.setdefault(session_of.get(r.message_id or ""), usage.Tokens()).add(r)
    inputs_dir = Path(data["scenario"].inputs_dir) if data.get("scenario") is not None else None
    changed = changes.input_changes(rec, folder, inputs_dir) if rec.get("E") and folder is not None else []
    ids = order if order is not None else reader.run_ids()
    at = ids.index(run_id) if run_id in ids else -1
    return (
        env()
        .get_template("run.html")
        .render(
            **_common(reader, links, simulated, f"Run {run_id}"),
            d=data,
            rec=rec,
            row=data["row"] or {},
            judged=judged,
            downloads=downloads,
            specs=criterion_specs(data.get("scenario")),
            hits=sessions.cap_hits(rec) if rec else [],
            decision=sessions.resume_decision(rec) if rec else None,
            usage_record=record,
            session_of=session_of,
            session_tokens=sorted((k, v) for k, v in per_session.items() if k is not None),
            unmatched_tokens=per_session.get(None),
            session_label=sessions.session_label,
            input_changes=changed,
            prev_id=ids[at - 1] if at > 0 else None,
            next_id=ids[at + 1] if 0 <= at < len(ids) - 1 else None,
            position=(at + 1, len(ids)),
            links_refused=files.links_in(data["final"]["files"].outputs) if data["final"] else [],
            q=q,
            verdict=verdict(data, q),
            session_costs=session_costs(data["record"]),
            charged_total=sum(charged) if charged else None,
            sessions_of={
                a["attempt_no"]: session_notes(data["record"] if a["final"] else (a["outcome_record"] or {}))
                for a, _ in data["conversations"]
            },
            unplaced_dev=[d for c in convs[-1:] for d in c.unplaced_deviations]
            or ([] if convs else data["record"].get("deviations") or []),
            unplaced_viol=[v for c in convs[-1:] for v in c.unplaced_violations]
            or ([] if convs else data["record"].get("E_reasons") or []),
        )
    )


def session_costs(rec: dict[str, Any]) -> list[tuple[str, Any]]:
    """(label, dollars) per session: the first as reported, the resume as the runner counted it (``recovery_cost_usd``).

    A resume's report may be cumulative (CLI 2.1.277 on), so its own cost is
    the runner's (``pilot.agents.session.combined_cost``), never the raw report.
    """
    sessions = rec.get("sessions") or []
    out: list[tuple[str, Any]] = []
    if sessions:
        out.append(("first session", sessions[0].get("reported_cost_usd")))
    if len(sessions) > 1:
        out.append(("recovery resume", rec.get("recovery_cost_usd")))
    return out


def session_notes(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """Per session of one attempt: its label, its own cost, the CLI's report, and for a resume the self-check that led
    to it.

    The CLI's report on a resume may be the total of both sessions, so the
    resume's own cost is the runner's ``recovery_cost_usd``; the report is
    shown beside it only where the two differ.
    """
    out = []
    costs = dict(enumerate(c for _, c in session_costs(rec)))
    for i, s in enumerate(rec.get("sessions") or []):
        reported = s.get("reported_cost_usd")
        own = costs.get(i, reported if i == 0 else None)
        note: dict[str, Any] = {
            "label": "first session" if i == 0 else "recovery resume",
            "own_cost": own,
            "reported": reported,
            "cumulative": i > 0
            and own is not None
            and reported is not None
            and abs(float(own) - float(reported)) > 5e-7,
            "session_id": s.get("session_id"),
            "resumed_from": s.get("resumed_from"),
        }
        if i > 0:
            first = rec.get("selfcheck_first")
            note["selfcheck"] = "–" if first is None else ("passed" if first else "failed")
            note["granted"] = bool(rec.get("recovery_used"))
        out.append(note)
    return out


def criterion_specs(scenario: Any) -> dict[str, Any]:
    """criterion id -> its oracle.yml entry (what reasons are rewritten from); empty for an unknown scenario."""
    try:
        return {c.id: c for c in scenario.oracle.criteria}
    except AttributeError:
        return {}


def _reason(c: dict[str, Any], specs: dict[str, Any]) -> str:
    return oracle_text.for_people(c.get("reason"), specs.get(str(c.get("id"))))


@dataclass
class Verdict:
    """Why a run stands where it does, in a headline and a few lines."""

    headline: str
    tone: str  # good | bad | pending
    lines: list[str]


def verdict(data: dict[str, Any], q: float) -> Verdict:
    """Why the run was accepted or not: S = 1{D, not E, Q >= q}, part by part."""
    row, rec, cell = data["row"] or {}, data["record"], data["cell"]
    if data["run"] is None:
        if cell["status"] == "failed":
            errors = [a["error"] for a in data["attempts"] if a.get("error")]
            last = errors[-1].splitlines()[0] if errors else "no error recorded"
            return Verdict(
                "Failed: every attempt ended in an infrastructure error",
                "bad",
                [
                    f"{len(data['attempts'])} attempt(s); the last error: {last}",
                    "no inference outcome exists for this run (not imputed)",
                ],
            )
        return Verdict(
            f"Not finished ({cell['status'].replace('_', ' ')})", "pending", [f"{cell['attempts']} attempt(s) so far"]
        )
    lines: list[str] = []
    if rec.get("status") == "agent_error":
        lines.append(f"the agent's session ended in an error: {rec.get('agent_error') or 'no detail'}")
    if rec.get("censored"):
        lines.append(
            f"censored: the run reached its {rec.get('censor_reason')} cap; its deliverables were evaluated as "
            "delivered"
        )
    earlier = [
        h for h in sessions.cap_hits(rec) if not (rec.get("censored") and h.session == sessions.final_session(rec))
    ]
    for h in earlier:
        lines.append(f"{h.words}; the run went on (recovery resume), so its final censoring does not show it")
    failed = [c for c in rec.get("criteria") or [] if not c.get("passed")]
    required = [c for c in failed if c.get("required", True)]
    specs = criterion_specs(data.get("scenario"))
    if row.get("D") is False or rec.get("D") is False:
        if failed:
            lines.append("D = 0: " + "; ".join(f"{c.get('id')}: {_reason(c, specs)}" for c in (required or failed)))
        elif rec.get("E"):
            lines.append(
                "D = 0: every criterion passed, but an input was changed, and D requires the inputs untouched (E = 0)"
            )
        else:
            lines.append("D = 0 (the evaluator named no failed criterion)")
    elif failed:
        lines.append(
            "D = 1 although optional criteria failed: "
            + "; ".join(f"{c.get('id')}: {_reason(c, specs)}" for c in failed)
        )
    else:
        lines.append("D = 1: every oracle criterion passed")
    if rec.get("E"):
        lines.append("E = 1 (critical violation): " + "; ".join(map(str, rec.get("E_reasons") or [])))
    Q = row.get("Q")
    if Q is None:
        errs = [f"{j.get('judge_id')}: {j.get('error')}" for j in rec.get("judges") or [] if j.get("error")]
        lines.append(
            "Q is missing: no judge returned a grade"
            + (f" ({'; '.join(errs)})" if errs else "")
            + ", so S is missing (not 0)"
        )
    else:
        lines.append(
            f"Q = {Q:.1f} {'≥' if Q >= q else '<'} q = {q:g} ({row.get('n_judges')} judge(s), "
            f"{row.get('judge_accept_votes')} accept vote(s))"
        )
    S = row.get("S")
    if S is None:
        return Verdict("S missing", "pending", lines)
    return Verdict("Accepted (S = 1)" if S else "Not accepted (S = 0)", "good" if S else "bad", lines)


def render_scenario(
    reader: StudyReader, links: Links, sid: str, *, rows: list[dict] | None = None, simulated: bool | None = None
) -> str:
    runs = reader.runs_of_scenario(sid, rows)
    simulated = reader.simulated(runs) if simulated is None else simulated
    worker = reader.info.worker_model
    groups = arm_model_groups(runs, worker)
    by_group = {
        (a, m): sorted(
            (r for r in runs if r["arm"] == a and str(r.get("model") or "") == m),
            key=lambda r: (r["wave"], r["repeat"]),
        )
        for a, m, _ in groups
    }
    from pilot.scenarios import load_scenario

    return (
        env()
        .get_template("scenario.html")
        .render(
            **_common(reader, links, simulated, f"Scenario {sid}"),
            sid=sid,
            scenario=load_scenario(sid),
            groups=groups,
            by_group=by_group,
            worker=worker,
        )
    )


def render_error(links: Links, title: str, message: str, reader: StudyReader | None = None) -> str:
    """An error page; with the study's reader it carries the study's label (a dry run's 404 says SIMULATED too)."""
    common: dict[str, Any] = {"links": links, "title": title, "simulated": False, "label": "", "banner": ""}
    if reader is not None:
        try:
            common = _common(reader, links, reader.simulated(), title)
        except Exception:  # noqa: BLE001 - an error page must render even when the store cannot say its label
            pass
    return env().get_template("error.html").render(**common, message=message)


PACKAGE_START = "== THE PACKAGE HANDED IN =="
PACKAGE_END = "== YOUR ANSWER =="


def _split_package(prompt: Any) -> list[tuple[Any, str]]:
    """Each deliverable with its text exactly as it stands in the judges' prompt (after their scrubbing).

    The package section of the prompt is cut at each deliverable's heading
    (``### name``, in the rendered order); if a heading cannot be found the
    whole section goes with the first deliverable, so nothing the judges
    read is ever hidden.
    """
    text = prompt.text
    start, end = text.find(PACKAGE_START), text.find(PACKAGE_END)
    section = text[start + len(PACKAGE_START) : end].strip("\n") if 0 <= start < end else text
    delivs = list(prompt.package.deliverables)
    cuts, pos = [], 0
    for d in delivs:
        at = section.find(f"### {d.requested}", pos)
        if at < 0:
            return (
                [(delivs[0], section)] + [(d, "(shown with the first deliverable)") for d in delivs[1:]]
                if delivs
                else []
            )
        cuts.append(at)
        pos = at + 1
    bounds = cuts[1:] + [len(section)]
    return [(d, section[a:b].strip("\n")) for d, a, b in zip(delivs, cuts, bounds, strict=True)]


@dataclass
class JudgedPackage:
    """The run's deliverables as the judges received them."""

    deliverables: list[tuple[Any, str]]  # (pilot.judges.RenderedDeliverable, its text after the judges' scrubbing)
    prompt: str | None  # the whole prompt of the judges
    note: str | None  # why something is not shown as the judges saw it


def judged_deliverables(reader: StudyReader, data: dict[str, Any]) -> JudgedPackage:
    """The run's deliverables through the judges' own renderer and scrubbing, with the run's identifiers withheld as for
    the judges.

    A symbolic link in ``outputs/`` is never followed: the renderer reads through the bounded reader
    (:mod:`pilot.worker_files`), shows a link refused as the judges saw it, and the page says so.
    """
    from pilot.judges import prompt_for_run

    final = data["final"]
    if final is None or data["run"] is None:
        return JudgedPackage([], None, "no attempt finished this run: nothing was judged")
    rf = final["files"]
    if rf.outputs.is_symlink() or rf.workspace.is_symlink() or not files.inside(rf.outputs, reader.folder):
        return JudgedPackage(
            [], None, "the outputs folder is a symbolic link or lies outside the study; the viewer does not follow it"
        )
    if not rf.outputs.is_dir():
        return JudgedPackage([], None, "the attempt left no outputs folder")
    record = data["record"]
    # The same strings the pipeline withholds from the judges (pilot.pipeline.judge_record).
    workspace = Path(record.get("workspace") or rf.workspace)
    withheld = [
        data["run_id"],
        final.get("node") or "",
        reader.name,
        str(final.get("workspace") or rf.folder),
        str(workspace),
        str(rf.folder),
        str(rf.workspace),
        str(rf.workspace.resolve()),
    ]
    withheld = [w for w in withheld if w]

    def judged(outputs: Path, note: str | None) -> JudgedPackage:
        prompt = prompt_for_run(data["scenario"], outputs, withheld=withheld)
        return JudgedPackage(_split_package(prompt), prompt.text, note)

    links = files.links_in(rf.outputs)
    try:
        # The judges' renderer reads through the bounded reader (no link followed, bounded): the same rendering.
        note = (
            f"outputs/ holds symbolic links ({', '.join(links)}); links are not followed, so they are shown refused, "
            "as the judges saw them"
            if links
            else None
        )
        return judged(rf.outputs, note)
    except Exception as exc:  # noqa: BLE001 - the page shows why the rendering failed instead of failing whole
        return JudgedPackage([], None, f"the deliverables could not be rendered: {type(exc).__name__}: {exc}")
