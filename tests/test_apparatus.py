"""The paper's apparatus: authors.yml read and refused by field, the protocol's digest, the macros."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from pilot import freeze
from pilot.protocol import ProtocolError
from pilot.report.apparatus import apparatus_macros, load_apparatus


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "authors.yml"
    p.write_text(text, encoding="utf-8")
    return p


def test_manifest_digest_is_sha256_of_tab_separated_lines_in_path_order():
    manifest = {"b/x.yml": "22", "a/y.py": "11"}
    # By hand: lines sorted by path, "path<TAB>digest<NL>".
    assert freeze.manifest_digest(manifest) == hashlib.sha256(b"a/y.py\t11\nb/x.yml\t22\n").hexdigest()
    assert freeze.manifest_digest({"a/y.py": "12", "b/x.yml": "22"}) != freeze.manifest_digest(manifest)


@pytest.mark.parametrize(
    "text, field",
    [
        ("authors: []\n", "authors"),
        ("authors:\n  - affiliation: X\n", "authors.0"),
        ("authors:\n  - name: '  '\n", "authors.0.name"),
        ("authors:\n  - name: A\npreregistration: [1]\n", "preregistration"),
        ("authors:\n  - name: A\npreregistration: {registry: OSF}\n", "preregistration"),
        ("- just a list\n", "<root>"),
        ("authors: [\n", "<file>"),
        ("authors:\n  - name: A\npreregistration: {registry: OSF, identifier: ' '}\n", "preregistration"),
    ],
)
def test_a_malformed_authors_file_is_refused_by_name_and_field(tmp_path, text, field):
    path = _write(tmp_path, text)
    with pytest.raises(ProtocolError) as err:
        load_apparatus(path)
    assert err.value.path == path and err.value.field == field, (err.value.field, err.value.reason)


def test_macros_name_the_authors_their_numbered_affiliations_and_the_registry(tmp_path):
    path = _write(
        tmp_path,
        "authors:\n  - {name: Ada Byron, affiliation: Lab One}\n  - {name: Alan T_ring, affiliation: Lab Two}\n"
        "  - {name: Grace H, affiliation: Lab One}\n"
        "preregistration: {registry: OSF, identifier: abc12, url: 'https://osf.io/abc12'}\n",
    )
    m = apparatus_macros(path=path)
    assert m["PaperAuthors"] == (
        "Ada Byron\\textsuperscript{1}, Alan T\\_ring\\textsuperscript{2}, Grace H\\textsuperscript{1}"
        " \\\\ \\small \\textsuperscript{1}Lab One \\\\ \\small \\textsuperscript{2}Lab Two"
    )
    assert m["PaperAuthorsPlain"] == "Ada Byron, Alan T\\_ring, Grace H"
    assert m["PreregistrationSentence"].startswith(
        "Preregistered with OSF, \\texttt{abc12} (\\url{https://osf.io/abc12})"
    )
    # The digest is that of the design set's freeze manifest, taken independently here.
    from pilot import protocol

    manifest = freeze.take_manifest(scenarios=protocol.study().scenario_set())
    assert m["ProtocolFrozenFiles"] == len(manifest)
    assert m["ProtocolDigestFull"] == f"\\texttt{{{freeze.manifest_digest(manifest)}}}"


def test_without_a_registry_the_paper_says_so():
    m = apparatus_macros()  # the repository's own authors.yml leaves the registry empty
    assert "not filed with a public registry" in m["PreregistrationSentence"]


def test_the_freeze_check_is_said_with_its_count_and_digest():
    from pilot.freeze import FileChange, FreezeReport

    ok = FreezeReport(frozen_files=119, current_files=119)
    assert ok.sentence("e0bf1ad95a0ecd60e1e5") == (
        "The freeze check found the 119 frozen files of the study's manifest "
        "(SHA-256 digest beginning e0bf1ad95a0ecd60) unchanged: the waves the scale rule adds are pooled "
        "with the pilot."
    )
    bad = FreezeReport(
        frozen_files=119,
        current_files=119,
        changes=[FileChange("protocol/scenarios/HR-01/brief.md", "scenario", "modified", "a", "b")],
    )
    assert "found 1 of the study's frozen files modified" in bad.sentence("ff" * 32) and "not pooled" in bad.sentence(
        "ff" * 32
    )
