"""LibreOffice and Impress never fetch a worker's link, and never run with more reach than the worker had.

Hostile files, written here by hand: a deck whose two images are links (one
to an HTTP listener this test runs on the host's loopback, one to a
``file://`` image of a host-only canary); a workbook with a ``WEBSERVICE``
call to the listener, an external workbook (the canary's) and a reference to
another file in a formula; a document with the same two linked images and an
``INCLUDETEXT`` field of the canary's text. Each goes through the harness's
own routes with the real LibreOffice: the deck renderer of the viewer and the
grading site, the oracle's recalculation, a document conversion. The
listener is never hit, the canary's text and image are in no output (PDF text
with pypdf, every image of every page), and what was made inert is recorded.
A reference run of LibreOffice as it comes (no copy made inert, default
profile, unconfined) shows the same files do fetch both, so the assertions
can fail.

The confinement itself: a probe run as the helper cannot write outside its
output folder, read the run folder's other files or reach the listener, holds
no capability, and runs as the renderer user (root harness) or the harness
itself (unprivileged harness); a workbook that keeps LibreOffice busy is
killed with its whole process tree at its time bound. The same hostile files
are rendered again by an unprivileged harness user, as the suite makes one.
"""

from __future__ import annotations

import http.server
import io
import json
import os
import pwd
import subprocess
import textwrap
import threading
import time
import uuid
import zipfile
from pathlib import Path

import openpyxl
import pytest
from PIL import Image
from privilege_support import harness_user, passable, run_python_as
from pypdf import PdfReader

from pilot import confined, office_convert, office_links, paths
from pilot.judges.deck_pdf import SlidesCache, links_record, render_deck_pdf
from pilot.oracles.recalc import Recalculator, soffice_binary
from pilot.oracles.selfcheck_tool import RECALC_PROFILE_XCU

#: The canary image's size and colour: nothing else in these files has them.
CANARY_SIZE, CANARY_RGB = (37, 23), (201, 13, 77)
#: What the listener serves: an image of its own size and colour.
SERVED_SIZE, SERVED_RGB = (41, 29), (7, 200, 9)
REL_IMAGE = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/image"


@pytest.fixture(scope="module")
def confined_libreoffice(soffice):
    """LibreOffice and a host that confines it (``soffice`` brings ``bwrap``); a test of them fails without them."""
    if soffice_binary() is None:
        pytest.fail("LibreOffice is not installed: `make test` installs it (tools/ensure-system-packages.sh office)")
    if confined.problems():
        pytest.fail("; ".join(confined.problems()))


# -------------------------------------------------------------------------- the host's side


class Listener:
    """An HTTP server on the host's loopback that counts every request, whatever its method."""

    def __init__(self) -> None:
        buf = io.BytesIO()
        Image.new("RGB", SERVED_SIZE, SERVED_RGB).save(buf, "PNG")
        png = buf.getvalue()
        self.hits: list[str] = []
        hits = self.hits

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                hits.append(f"{self.command} {self.path}")
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(len(png)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(png)

            do_GET = do_HEAD = do_POST = do_OPTIONS = do_PROPFIND = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def listener():
    lst = Listener()
    yield lst
    lst.close()


@pytest.fixture(scope="module")
def canary(tmp_path_factory) -> dict:
    """Host-only files holding a unique string and a unique image, in a folder no confinement is given."""
    folder = tmp_path_factory.mktemp("host-only")
    text = f"CANARY-{uuid.uuid4().hex}"
    png = folder / "secret.png"
    Image.new("RGB", CANARY_SIZE, CANARY_RGB).save(png, "PNG")
    (folder / "secret.txt").write_text(text + "\n", encoding="utf-8")
    wb = openpyxl.Workbook()
    wb.active.title = "Sheet1"
    wb.active["A1"] = text
    wb.active["A2"] = 424242
    wb.save(folder / "secret.xlsx")
    return {"text": text, "png": png, "txt": folder / "secret.txt", "xlsx": folder / "secret.xlsx", "folder": folder}


# -------------------------------------------------------------------------- hostile files, by hand


def _rewrite(src: Path, dst: Path, edits: dict, extra: dict | None = None, drop: str = "") -> Path:
    """``src``'s archive written to ``dst`` with each named part passed through its edit, ``extra`` parts added."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            if drop and info.filename.startswith(drop):
                continue
            data = zin.read(info.filename)
            if info.filename in edits:
                data = edits[info.filename](data.decode("utf-8")).encode("utf-8")
            zout.writestr(info, data)
        for name, text in (extra or {}).items():
            zout.writestr(name, text)
    return dst


def _png() -> io.BytesIO:
    buf = io.BytesIO()
    Image.new("RGB", (10, 10), (0, 0, 255)).save(buf, "PNG")
    buf.seek(0)
    return buf


def _two_links(rels: str, web: str, host_file: str, *, image_target: str) -> str:
    """A relationships part whose embedded image now points at ``web``, and a second image one at ``host_file``."""
    rels = rels.replace(f'Target="{image_target}"', f'Target="{web}" TargetMode="External"')
    return rels.replace(
        "</Relationships>",
        f'<Relationship Id="rId990" Type="{REL_IMAGE}" Target="{host_file}" TargetMode="External"/></Relationships>',
    )


def _second_blip_to(xml: str, first_id: str) -> str:
    """Both pictures linked (``r:link``) rather than embedded; the second one to relationship ``rId990``."""
    i = xml.rfind(f'r:embed="{first_id}"')
    xml = xml[:i] + 'r:link="rId990"' + xml[i + len(f'r:embed="{first_id}"') :]
    return xml.replace(f'r:embed="{first_id}"', f'r:link="{first_id}"')


def hostile_deck(folder: Path, listener: Listener, canary: dict) -> Path:
    from pptx import Presentation
    from pptx.util import Inches

    prs = Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[5])
    slide.shapes.title.text = "Quarterly support review"
    for left in (1, 5):
        slide.shapes.add_picture(_png(), Inches(left), Inches(2), Inches(3), Inches(2))
    base = folder / "base-deck.pptx"
    prs.save(base)
    with zipfile.ZipFile(base) as z:
        rels = z.read("ppt/slides/_rels/slide1.xml.rels").decode()
    image = next(t for t in rels.split('"') if t.startswith("../media/"))
    rid = rels.split(f'Target="{image}"')[0].rsplit('Id="', 1)[1].split('"')[0]
    return _rewrite(
        base,
        folder / "support_review.pptx",
        {
            "ppt/slides/_rels/slide1.xml.rels": lambda t: _two_links(
                t, listener.url("deck.png"), canary["png"].as_uri(), image_target=image
            ),
            "ppt/slides/slide1.xml": lambda t: _second_blip_to(t, rid),
        },
        drop="ppt/media/",
    )


def hostile_document(folder: Path, listener: Listener, canary: dict) -> Path:
    from docx import Document
    from docx.shared import Inches

    doc = Document()
    doc.add_heading("Reconciliation memo", 1)
    doc.add_paragraph("The body of the memo.")
    doc.add_picture(_png(), width=Inches(2))
    doc.add_picture(_png(), width=Inches(2))
    base = folder / "base-memo.docx"
    doc.save(base)
    with zipfile.ZipFile(base) as z:
        rels = z.read("word/_rels/document.xml.rels").decode()
    image = next(t for t in rels.split('"') if t.startswith("media/"))
    rid = rels.split(f'Target="{image}"')[0].rsplit('Id="', 1)[1].split('"')[0]
    field = (
        '<w:p><w:r><w:fldChar w:fldCharType="begin"/></w:r><w:r><w:instrText xml:space="preserve"> INCLUDETEXT '
        f'"{canary["txt"]}" </w:instrText></w:r><w:r><w:fldChar w:fldCharType="separate"/></w:r>'
        '<w:r><w:t>included text</w:t></w:r><w:r><w:fldChar w:fldCharType="end"/></w:r></w:p>'
    )

    def body(xml: str) -> str:
        xml = _second_blip_to(xml, rid)
        i = xml.rfind("<w:sectPr")
        return xml[:i] + field + xml[i:]

    return _rewrite(
        base,
        folder / "reconciliation_memo.docx",
        {
            "word/_rels/document.xml.rels": lambda t: _two_links(
                t, listener.url("memo.png"), canary["png"].as_uri(), image_target=image
            ),
            "word/document.xml": body,
        },
        drop="word/media/",
    )


def hostile_workbook(folder: Path, listener: Listener, canary: dict) -> Path:
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Sheet1"
    ws["A1"] = f'=_xlfn.WEBSERVICE("{listener.url("ws")}")'
    ws["A3"] = f"='{canary['folder'].as_uri()}/[secret.xlsx]Sheet1'!A1"
    ws["A4"] = 5
    ws["A5"] = "=A4*2"
    base = folder / "base-book.xlsx"
    wb.save(base)
    ns_r = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    ext = (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        '<externalLink xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" '
        f'xmlns:r="{ns_r}"><externalBook r:id="rId1"><sheetNames><sheetName val="Sheet1"/></sheetNames>'
        '<sheetDataSet><sheetData sheetId="0"><row r="1"><cell r="A1" t="str"><v>cached</v></cell></row>'
        "</sheetData></sheetDataSet></externalBook></externalLink>"
    )
    ext_rels = (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        f'<Relationship Id="rId1" Type="{ns_r}/externalLinkPath" Target="{canary["xlsx"].as_uri()}" '
        'TargetMode="External"/></Relationships>'
    )
    return _rewrite(
        base,
        folder / "reconciliation.xlsx",
        {
            "xl/workbook.xml": lambda t: t.replace(
                "</sheets>",
                f'</sheets><externalReferences><externalReference xmlns:r="{ns_r}" r:id="rId99"/></externalReferences>',
            ),
            "xl/_rels/workbook.xml.rels": lambda t: t.replace(
                "</Relationships>",
                f'<Relationship Id="rId99" Type="{ns_r}/externalLink" Target="externalLinks/externalLink1.xml"/>'
                "</Relationships>",
            ),
            "[Content_Types].xml": lambda t: t.replace(
                "</Types>",
                '<Override PartName="/xl/externalLinks/externalLink1.xml" ContentType="application/'
                'vnd.openxmlformats-officedocument.spreadsheetml.externalLink+xml"/></Types>',
            ),
            "xl/worksheets/sheet1.xml": lambda t: t.replace(
                '<row r="3">', '<row r="2"><c r="A2" t="str"><f>[1]Sheet1!A1</f><v>cached</v></c></row><row r="3">', 1
            ),
        },
        {
            "xl/externalLinks/externalLink1.xml": ext,
            "xl/externalLinks/_rels/externalLink1.xml.rels": ext_rels,
        },
    )


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, listener, canary) -> dict:
    folder = tmp_path_factory.mktemp("hostile")
    return {
        "deck": hostile_deck(folder, listener, canary),
        "document": hostile_document(folder, listener, canary),
        "workbook": hostile_workbook(folder, listener, canary),
    }


# -------------------------------------------------------------------------- what an output may not hold


def pdf_images(pdf: Path) -> list[tuple[tuple[int, int], tuple]]:
    """(size, corner colour) of every image on every page."""
    out = []
    for page in PdfReader(str(pdf)).pages:
        for im in page.images:
            rgb = im.image.convert("RGB")
            out.append((rgb.size, rgb.getpixel((0, 0))))
    return out


def pdf_text(pdf: Path) -> str:
    return " ".join((p.extract_text() or "") for p in PdfReader(str(pdf)).pages)


def assert_no_canary_in_pdf(pdf: Path, canary: dict) -> None:
    assert canary["text"] not in pdf_text(pdf)
    assert canary["text"].encode() not in pdf.read_bytes()
    for size, colour in pdf_images(pdf):
        assert size != CANARY_SIZE and colour != CANARY_RGB, "the host-only canary image is in the PDF"
        assert size != SERVED_SIZE and colour != SERVED_RGB, "the listener's image is in the PDF"


def archive_text(path: Path) -> bytes:
    with zipfile.ZipFile(path) as z:
        return b"".join(z.read(n) for n in z.namelist())


def reference_render(src: Path, out: Path, target: str) -> Path:
    """LibreOffice as it comes: the file itself (not made inert), a default profile, no confinement."""
    profile = out / "profile"
    subprocess.run(
        [
            soffice_binary(),
            f"-env:UserInstallation={profile.as_uri()}",
            "--headless",
            "--norestore",
            "--nolockcheck",
            "--convert-to",
            target,
            "--outdir",
            str(out),
            str(src),
        ],
        capture_output=True,
        timeout=300,
        check=False,
        env=dict(os.environ, HOME=str(out), SAL_USE_VCLPLUGIN="svp"),
        start_new_session=True,
    )
    return out / f"{src.stem}.pdf"


# -------------------------------------------------------------------------- the routes


@pytest.mark.usefixtures("confined_libreoffice")
def test_the_hostile_files_do_fetch_when_libreoffice_runs_as_it_comes(hostile, listener, canary, tmp_path):
    """The reference: without the copy made inert, the settings and the confinement, both links are followed."""
    before = len(listener.hits)
    pdf = reference_render(hostile["deck"], tmp_path, "pdf:impress_pdf_Export")
    assert len(listener.hits) > before, "the reference render never reached the listener: the test could not fail"
    colours = [c for _, c in pdf_images(pdf)]
    assert CANARY_RGB in colours and SERVED_RGB in colours, colours


@pytest.mark.usefixtures("confined_libreoffice")
def test_the_deck_renderer_fetches_no_link_and_embeds_no_host_file(hostile, listener, canary, tmp_path):
    before = list(listener.hits)
    pdf = render_deck_pdf(hostile["deck"], tmp_path / "pdf")
    assert listener.hits == before
    assert_no_canary_in_pdf(pdf, canary)
    assert "Quarterly support review" in pdf_text(pdf)
    record = json.loads(links_record(pdf).read_text(encoding="utf-8"))
    assert record["confinement"] == "bubblewrap"
    targets = {(n["part"], n["target"]) for n in record["neutralised"]}
    assert targets == {
        ("ppt/slides/_rels/slide1.xml.rels", listener.url("deck.png")),
        ("ppt/slides/_rels/slide1.xml.rels", canary["png"].as_uri()),
    }
    # The viewer's and the grading site's cache keeps the record beside the slides it serves.
    cache = SlidesCache(tmp_path / "cache")
    served = cache.pdf(hostile["deck"])
    assert listener.hits == before
    assert_no_canary_in_pdf(served, canary)
    assert json.loads(links_record(served).read_text(encoding="utf-8"))["neutralised"] == record["neutralised"]


@pytest.mark.usefixtures("confined_libreoffice")
def test_the_oracle_recalculates_a_linked_workbook_without_fetching_and_reports_what_it_made_inert(
    hostile, listener, canary, tmp_path
):
    before = list(listener.hits)
    with Recalculator(tmp_path / "recalc") as r:
        res = r.recalculate([hostile["workbook"]])[hostile["workbook"]]
    assert res.error is None and res.confinement == "bubblewrap", res
    assert listener.hits == before
    assert canary["text"].encode() not in archive_text(res.path)
    values = openpyxl.load_workbook(res.path, data_only=True)["Sheet1"]
    assert values["A5"].value == 10  # the workbook's own formulas still recalculate (5 * 2)
    assert values["A2"].value == "cached"  # the external workbook's cached value, never the canary's
    shown = {(n.part, n.what.split(" (")[0].split(" in ")[0], n.target) for n in res.neutralised}
    assert (
        "xl/externalLinks/_rels/externalLink1.xml.rels",
        "external workbook",
        canary["xlsx"].as_uri(),
    ) in shown, shown
    assert any(p == "xl/worksheets/sheet1.xml" and w == "WEBSERVICE call" for p, w, _ in shown), shown
    assert any(w == "reference to another file" and canary["folder"].as_uri() in t for _, w, t in shown), shown


@pytest.mark.usefixtures("confined_libreoffice")
def test_a_linked_document_renders_without_fetching(hostile, listener, canary, tmp_path):
    before = list(listener.hits)
    copy = tmp_path / "in" / "reconciliation_memo.docx"
    copy.parent.mkdir(mode=0o755)
    made_inert = office_convert.stage(hostile["document"], copy, 50 * 1024 * 1024)
    out = tmp_path / "out"
    out.mkdir()
    done = office_convert.convert(
        [copy],
        out,
        target="pdf:writer_pdf_Export",
        soffice=soffice_binary(),
        settings_xcu=RECALC_PROFILE_XCU,
        scratch=tmp_path / "scratch",
        limits=confined.Limits(wall_s=120),
    )
    assert done.ok and done.confinement == "bubblewrap", done
    pdf = office_convert.adopt(out / "reconciliation_memo.pdf", tmp_path / "memo.pdf", 64 * 1024 * 1024)
    assert listener.hits == before
    assert_no_canary_in_pdf(pdf, canary)
    assert "Reconciliation memo" in pdf_text(pdf)
    kinds = sorted(n.what.split(" (")[0] for n in made_inert)
    assert kinds == ["INCLUDETEXT field", "linked image", "linked image"], made_inert


@pytest.mark.usefixtures("confined_libreoffice")
def test_the_a4_self_check_reads_a_copy_confined_and_reports_as_before(hostile, listener, canary, tmp_path):
    """The pristine self-check tool runs confined on a snapshot of outputs/: a link out of the workspace reads as one,
    a linked workbook still fails as linked, and neither the listener nor the canary is reached."""
    from pilot.oracles.selfcheck import run_selfcheck
    from pilot.scenarios.generate import build_gold_workspace

    ws = build_gold_workspace("ACC-01", tmp_path / "acc")
    book = ws / "outputs" / "bank_reconciliation_2026-10.xlsx"
    book.unlink()
    book.write_bytes(hostile["workbook"].read_bytes())
    memo = ws / "outputs" / "reconciliation_memo.docx"
    memo.unlink()
    memo.symlink_to(canary["txt"])
    before = list(listener.hits)
    rep = run_selfcheck(ws, "ACC-01")
    assert listener.hits == before
    assert not rep.passed and canary["text"] not in rep.text
    assert f"Self-check of {ws.name} (ACC-01)" in rep.lines[0]
    assert "FAIL  bank_reconciliation_2026-10.xlsx links to other workbooks" in rep.text
    assert "FAIL  reconciliation_memo.docx is a symlink pointing outside the workspace" in rep.text


@pytest.mark.usefixtures("confined_libreoffice")
def test_libreoffice_holds_the_settings_that_forbid_links(hostile, listener, canary, tmp_path):
    """The keys are LibreOffice's own: it reads them and writes them back; unconfined and on the file as it is,
    they alone keep the deck's links unfollowed."""
    seed = office_convert.profile_seed(soffice_binary(), RECALC_PROFILE_XCU)
    written = (seed / "user" / "registrymodifications.xcu").read_text(encoding="utf-8")
    assert "/org.openoffice.Setup/" in written, "the template is not LibreOffice's own rewrite of the settings"
    for path, name, value in (
        ("/org.openoffice.Office.Common/Security/Scripting", "BlockUntrustedRefererLinks", "true"),
        ("/org.openoffice.Office.Calc/Content/Update", "Link", "1"),
        ("/org.openoffice.Office.Writer/Content/Update", "Link", "2"),
        ("/org.openoffice.Office.Common/Security/Scripting", "DisableMacrosExecution", "true"),
    ):
        assert f'<item oor:path="{path}"><prop oor:name="{name}" oor:op="fuse"><value>{value}</value>' in written, name
    profile = tmp_path / "profile"
    (profile / "user").mkdir(parents=True)
    (profile / "user" / "registrymodifications.xcu").write_text(RECALC_PROFILE_XCU, encoding="utf-8")
    before = list(listener.hits)
    subprocess.run(
        [
            soffice_binary(),
            f"-env:UserInstallation={profile.as_uri()}",
            "--headless",
            "--norestore",
            "--convert-to",
            "pdf:impress_pdf_Export",
            "--outdir",
            str(tmp_path),
            str(hostile["deck"]),
        ],
        capture_output=True,
        timeout=300,
        check=False,
        env=dict(os.environ, HOME=str(tmp_path), SAL_USE_VCLPLUGIN="svp"),
        start_new_session=True,
    )
    assert listener.hits == before
    assert_no_canary_in_pdf(tmp_path / "support_review.pdf", canary)


# -------------------------------------------------------------------------- the confinement itself

PROBE = textwrap.dedent(r"""
    import json, os, socket, sys
    out, run, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    res = {}
    def attempt(name, fn):
        try:
            res[name] = {"ok": True, "value": str(fn())[:200]}
        except OSError as e:
            res[name] = {"ok": False, "err": str(e)[:200]}
    status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
    res["status"] = {k: status[k].strip() for k in ("Uid", "CapEff", "CapPrm", "CapBnd", "NoNewPrivs")}
    res["uid"] = os.getuid()
    attempt("write_run_folder", lambda: open(os.path.join(run, "planted.txt"), "w").write("x"))
    attempt("write_tmp_beside", lambda: open(os.path.join(os.path.dirname(out), "planted.txt"), "w").write("x"))
    attempt("read_run_secret", lambda: open(os.path.join(run, "record.json")).read())
    attempt("list_run_folder", lambda: os.listdir(run))
    attempt("read_root_home", lambda: os.listdir("/root"))
    attempt("write_usr", lambda: open("/usr/planted.txt", "w").write("x"))
    attempt("connect_listener", lambda: socket.create_connection(("127.0.0.1", port), timeout=3).close())
    attempt("write_output", lambda: open(os.path.join(out, "ok.txt"), "w").write("ok"))
    json.dump(res, open(os.path.join(out, "probe.json"), "w"))
""")


def run_probe(tmp_path: Path, port: int) -> tuple[dict, confined.Completed, Path]:
    run = tmp_path / "run"
    (run / "batch" / "in").mkdir(parents=True)
    (run / "record.json").write_text('{"secret": "the run record"}', encoding="utf-8")
    probe = run / "batch" / "in" / "probe.py"
    probe.write_text(PROBE, encoding="utf-8")
    out = run / "batch" / "out"
    out.mkdir()
    done = confined.run(
        ["/usr/bin/python3", "-I", str(probe), str(out), str(run), str(port)],
        read_only=[probe],
        writable=out,
        scratch=run / "batch" / "scratch",
        limits=confined.Limits(wall_s=60),
    )
    result = json.loads(office_convert.adopt(out / "probe.json", tmp_path / "probe.json", 1 << 20).read_text())
    return result, done, run


def check_probe(result: dict, run: Path, uid: int) -> None:
    assert result["uid"] == uid != 0
    st = result["status"]
    assert st["CapEff"] == st["CapPrm"] == st["CapBnd"] == "0000000000000000" and st["NoNewPrivs"] == "1", st
    for name in ("read_run_secret", "read_root_home", "write_usr", "write_run_folder", "write_tmp_beside"):
        assert result[name]["ok"] is False, (name, result[name])
    assert result["connect_listener"]["ok"] is False, result["connect_listener"]
    # Inside, the run folder is no more than the way to the paths it was given: nothing of the host's folder shows.
    assert result["list_run_folder"] == {"ok": True, "value": "['batch']"}, result["list_run_folder"]
    assert result["write_output"]["ok"] is True
    assert not (run / "planted.txt").exists() and not (run / "batch" / "planted.txt").exists()
    assert sorted(p.name for p in run.iterdir()) == ["batch", "record.json"]
    assert sorted(p.name for p in (run / "batch").iterdir()) == ["in", "out"]


@pytest.mark.usefixtures("confined_libreoffice")
def test_the_confined_helper_reaches_nothing_but_its_output_folder(listener, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the root harness's half: run as root (as make test runs in CI)")
    before = list(listener.hits)
    result, done, run = run_probe(tmp_path, listener.port)
    name, uid = confined.renderer_account()
    # A root harness runs it as study.yml's renderer user, never as root and never as a worker slot's uid.
    assert done.identity == {"uid": uid, "gid": pwd.getpwnam(name).pw_gid, "name": name, "dedicated": True}
    check_probe(result, run, uid)
    assert listener.hits == before


def _processes_naming(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.usefixtures("confined_libreoffice")
def test_a_workbook_that_keeps_libreoffice_busy_is_killed_with_its_whole_tree_at_the_bound(tmp_path):
    wb = openpyxl.Workbook()
    for r in range(1, 401):  # each a million-row product: minutes of work for LibreOffice
        wb.active.cell(r, 1, f"=SUMPRODUCT(ROW($A$1:$A$1048576)*COLUMN($A$1:$J$1048576)*{r})")
    book = tmp_path / "busy.xlsx"
    wb.save(book)
    work = tmp_path / "recalc"
    r = Recalculator(work, batch_timeout_s=4, per_file_timeout_s=0, single_timeout_s=4)
    office_convert.profile_seed(soffice_binary(), RECALC_PROFILE_XCU)  # made once per process, outside the timing
    t0 = time.monotonic()
    res = r.recalculate([book])[book]
    took = time.monotonic() - t0
    assert res.path is None and res.error == "recalculation failed: LibreOffice did not finish within 4 s", res
    assert took < 4 + 4 + 15, took  # the batch, its retry alone, and the staging around them
    # No soffice, oosplash or bubblewrap of it is left alive.
    assert [p for p in _processes_naming(str(work)) if confined.alive(p)] == []
    # The same bound on one run: the helper's own process (bubblewrap's child) is gone when the run returns.
    done = confined.run(
        ["/bin/sh", "-c", "sleep 300 & sleep 300"],
        scratch=tmp_path / "scratch",
        limits=confined.Limits(wall_s=2),
    )
    assert done.timed_out and done.inner_pid is not None and done.seconds < 15
    assert not confined.alive(done.inner_pid)
    assert [p for p in _processes_naming(str(tmp_path / "scratch")) if confined.alive(p)] == []


@pytest.mark.usefixtures("confined_libreoffice")
def test_without_a_confinement_libreoffice_refuses_in_one_line_unless_opted_out(hostile, monkeypatch, tmp_path):
    missing = "bubblewrap (bwrap) is not installed: run `tools/ensure-system-packages.sh sandbox`"
    monkeypatch.setattr(confined, "bwrap_problems", lambda: (missing,))
    monkeypatch.delenv(confined.ISOLATION_ENV, raising=False)
    with pytest.raises(confined.ConfinementUnavailable) as err:
        Recalculator(tmp_path / "r1").recalculate([hostile["workbook"]])
    assert "\n" not in str(err.value) and missing in str(err.value) and "--allow-unisolated" in str(err.value)
    from pilot.judges.deck_pdf import DeckRenderError

    with pytest.raises(DeckRenderError, match="cannot confine LibreOffice on this host: bubblewrap"):
        render_deck_pdf(hostile["deck"], tmp_path / "pdf")
    # The development opt-out runs it unconfined, still on the copy made inert, and the result says so.
    monkeypatch.setenv(confined.ISOLATION_ENV, confined.OPT_OUT)
    res = Recalculator(tmp_path / "r2").recalculate([hostile["workbook"]])[hostile["workbook"]]
    assert res.error is None and res.confinement == "unisolated" and res.neutralised


# -------------------------------------------------------------------------- an unprivileged harness

HARNESS = textwrap.dedent("""\
    import json, sys
    from pathlib import Path
    from pilot import confined
    from pilot.judges.deck_pdf import render_deck_pdf
    from pilot.oracles.recalc import Recalculator
    sys.path.insert(0, {tests!r})
    import test_harness_hands_render as t
    base, port = Path({base!r}), {port}
    pdf = render_deck_pdf(base / "support_review.pptx", base / "pdf")
    with Recalculator(base / "recalc") as r:
        res = r.recalculate([base / "reconciliation.xlsx"])[base / "reconciliation.xlsx"]
    probe, done, run = t.run_probe(base / "probe", port)
    print(json.dumps({{"pdf": str(pdf), "recalc": str(res.path), "recalc_error": res.error,
                       "confinement": res.confinement, "probe": probe, "identity": done.identity,
                       "run": str(run)}}))
""")


@pytest.mark.usefixtures("confined_libreoffice")
def test_an_unprivileged_harness_confines_libreoffice_alike(hostile, listener, canary, tmp_path):
    """The harness itself runs as a user without privilege: the helper runs as that user, confined the same way."""
    if os.geteuid() != 0:
        pytest.skip("made from a root harness, which creates the unprivileged harness user (as make test runs)")
    import shutil

    uid, gid = harness_user()
    base = paths.BUILD_DIR / "test-render-privilege" / uuid.uuid4().hex[:10]
    base.mkdir(parents=True)
    try:
        passable(base)
        for name in ("deck", "workbook"):
            shutil.copyfile(hostile[name], base / hostile[name].name)
        # The canary lies where this harness user may read it: only the confinement and the inert copy keep it out.
        passable(canary["folder"])
        for f in canary["folder"].iterdir():
            os.chmod(f, 0o644)
        for p in [base, *base.rglob("*")]:
            os.chown(p, uid, gid)
        before = list(listener.hits)
        code = HARNESS.format(tests=str(Path(__file__).parent), base=str(base), port=listener.port)
        proc = run_python_as(uid, gid, code, home=base, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        assert listener.hits == before
        assert got["identity"] == {"uid": uid, "gid": gid, "name": pwd.getpwuid(uid).pw_name, "dedicated": False}
        check_probe(got["probe"], Path(got["run"]), uid)
        assert_no_canary_in_pdf(Path(got["pdf"]), canary)
        assert got["recalc_error"] is None and got["confinement"] == "bubblewrap"
        assert canary["text"].encode() not in archive_text(Path(got["recalc"]))
    finally:
        shutil.rmtree(base, ignore_errors=True)


# -------------------------------------------------------------------------- what is made inert, file by file


def _ods(folder: Path, content_body: str, settings: str = "") -> Path:
    path = folder / "book.ods"
    ns = (
        'xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
        'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" '
        'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
        'xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0" '
        'xmlns:xlink="http://www.w3.org/1999/xlink" '
        'xmlns:config="urn:oasis:names:tc:opendocument:xmlns:config:1.0"'
    )
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("mimetype", "application/vnd.oasis.opendocument.spreadsheet")
        z.writestr(
            "content.xml",
            f'<?xml version="1.0" encoding="UTF-8"?><office:document-content {ns}><office:body>'
            f"<office:spreadsheet>{content_body}</office:spreadsheet></office:body></office:document-content>",
        )
        if settings:
            z.writestr(
                "settings.xml",
                f'<?xml version="1.0" encoding="UTF-8"?><office:document-settings {ns}><office:settings>'
                f"{settings}</office:settings></office:document-settings>",
            )
    return path


def test_opendocument_links_are_made_inert_and_web_hyperlinks_kept(tmp_path):
    body = (
        '<table:table table:name="Sheet1"><table:table-row>'
        '<table:table-cell table:formula="of:=COM.MICROSOFT.WEBSERVICE(&quot;http://127.0.0.1:9/x&quot;)"/>'
        "<table:table-cell table:formula=\"of:=['file:///etc/shadow'#$Sheet1.A1]\"/>"
        '<table:table-cell table:formula="of:=&quot;WEBSERVICE(is text)&quot;"/>'
        '<table:table-cell><text:p><text:a xlink:href="https://example.org/report">web</text:a>'
        '<text:a xlink:href="file:///root/notes.txt">host</text:a></text:p></table:table-cell>'
        '<table:table-cell><draw:frame><draw:image xlink:href="Pictures/inside.png"/></draw:frame>'
        '<draw:frame><draw:image xlink:href="../outside.png"/></draw:frame></table:table-cell>'
        "</table:table-row></table:table>"
        '<table:table table:name="Linked"><table:table-source xlink:href="http://127.0.0.1:9/other.ods"/>'
        "</table:table>"
        '<table:dde-links><table:dde-link><office:dde-source office:dde-application="soffice" '
        'office:dde-topic="/root/secret.ods" office:dde-item="A1"/></table:dde-link></table:dde-links>'
    )
    settings = '<config:config-item config:name="LinkUpdateMode" config:type="short">2</config:config-item>'
    path = _ods(tmp_path, body, settings)
    found = office_links.neutralise(path)
    got = sorted((n.part, n.what, n.target) for n in found)
    assert got == sorted(
        [
            ("content.xml", "WEBSERVICE call", 'of:=COM.MICROSOFT.WEBSERVICE("http://127.0.0.1:9/x")'),
            ("content.xml", "reference to another file", "of:=['file:///etc/shadow'#$Sheet1.A1]"),
            ("content.xml", "a link", "file:///root/notes.txt"),
            ("content.xml", "image link", "../outside.png"),
            ("content.xml", "table-source link", "http://127.0.0.1:9/other.ods"),
            ("content.xml", "DDE dde-application", "soffice"),
            ("content.xml", "DDE dde-topic", "/root/secret.ods"),
            ("content.xml", "DDE dde-item", "A1"),
            ("settings.xml", "update of links on load", "2"),
        ]
    )
    with zipfile.ZipFile(path) as z:
        content = z.read("content.xml").decode()
        assert z.namelist()[0] == "mimetype" and z.getinfo("mimetype").compress_type == zipfile.ZIP_STORED
    for kept in ("https://example.org/report", "Pictures/inside.png", "&quot;WEBSERVICE(is text)&quot;"):
        assert kept in content
    for gone in ("file:///", "127.0.0.1:9/other.ods", "COM.MICROSOFT.WEBSERVICE", "/root/secret.ods", "../outside.png"):
        assert gone not in content
    assert office_links.neutralise(path) == []  # made inert once, it stays as it is


def test_ooxml_hyperlinks_fields_and_spelled_out_names_are_caught(tmp_path):
    from docx import Document

    doc = Document()
    doc.add_paragraph("memo")
    base = tmp_path / "base.docx"
    doc.save(base)
    simple = '<w:p><w:fldSimple w:instr=" INCLUDEPICTURE &quot;http://127.0.0.1:9/p.png&quot; "/></w:p>'
    # LINK split over two runs, as Word writes long instructions.
    split = (
        '<w:p><w:r><w:fldChar w:fldCharType="begin"/></w:r><w:r><w:instrText> LI</w:instrText></w:r>'
        '<w:r><w:instrText>NK Excel.Sheet "/root/b.xlsx" </w:instrText></w:r>'
        '<w:r><w:fldChar w:fldCharType="separate"/></w:r><w:r><w:t>42</w:t></w:r>'
        '<w:r><w:fldChar w:fldCharType="end"/></w:r></w:p>'
    )
    rels_extra = (
        '<Relationship Id="rId801" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
        'hyperlink" Target="https://example.org/" TargetMode="External"/>'
        '<Relationship Id="rId802" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
        'hyperlink" Target="file:///etc/passwd" TargetMode="&#69;xternal"/>'
        '<Relationship Id="rId803" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
        'attachedTemplate" Target="\\\\host\\share\\t.dotm"/>'
    )

    def body(xml: str) -> str:
        i = xml.rfind("<w:sectPr")
        return xml[:i] + simple + split + xml[i:]

    path = _rewrite(
        base,
        tmp_path / "memo.docx",
        {
            "word/document.xml": body,
            "word/_rels/document.xml.rels": lambda t: t.replace("</Relationships>", rels_extra + "</Relationships>"),
        },
    )
    got = sorted((n.what.split(" (")[0], n.target) for n in office_links.neutralise(path))
    assert got == [
        ("INCLUDEPICTURE field", 'INCLUDEPICTURE "http://127.0.0.1:9/p.png"'),
        ("LINK field", 'LINK Excel.Sheet "/root/b.xlsx"'),
        ("attached template", "\\\\host\\share\\t.dotm"),
        ("hyperlink", "file:///etc/passwd"),
    ]
    with zipfile.ZipFile(path) as z:
        doc_xml, rels = z.read("word/document.xml").decode(), z.read("word/_rels/document.xml.rels").decode()
    assert "https://example.org/" in rels and "/etc/passwd" not in rels and "127.0.0.1" not in doc_xml
    assert "<w:t>42</w:t>" in doc_xml  # the field's last result stays for the reader

    wb = openpyxl.Workbook()
    wb.active["A1"] = "=1"
    book = tmp_path / "spelled.xlsx"
    wb.save(book)
    spelled = _rewrite(
        book,
        tmp_path / "spelled2.xlsx",
        {"xl/worksheets/sheet1.xml": lambda t: t.replace("<f>1</f>", '<f>&#87;EBSERVICE("http://127.0.0.1:9/")</f>')},
    )
    assert [n.what for n in office_links.neutralise(spelled)] == ["WEBSERVICE call in A1"]


def test_a_file_without_links_is_left_byte_for_byte_and_a_declared_doctype_is_refused(tmp_path):
    wb = openpyxl.Workbook()
    wb.active["A1"] = "=SUM(B1:B3)"
    plain = tmp_path / "plain.xlsx"
    wb.save(plain)
    before = plain.read_bytes()
    assert office_links.neutralise(plain) == [] and plain.read_bytes() == before
    bomb = _rewrite(
        plain,
        tmp_path / "laughs.xlsx",
        {
            "xl/_rels/workbook.xml.rels": lambda t: t.replace(
                "<Relationships", '<!DOCTYPE r [<!ENTITY a "aaaaaaaa">]><Relationships', 1
            )
        },
    )
    with pytest.raises(office_links.Refused, match="declares a document type"):
        office_links.neutralise(bomb)
    with pytest.raises(office_links.Refused, match="not an Office Open XML or OpenDocument archive"):
        (tmp_path / "x.xlsx").write_bytes(b"\xd0\xcf\x11\xe0 legacy")
        office_links.neutralise(tmp_path / "x.xlsx")


def test_only_regular_files_cross_the_wall(tmp_path, canary):
    link = tmp_path / "book.xlsx"
    link.symlink_to(canary["xlsx"])
    with pytest.raises(confined.UnsafeFile, match="without following a link"):
        confined.copy_regular(link, tmp_path / "copy.xlsx", 1 << 20)
    os.mkfifo(tmp_path / "pipe.xlsx")
    with pytest.raises(confined.UnsafeFile, match="not a regular file"):
        confined.copy_regular(tmp_path / "pipe.xlsx", tmp_path / "copy.xlsx", 1 << 20)
    sparse = tmp_path / "sparse.xlsx"
    with open(sparse, "wb") as fh:
        fh.truncate(2 << 30)
    with pytest.raises(confined.UnsafeFile, match="above the 1048576-byte bound"):
        confined.copy_regular(sparse, tmp_path / "copy.xlsx", 1 << 20)
    assert not (tmp_path / "copy.xlsx").exists()
    # The oracle reports a refused workbook as its recalculation's failure, naming why.
    with Recalculator(tmp_path / "r") as r:
        res = r.recalculate([link])[link]
    assert res.path is None and "recalculation refused" in res.error and "without following a link" in res.error
