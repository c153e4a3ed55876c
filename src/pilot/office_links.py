"""Office files made inert before LibreOffice opens them: no link in them reaches a file or a host.

A worker's workbook, document or deck can point outside itself: a linked
image (``r:link``, ``xlink:href``) at a web address or a ``file://`` path, an
OLE or DDE link, another workbook (``externalLink`` parts), linked media, a
field that includes a file or a picture (``INCLUDEPICTURE``, ``INCLUDETEXT``,
``LINK``, ``DDE``), a formula that fetches (``WEBSERVICE``, ``FILTERXML``,
``DDE``, ``RTD``). LibreOffice follows some of them when it renders or
recalculates. Before it does, :func:`neutralise` rewrites the harness's
private copy: every relationship leaving the package gets an inert target
(:data:`INERT_TARGET`), except a hyperlink to ``http``, ``https`` or
``mailto`` (a reader's click, never fetched by the renderer); link fields
lose their instruction (their last shown result stays); fetching functions
are renamed so they evaluate to an error; document settings that would
update links on load are set to never. The ODF forms (``xlink:href`` outside
the package, ``table:table-source``, DDE connections, ``LinkUpdateMode``)
are treated alike.

The targets are replaced rather than removed, so what the file says is
otherwise unchanged: a workbook that links to another still shows the
values cached from it (and the oracle still says it links), and a file with
no link is left byte for byte as it was. Every change is returned
(:class:`Neutralised`: which part, what, which target) for the caller to
record. The parts are parsed with entity expansion, DTD loading and network
access off; a part that declares a document type is refused
(:class:`Refused`), as is an archive above the bounds.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

#: What every link that left the package points at afterwards.
INERT_TARGET = "about:blank"
#: Hyperlink schemes left as they are: a reader follows them by a click; no renderer fetches them.
HYPERLINK_SCHEMES = ("http", "https", "mailto")
#: Bounds on what is read of one archive (the oracle's own screens are tighter for deliverables).
MAX_ENTRIES = 10_000
MAX_PART_BYTES = 64 * 1024 * 1024
MAX_TOTAL_BYTES = 256 * 1024 * 1024
#: At most this much of a target is kept in the record.
MAX_SHOWN = 300

_PKG_REL = "http://schemas.openxmlformats.org/package/2006/relationships"
_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_S = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_XLINK = "http://www.w3.org/1999/xlink"
_OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
_TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
_TABLE = "urn:oasis:names:tc:opendocument:xmlns:table:1.0"
_DRAW = "urn:oasis:names:tc:opendocument:xmlns:drawing:1.0"
_CONFIG = "urn:oasis:names:tc:opendocument:xmlns:config:1.0"

#: Functions that reach outside the workbook when evaluated.
FETCHING_FUNCTIONS = ("WEBSERVICE", "FILTERXML", "DDE", "RTD")
_FUNCTION = re.compile(
    r"(?<![A-Za-z0-9_.])((?:_xlfn\.|_xludf\.|COM\.MICROSOFT\.|ORG\.OPENOFFICE\.|ORG\.LIBREOFFICE\.)?)("
    + "|".join(FETCHING_FUNCTIONS)
    + r")(\s*\()",
    re.IGNORECASE,
)
_RENAMED = "PILOT.LINK.REMOVED."
#: Word fields that pull in a file, a picture, a database or a DDE conversation when updated.
LINK_FIELDS = ("INCLUDEPICTURE", "INCLUDETEXT", "LINK", "DDE", "DDEAUTO", "IMPORT", "DATABASE")
_XML_DECL_ENCODING = re.compile(rb"""^\s*<\?xml[^>]*encoding\s*=\s*["']([A-Za-z0-9._-]+)["']""")


class Refused(ValueError):
    """The file cannot be made inert (not an archive, a document type declared in a part, above the bounds)."""


@dataclass(frozen=True)
class Neutralised:
    """One link made inert: the part it was in, what it was, and where it pointed."""

    part: str
    what: str
    target: str

    def __str__(self) -> str:
        return f"{self.part}: {self.what} {self.target!r} made inert"

    def to_dict(self) -> dict[str, str]:
        return {"part": self.part, "what": self.what, "target": self.target}


def _shown(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 1] + "\u2026"


def _parser() -> Any:
    from lxml import etree

    return etree.XMLParser(
        resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False, remove_blank_text=False
    )


def _parse(part: str, data: bytes) -> Any:
    from lxml import etree

    try:
        tree = etree.fromstring(data, _parser()).getroottree()
    except etree.XMLSyntaxError as exc:
        raise Refused(f"{part} is not well-formed XML ({exc})") from None
    if tree.docinfo.doctype or tree.docinfo.internalDTD is not None:
        raise Refused(f"{part} declares a document type (entities are never expanded here)")
    return tree


def _serialise(tree: Any) -> bytes:
    from lxml import etree

    info = tree.docinfo
    return cast(
        bytes,
        etree.tostring(tree, xml_declaration=True, encoding=info.encoding or "UTF-8", standalone=info.standalone),
    )


def _plain_utf8(data: bytes) -> bool:
    """Whether the part's bytes show its characters as they are (UTF-8 or ASCII, no NUL): a byte search is exact then.

    Character references (``&#87;``) can spell any name, so a part holding one is never taken as plain.
    """
    if b"\x00" in data or data.startswith((b"\xfe\xff", b"\xff\xfe")) or b"&#" in data:
        return False
    m = _XML_DECL_ENCODING.match(data[:300].lstrip(b"\xef\xbb\xbf"))
    return m is None or m.group(1).lower() in (b"utf-8", b"utf8", b"us-ascii", b"ascii")


def _may_hold(data: bytes, pattern: re.Pattern[bytes]) -> bool:
    """False only when the part certainly holds nothing ``pattern`` (on its bytes) would find."""
    return not _plain_utf8(data) or pattern.search(data) is not None


_CALL_BYTES = re.compile(rb"(?i)(" + "|".join(FETCHING_FUNCTIONS).encode() + rb")\s*\(|updatelinks|'[#!]|\][^<\s]*!")
_FIELD_BYTES = re.compile(rb"(?i)\b(" + "|".join(LINK_FIELDS).encode() + rb")\b|updatefields")


def _external(target: str, mode: str | None) -> bool:
    """Whether a relationship leaves the package: said so, or a target that is a URL or an absolute path."""
    if mode is not None and mode.strip() != "Internal":
        return True
    t = target.strip()
    return bool(urlsplit(t).scheme) or t.startswith(("//", "\\\\")) or (len(t) > 1 and t[1] == ":")


def _hyperlink_ok(target: str) -> bool:
    return urlsplit(target.strip()).scheme.lower() in HYPERLINK_SCHEMES


def _rel_kind(rel_type: str) -> str:
    tail = rel_type.rstrip("/").rsplit("/", 1)[-1]
    return {
        "image": "linked image",
        "hyperlink": "hyperlink",
        "oleObject": "OLE link",
        "externalLinkPath": "external workbook",
        "xlExternalLinkPath": "external workbook",
        "video": "linked video",
        "audio": "linked audio",
        "media": "linked media",
        "attachedTemplate": "attached template",
        "subDocument": "linked sub-document",
        "frame": "linked frame",
        "package": "linked package",
    }.get(tail, f"external link ({tail})")


# --------------------------------------------------------------------------
# The parts
# --------------------------------------------------------------------------


def _relationships(part: str, data: bytes) -> tuple[bytes | None, list[Neutralised]]:
    tree = _parse(part, data)
    found: list[Neutralised] = []
    for rel in tree.getroot().iter(f"{{{_PKG_REL}}}Relationship"):
        target = rel.get("Target") or ""
        if not _external(target, rel.get("TargetMode")) or target == INERT_TARGET:
            continue
        kind = _rel_kind(rel.get("Type") or "")
        if kind == "hyperlink" and _hyperlink_ok(target):
            continue
        found.append(Neutralised(part, f"{kind} (relationship {rel.get('Id')})", _shown(target)))
        rel.set("Target", INERT_TARGET)
        rel.set("TargetMode", "External")
    return (_serialise(tree) if found else None), found


#: A quoted reference that names a place rather than a sheet (``'file:///x.ods'#$Sheet1.A1``,
#: ``'/home/x/[book.xlsx]Sheet1'!A1``): a sheet's name holds none of ``/ \\ [ ] :``.
_QUOTED_PLACE = re.compile(r"'((?:[^']|'')*[/\\\[\]:](?:[^']|'')*)'(?=[#!])")
#: An unquoted book in brackets before a sheet (``[/home/x/book.xlsx]Sheet1!A1``); ``[1]`` (an index of the file's
#: own external-link parts, whose targets are made inert) and structured references (``[@Col]``, ``[[#This Row]``,
#: ``Table1[Col]``) are left alone.
_BRACKET_PLACE = re.compile(r"(?<![A-Za-z0-9_\]\)\[])\[([^\[\]@#][^\[\]]*[/\\:][^\[\]]*)\](?=[^!\s()]*!)")


def _inert_formula(text: str) -> tuple[str, list[str]]:
    """``text`` (a formula) with every fetching function renamed and every reference to another file made inert,
    outside its string literals; what was changed."""
    changes: list[str] = []
    pieces = re.split(r'("(?:[^"]|"")*")', text)
    for i in range(0, len(pieces), 2):  # the even pieces lie outside the quotes

        def rename(m: re.Match[str]) -> str:
            changes.append(f"{m.group(2).upper()} call")
            return f"{_RENAMED}{m.group(2).upper()}{m.group(3)}"

        def place(m: re.Match[str]) -> str:
            whole: str = m.group(0)
            if m.group(1) == INERT_TARGET:
                return whole
            changes.append("reference to another file")
            return whole.replace(m.group(1), INERT_TARGET, 1)

        piece = _FUNCTION.sub(rename, pieces[i])
        piece = _QUOTED_PLACE.sub(place, piece)
        pieces[i] = _BRACKET_PLACE.sub(place, piece)
    return "".join(pieces), changes


def _formulas(part: str, tree: Any) -> list[Neutralised]:
    """Every fetching function in the formulas of a SpreadsheetML tree renamed (it then evaluates to an error)."""
    found: list[Neutralised] = []
    for el in tree.getroot().iter():
        if not isinstance(el.tag, str) or not el.text:
            continue
        local = el.tag.rsplit("}", 1)[-1]
        if local not in ("f", "formula", "formula1", "formula2", "definedName"):
            continue
        new, changes = _inert_formula(el.text)
        if changes:
            parent = el.getparent()
            where = parent.get("r") if local == "f" and parent is not None else None
            for what in changes:
                found.append(Neutralised(part, what + (f" in {where}" if where else ""), _shown(el.text)))
            el.text = new
    return found


def _sheet_formulas(part: str, data: bytes) -> tuple[bytes | None, list[Neutralised]]:
    if not _may_hold(data, _CALL_BYTES):
        return None, []
    tree = _parse(part, data)
    found = _formulas(part, tree)
    root = tree.getroot()
    if root.tag == f"{{{_S}}}workbook":
        pr = root.find(f"{{{_S}}}workbookPr")
        if pr is not None and pr.get("updateLinks") not in (None, "never"):
            found.append(Neutralised(part, "update of links on load", pr.get("updateLinks")))
            pr.set("updateLinks", "never")
    return (_serialise(tree) if found else None), found


def _external_link_part(part: str, data: bytes) -> tuple[bytes | None, list[Neutralised]]:
    """An ``externalLink`` part: its DDE conversation (service and topic) made inert; its cached values stay."""
    tree = _parse(part, data)
    found: list[Neutralised] = []
    for el in tree.getroot().iter(f"{{{_S}}}ddeLink"):
        shown = f"{el.get('ddeService')}|{el.get('ddeTopic')}"
        if shown != f"{INERT_TARGET}|{INERT_TARGET}":
            found.append(Neutralised(part, "DDE link", _shown(shown)))
            el.set("ddeService", INERT_TARGET)
            el.set("ddeTopic", INERT_TARGET)
    return (_serialise(tree) if found else None), found


def _word_fields(part: str, data: bytes) -> tuple[bytes | None, list[Neutralised]]:
    """Link fields of a Word part lose their instruction (the result last shown stays)."""
    if not _may_hold(data, _FIELD_BYTES):
        return None, []
    tree = _parse(part, data)
    found: list[Neutralised] = []
    root = tree.getroot()
    instr_tags = (f"{{{_W}}}instrText", f"{{{_W}}}delInstrText")

    def is_link(instr: str) -> bool:
        words = instr.split()
        return bool(words) and words[0].upper() in LINK_FIELDS

    for simple in root.iter(f"{{{_W}}}fldSimple"):
        instr = simple.get(f"{{{_W}}}instr") or ""
        if is_link(instr):
            found.append(Neutralised(part, f"{instr.split()[0].upper()} field", _shown(instr)))
            simple.set(f"{{{_W}}}instr", " ")
    # Complex fields: the instruction is spread over the runs between a 'begin' and its 'separate' (or 'end').
    stack: list[list[Any]] = []
    for el in root.iter():
        if el.tag == f"{{{_W}}}fldChar":
            kind = el.get(f"{{{_W}}}fldCharType")
            if kind == "begin":
                stack.append([])
            elif kind in ("separate", "end") and stack:
                runs = stack.pop() if kind == "end" else stack[-1]
                instr = "".join(r.text or "" for r in runs)
                if runs and is_link(instr):
                    found.append(Neutralised(part, f"{instr.split()[0].upper()} field", _shown(instr)))
                    for r in runs:
                        r.text = " "
                if kind == "separate":
                    stack[-1] = []  # the result's own runs are not instruction
        elif el.tag in instr_tags and stack:
            stack[-1].append(el)
    if root.tag == f"{{{_W}}}settings":
        for el in list(root.iter(f"{{{_W}}}updateFields")):
            if (el.get(f"{{{_W}}}val") or "true").lower() not in ("false", "0", "off"):
                found.append(Neutralised(part, "update of fields on open", "true"))
                el.set(f"{{{_W}}}val", "false")
    return (_serialise(tree) if found else None), found


#: ODF elements whose external ``xlink:href`` is a reader's hyperlink, kept when it is http, https or mailto.
_ODF_HYPERLINKS = {f"{{{_TEXT}}}a", f"{{{_DRAW}}}a"}
_ODF_DDE_ATTRS = ("dde-application", "dde-topic", "dde-item")


def _odf_internal(href: str) -> bool:
    h = href.strip()
    if not h or h.startswith("#"):
        return True
    if urlsplit(h).scheme or h.startswith(("/", "\\")):
        return False
    depth = 0
    for seg in h.replace("\\", "/").split("/"):
        if seg == "..":
            depth -= 1
            if depth < 0:
                return False
        elif seg not in ("", "."):
            depth += 1
    return True


def _odf_part(part: str, data: bytes) -> tuple[bytes | None, list[Neutralised]]:
    tree = _parse(part, data)
    found: list[Neutralised] = []
    href = f"{{{_XLINK}}}href"
    for el in tree.getroot().iter():
        if not isinstance(el.tag, str):
            continue
        value = el.get(href)
        if value is not None and not _odf_internal(value) and value != INERT_TARGET:
            local = el.tag.rsplit("}", 1)[-1]
            if not (el.tag in _ODF_HYPERLINKS and _hyperlink_ok(value)):
                found.append(Neutralised(part, f"{local} link", _shown(value)))
                el.set(href, INERT_TARGET)
        for attr in list(el.attrib):
            local_attr = attr.rsplit("}", 1)[-1]
            if local_attr in _ODF_DDE_ATTRS and el.get(attr) != INERT_TARGET:
                found.append(Neutralised(part, f"DDE {local_attr}", _shown(el.get(attr) or "")))
                el.set(attr, INERT_TARGET)
            elif local_attr in ("formula", "condition", "expression"):
                new, changes = _inert_formula(el.get(attr) or "")
                for what in changes:
                    found.append(Neutralised(part, what, _shown(el.get(attr) or "")))
                if changes:
                    el.set(attr, new)
        if el.tag == f"{{{_CONFIG}}}config-item" and el.get(f"{{{_CONFIG}}}name") == "LinkUpdateMode":
            if (el.text or "").strip() != "0":  # css.document.LinkUpdateModes.NEVER
                found.append(Neutralised(part, "update of links on load", _shown(el.text or "")))
                el.text = "0"
    return (_serialise(tree) if found else None), found


#: A part's handler: its name and bytes to (the new bytes or None when unchanged, what was made inert).
PartHandler = Callable[[str, bytes], tuple[bytes | None, list[Neutralised]]]


def _handler(name: str, odf: bool) -> PartHandler | None:
    low = name.lower()
    if odf:
        if low.endswith(("content.xml", "styles.xml", "settings.xml", "meta.xml")):
            return _odf_part
        return None
    if low.endswith(".rels"):
        return _relationships
    if low.startswith("xl/externallinks/") and low.endswith(".xml"):
        return _external_link_part
    if low.startswith("xl/") and low.endswith(".xml"):
        return _sheet_formulas
    if low.startswith("word/") and low.endswith(".xml"):
        return _word_fields
    return None


# --------------------------------------------------------------------------
# The file
# --------------------------------------------------------------------------


def neutralise(path: Path) -> list[Neutralised]:
    """Make the office file at ``path`` (the harness's private copy) inert, in place; what was changed.

    A file with nothing to change is left byte for byte as it was. Raises
    :class:`Refused` when it cannot be made inert: not a zip archive (a
    legacy binary or encrypted file), too many or too large entries, a part
    that is not well-formed XML or that declares a document type.
    """
    path = Path(path)
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise Refused(f"{path.name} is not an Office Open XML or OpenDocument archive ({exc})") from None
    with zf:
        infos = zf.infolist()
        if len(infos) > MAX_ENTRIES:
            raise Refused(f"{path.name} holds {len(infos)} entries, above {MAX_ENTRIES}")
        if sum(i.file_size for i in infos) > MAX_TOTAL_BYTES:
            raise Refused(f"{path.name} expands above {MAX_TOTAL_BYTES} bytes")
        names = {i.filename for i in infos}
        odf = "mimetype" in names and "content.xml" in names
        changed: dict[str, bytes] = {}
        found: list[Neutralised] = []
        for info in infos:
            handler = _handler(info.filename, odf)
            if handler is None or info.is_dir():
                continue
            if info.file_size > MAX_PART_BYTES:
                raise Refused(f"{path.name}: {info.filename} expands above {MAX_PART_BYTES} bytes")
            try:
                with zf.open(info) as fh:
                    data = fh.read(MAX_PART_BYTES + 1)
            except (zipfile.BadZipFile, OSError, RuntimeError, NotImplementedError) as exc:
                raise Refused(f"{path.name}: {info.filename} cannot be read ({exc})") from None
            if len(data) > MAX_PART_BYTES:
                raise Refused(f"{path.name}: {info.filename} expands above {MAX_PART_BYTES} bytes")
            new, more = handler(info.filename, data)
            if more:
                found += more
                changed[info.filename] = new if new is not None else data
        if not found:
            return []
        tmp = path.with_name(path.name + ".inert")
        with zipfile.ZipFile(tmp, "w") as out:
            for info in infos:
                data = changed[info.filename] if info.filename in changed else zf.read(info)
                out.writestr(info, data, compress_type=info.compress_type)
    tmp.replace(path)
    return found
