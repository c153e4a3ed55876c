"""LibreOffice's profile seeds: one folder per process tree, one name per seed whatever forked when."""

from __future__ import annotations

from pathlib import Path

from pilot import office_convert


def test_a_forked_childs_seed_never_takes_a_name_its_parent_or_a_sibling_made(bwrap, monkeypatch, tmp_path):
    monkeypatch.setattr(office_convert, "_seeds", {})
    monkeypatch.setattr(office_convert, "_seed_root", [])
    # No program at that path: the seed is the settings file alone (profile_seed's documented fallback).
    missing = str(tmp_path / "no-soffice")
    first = office_convert.profile_seed(missing, "<first/>", timeout_s=30)
    # A child forked before that seed shares the folder but counts no seed of its own yet.
    monkeypatch.setattr(office_convert, "_seeds", {})
    second = office_convert.profile_seed(missing, "<second/>", timeout_s=30)
    assert first != second and first.parent == second.parent
    for seed, text in ((first, "<first/>"), (second, "<second/>")):
        assert (Path(seed) / "user" / "registrymodifications.xcu").read_text(encoding="utf-8") == text
