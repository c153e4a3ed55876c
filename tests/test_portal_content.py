"""The portal content generator and reader, on a scenario folder with real office files."""

from __future__ import annotations

import hashlib
import json
import re
import zipfile

import pytest
from openpyxl import load_workbook
from portal_support import make_scenario
from pypdf import PdfReader

from pilot.portal.content import (
    MANIFEST_NAME,
    PortalContentError,
    check_portal,
    generate_portal,
    load_portal_content,
    portal_scenarios,
)


@pytest.fixture()
def scenario(tmp_path):
    return make_scenario(tmp_path)


def _tree(folder):
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_csv_inputs_become_record_sets_and_other_files_documents(scenario):
    content = load_portal_content(generate_portal(scenario))
    assert content.scenario == "TEST-01" and content.company == "Northwind Ltd"
    assert sorted(content.records) == ["statements-client-statement-q3", "vendor-invoices"]
    assert sorted(content.documents) == [
        "contract.pdf",
        "engagement_letter.docx",
        "rate_card.xlsx",
        "travel_policy.txt",
    ]
    invoices = content.records["vendor-invoices"]
    assert invoices.kind == "Vendor invoice" and invoices.n_rows == 3
    assert invoices.columns == ["invoice_no", "vendor", "amount", "due_date", "account"]
    assert content.records["statements-client-statement-q3"].kind == "Client statement"
    assert content.records["statements-client-statement-q3"].delimiter == ";"
    assert content.rows("vendor-invoices")[2][1] == "Initech, Inc."


def test_downloads_mirror_the_inputs(scenario):
    portal = generate_portal(scenario)
    content = load_portal_content(portal)
    inputs = scenario / "inputs"
    # The CSV download and every document are the input bytes themselves.
    assert content.file("records/vendor-invoices.csv").read_bytes() == (inputs / "vendor_invoices.csv").read_bytes()
    for name, doc in content.documents.items():
        data = content.file(doc.path).read_bytes()
        assert data == (inputs / name).read_bytes()
        assert doc.sha256 == hashlib.sha256(data).hexdigest() and doc.size == len(data)
    # The workbook holds the same table, numbers as numbers, codes with leading zeros as text.
    ws = load_workbook(content.file("records/vendor-invoices.xlsx")).active
    rows = list(ws.iter_rows(values_only=True))
    assert rows[0] == ("invoice_no", "vendor", "amount", "due_date", "account")
    assert rows[1] == ("INV-1001", "Acme Supplies", 1200.5, "2026-01-31", "00420")
    assert rows[2][2] == 300 and len(rows) == 4
    # The PDF lists the rows.
    text = "".join(page.extract_text() for page in PdfReader(content.file("records/vendor-invoices.pdf")).pages)
    for needle in ("Vendor invoices", "INV-1003", "Initech, Inc.", "77.25", "3 rows"):
        assert needle in text


def test_generation_is_byte_identical_and_timestamp_free(scenario, tmp_path):
    first = _tree(generate_portal(scenario, tmp_path / "a"))
    second = _tree(generate_portal(scenario, tmp_path / "b"))
    assert first == second
    with zipfile.ZipFile(tmp_path / "a" / "records" / "vendor-invoices.xlsx") as zf:
        assert {info.date_time for info in zf.infolist()} == {(2026, 1, 1, 0, 0, 0)}
        core = zf.read("docProps/core.xml").decode()
    for prop in ("created", "modified"):
        assert re.search(rf"<dcterms:{prop}[^>]*>2026-01-01T00:00:00Z</dcterms:{prop}>", core), prop
    pdf = PdfReader(tmp_path / "a" / "records" / "vendor-invoices.pdf")
    for key in ("/CreationDate", "/ModDate"):
        assert pdf.metadata[key].startswith("D:2000"), key  # reportlab's invariant date


def test_regeneration_leaves_no_stale_file_and_check_sees_drift(scenario):
    portal = generate_portal(scenario)
    assert check_portal(scenario) == []
    (portal / "documents" / "stray.txt").write_text("left behind")
    (scenario / "inputs" / "travel_policy.txt").write_text("Meals up to 45 per day.\n")
    problems = check_portal(scenario)
    assert any("stray.txt: not made by the generator" in p for p in problems)
    assert any("travel_policy.txt: differs" in p for p in problems)
    generate_portal(scenario)
    assert not (portal / "documents" / "stray.txt").exists()
    assert check_portal(scenario) == []


def test_portal_scenarios_reads_uses_portal(tmp_path):
    make_scenario(tmp_path, "WITH-01")
    other = make_scenario(tmp_path / "x", "WITHOUT-01")
    (other / "scenario.yml").write_text("id: WITHOUT-01\nuses_portal: false\n")
    other.rename(tmp_path / "WITHOUT-01")
    assert portal_scenarios(tmp_path) == ["WITH-01"]


def test_ragged_csv_is_refused_naming_file_and_row(scenario):
    bad = scenario / "inputs" / "payments.csv"
    bad.write_text("id,amount\n1,10\n2,20,extra\n")
    with pytest.raises(PortalContentError) as info:
        generate_portal(scenario)
    assert info.value.path == bad and info.value.field == "row 3" and "3 fields" in info.value.reason
    assert not (scenario / "portal").exists()  # nothing half-written


def test_missing_inputs_folder_is_refused(tmp_path):
    (tmp_path / "EMPTY-01").mkdir()
    (tmp_path / "EMPTY-01" / "scenario.yml").write_text("id: EMPTY-01\nuses_portal: true\n")
    with pytest.raises(PortalContentError, match="inputs.*folder missing"):
        generate_portal(tmp_path / "EMPTY-01")


@pytest.mark.parametrize(
    "spec, reason",
    [
        (None, "missing"),
        ("id: X-01\nuses_portal: false\n", "uses_portal: is False, not true"),
        ("id: X-01\n", "uses_portal: is None, not true"),
        ("id: X-01\nuses_portal: 'yes'\n", "uses_portal: is 'yes', not true"),
    ],
)
def test_a_scenario_without_a_portal_gets_none(scenario, spec, reason):
    yml = scenario / "scenario.yml"
    if spec is None:
        yml.unlink()
    else:
        yml.write_text(spec)
    with pytest.raises(PortalContentError, match=reason) as info:
        generate_portal(scenario)
    assert info.value.path == yml
    assert not (scenario / "portal").exists()


@pytest.mark.parametrize(
    "bad_path", ["../secret.txt", "/etc/passwd", "documents/../../secret.txt", "documents/nope.pdf"]
)
def test_reader_refuses_manifest_paths_outside_the_folder(scenario, bad_path):
    portal = generate_portal(scenario)
    manifest = json.loads((portal / MANIFEST_NAME).read_text())
    manifest["documents"][0]["path"] = bad_path
    (portal / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(PortalContentError) as info:
        load_portal_content(portal)
    assert info.value.field == "documents[0].path"


def test_reader_refuses_a_symlink_that_leaves_the_folder(scenario):
    portal = generate_portal(scenario)
    target = portal / "documents" / "travel_policy.txt"
    target.unlink()
    target.symlink_to(scenario / "secret.txt")
    with pytest.raises(PortalContentError, match="resolves outside"):
        load_portal_content(portal)


def test_reader_names_a_wrong_format_version(scenario):
    portal = generate_portal(scenario)
    manifest = json.loads((portal / MANIFEST_NAME).read_text())
    manifest["format_version"] = 99
    (portal / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(PortalContentError) as info:
        load_portal_content(portal)
    assert info.value.field == "format_version" and "99" in info.value.reason
