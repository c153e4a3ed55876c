"""A study's freeze as its store holds it: taken when the pilot starts, verified before a later wave is pooled.

The manifest and the lock (:mod:`pilot.freeze`) are recorded together. The
verdicts the lock holds (:mod:`pilot.scenario_kit.verdicts`) cost one batch
evaluation of every study scenario's gold, no-op and mutation packages; a
study whose runs are findings records them when its pilot starts, a dry run
or a test study only when asked (``verdicts=True``), and a study may record
them later with :func:`record_verdicts` as long as its code is the code that
froze it. Verifying a study whose oracle code changed derives the verdicts
again; identical ones are recorded as accepted in the lock, so the next check
of the same code derives nothing.
"""

from __future__ import annotations

from pathlib import Path

from pilot import freeze
from pilot.store import Store, StudyInfo


class FreezeLockError(RuntimeError):
    """The study's verdicts cannot be recorded by the code running now."""


def lock_of(store: Store, info: StudyInfo) -> freeze.FreezeLock | None:
    """The study's lock; None for a study frozen before locks were kept."""
    if info.freeze_lock is None:
        return None
    try:
        return freeze.FreezeLock.from_json(info.freeze_lock)
    except ValueError as exc:
        raise FreezeLockError(f"{store.path}: studies.freeze_lock_json of study {info.name}: {exc}") from exc


def take(store: Store, scenarios: list[str] | None, *, verdicts: bool) -> None:
    """Record the study's manifest and lock (once: a later call leaves the first in place)."""
    manifest = freeze.take_manifest(scenarios=scenarios)
    derived = None
    if verdicts:
        derived = _derive(scenarios if scenarios is not None else _all_scenarios())
    store.set_freeze_manifest(manifest)
    if store.study().freeze_manifest == manifest:
        store.set_freeze_lock(freeze.FreezeLock.take(manifest, derived).to_json())


def _derive(scenario_ids: list[str]) -> freeze.Verdicts:
    # The oracle, its readers and the package builders load only when verdicts are derived.
    from pilot.scenario_kit.verdicts import derive

    return derive(scenario_ids)


def _all_scenarios() -> list[str]:
    from pilot.protocol.scenario import list_scenarios

    return list(list_scenarios())


def record_verdicts(store: Store) -> freeze.FreezeLock:
    """Derive and record the verdicts of a study frozen without them; refused unless the code is the frozen code."""
    info = store.study()
    if info.freeze_manifest is None:
        raise FreezeLockError(f"{store.path}: study {info.name} has no freeze manifest yet (run the pilot wave first)")
    lock = lock_of(store, info)
    if lock is not None and lock.verdicts is not None:
        return lock
    report = freeze.verify(info.freeze_manifest, scenarios=info.scenarios, taken_at=info.freeze_taken_at)
    if not report.ok:
        raise FreezeLockError(
            f"{store.path}: the verdicts of study {info.name} can be recorded only by the code that froze it: "
            + "; ".join(line.strip() for line in report.lines())
        )
    derived = _derive(info.scenarios or _all_scenarios())
    if lock is None:
        lock = freeze.FreezeLock.take(info.freeze_manifest, derived)
    else:
        lock.verdicts = derived
    store.set_freeze_lock(lock.to_json(), replace=True)
    return lock


def verify(store: Store, *, rederive: bool = True) -> freeze.FreezeReport:
    """The study's freeze checked now; code accepted by verdicts derived again is recorded in its lock.

    ``rederive=False`` derives nothing (a quick look: changed code then blocks unless accepted before).
    """
    info = store.study()
    if info.freeze_manifest is None:
        raise FreezeLockError(f"{store.path}: study {info.name} has no freeze manifest yet (run the pilot wave first)")
    lock = lock_of(store, info)
    report = freeze.verify(
        info.freeze_manifest,
        scenarios=info.scenarios,
        lock=lock,
        rederive=_derive if rederive else None,
        taken_at=info.freeze_taken_at,
    )
    if lock is not None and freeze.accept(lock, report):
        store.set_freeze_lock(lock.to_json(), replace=True)
    return report


#: What the manuscript says of a study whose pilot has not started: no manifest, so nothing was pooled.
NO_MANIFEST_SENTENCE = "No freeze manifest was taken: the pilot had not started, so no wave was pooled."


def write_outputs(
    report: freeze.FreezeReport | None, info: StudyInfo, tables_dir: Path, generated_dir: Path
) -> dict[str, Path]:
    """Write the freeze check as the manuscript reads it: ``freeze_macros.tex`` and, after a check,
    ``freeze_<study>.csv`` (one row per file or verdict compared). ``report`` None: no manifest yet."""
    from pilot.latex import write_macros

    out: dict[str, Path] = {}
    macros = Path(generated_dir) / "freeze_macros.tex"
    if report is None or info.freeze_manifest is None:
        out["macros"] = write_macros(
            {"FreezeSentence": NO_MANIFEST_SENTENCE},
            macros,
            comment=f"Stage 02: study {info.name} has no freeze manifest.",
        )
        return out
    out["table"] = Path(tables_dir) / f"freeze_{info.name}.csv"
    out["table"].parent.mkdir(parents=True, exist_ok=True)
    report.summary.assign(study=info.name, ok=report.ok).to_csv(out["table"], index=False)
    out["macros"] = write_macros(
        {
            "FreezeSentence": report.sentence(freeze.manifest_digest(info.freeze_manifest)),
            # When the manifest was taken (the pilot's first reservation), for the deviations subsection.
            "FreezeTakenAt": str(info.freeze_taken_at or "not recorded")[:10],
        },
        macros,
        comment=f"Stage 02: the freeze check of study {info.name}.",
    )
    return out
