"""The paper's apparatus: authors and affiliations, the preregistration's identifier, PDF metadata.

Authors come from ``manuscript/authors.yml``, which the team edits; the
protocol's identifier is its version (``study.yml``) and the digest of the
frozen files of the study's scenario set (:func:`pilot.freeze.manifest_digest`),
so a reader can recompute it from the repository.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pilot import freeze, paths
from pilot.latex import LatexText, latex_escape, write_macros
from pilot.protocol import ProtocolError, Study, load_study, object_schema, read_yaml, validate

AUTHORS_FILE: Path = paths.MANUSCRIPT_DIR / "authors.yml"

_NAME = {"type": "string", "pattern": r"\S"}  # a name with at least one visible character
_TEXT = {"type": "string"}
#: ``authors.yml``: at least one named author; the preregistration's registry and identifier go together.
AUTHORS_SCHEMA: dict[str, Any] = object_schema(
    {
        "authors": {
            "type": "array",
            "minItems": 1,
            "items": object_schema(
                {"name": _NAME, "affiliation": _TEXT, "placeholder": {"type": "boolean"}}, required=["name"]
            ),
        },
        "preregistration": {
            **object_schema({"registry": _TEXT, "identifier": _TEXT, "url": _TEXT}, required=[]),
            "dependentRequired": {"registry": ["identifier"], "identifier": ["registry"]},
        },
        "funding": _TEXT,
        "competing_interests": _TEXT,
    },
    required=["authors"],
)
#: What the paper prints where the team has not filled authors.yml in: visible on the page, and said by the build.
NOT_FILLED = "not yet stated in \\texttt{manuscript/authors.yml}"


@dataclass(frozen=True)
class Author:
    name: str
    affiliation: str


@dataclass(frozen=True)
class Apparatus:
    authors: tuple[Author, ...]
    registry: str
    identifier: str
    url: str
    funding: str = ""
    competing_interests: str = ""
    #: An author entry marked ``placeholder: true``: the team has not named the authors yet.
    placeholder_authors: bool = False

    def missing(self) -> list[str]:
        """What the team has not filled in yet (the build says so, and so does the paper)."""
        out = []
        if self.placeholder_authors:
            out.append("authors")
        if not self.funding:
            out.append("funding")
        if not self.competing_interests:
            out.append("competing interests")
        return out


def load_apparatus(path: Path | None = None) -> Apparatus:
    """Read and check ``authors.yml``; a malformed one is a :class:`pilot.protocol.ProtocolError` naming file and
    field."""
    path = Path(path or AUTHORS_FILE)
    raw = read_yaml(path)
    validate(raw, AUTHORS_SCHEMA, path)
    placeholder = any(bool(a.get("placeholder")) for a in raw["authors"])
    authors = tuple(
        Author(a["name"].strip(), (a.get("affiliation") or "").strip())
        for a in raw["authors"]
        if not a.get("placeholder")
    )
    pre = raw.get("preregistration") or {}
    registry, identifier, url = ((pre.get(k) or "").strip() for k in ("registry", "identifier", "url"))
    if bool(registry) != bool(identifier):  # given both, but one of them blank
        raise ProtocolError(path, "preregistration", "registry and identifier go together: give both or neither")
    return Apparatus(
        authors,
        registry,
        identifier,
        url,
        " ".join(str(raw.get("funding") or "").split()),
        " ".join(str(raw.get("competing_interests") or "").split()),
        placeholder,
    )


def apparatus_macros(
    study: Study | None = None, scenario_set: str | None = None, path: Path | None = None
) -> dict[str, object]:
    """The title page's authors, the preregistration sentence and the PDF metadata, as macros."""
    study = study or load_study()
    app = load_apparatus(path)
    manifest = freeze.take_manifest(scenarios=study.scenario_set(scenario_set))
    digest = freeze.manifest_digest(manifest)
    # Affiliations numbered in order of first appearance, as journals print them.
    affs: list[str] = []
    for a in app.authors:
        if a.affiliation and a.affiliation not in affs:
            affs.append(a.affiliation)
    names = [
        latex_escape(a.name)
        + (f"\\textsuperscript{{{affs.index(a.affiliation) + 1}}}" if a.affiliation and len(affs) > 1 else "")
        for a in app.authors
    ]
    if app.placeholder_authors:
        names.append(f"\\textbf{{[authors {NOT_FILLED}]}}")
    lines = [", ".join(names)]
    lines += [
        (f"\\textsuperscript{{{i}}}" if len(affs) > 1 else "") + latex_escape(aff)
        for i, aff in enumerate(affs, start=1)
    ]
    version = str(study["study"]["protocol_version"])
    frozen = (
        f"protocol version {latex_escape(version)}, frozen files {len(manifest)}, "
        f"SHA-256 digest of their manifest beginning \\texttt{{{digest[:16]}}} (its first 16 of 64 hex digits)"
    )
    if app.identifier:
        pre = f"Preregistered with {latex_escape(app.registry)}, \\texttt{{{latex_escape(app.identifier)}}}"
        pre += (f" (\\url{{{app.url}}})" if app.url else "") + f"; {frozen}."
    else:
        pre = (
            "Preregistration: the protocol in \\texttt{protocol/} of the study's repository, not filed with a public "
            f"registry; {frozen}."
        )
    funding = latex_escape(app.funding) if app.funding else f"\\textbf{{[Funding {NOT_FILLED}.]}}"
    interests = (
        latex_escape(app.competing_interests)
        if app.competing_interests
        else f"\\textbf{{[Competing interests {NOT_FILLED}.]}}"
    )
    return {
        "PaperFunding": LatexText(funding),
        "PaperCompetingInterests": LatexText(interests),
        "PaperApparatusMissing": ", ".join(app.missing()) or "none",
        "PaperAuthors": LatexText(" \\\\ \\small ".join(lines)),
        "PaperAuthorsPlain": LatexText(", ".join(latex_escape(a.name) for a in app.authors) or "authors not yet named"),
        "PreregistrationSentence": LatexText(pre),
        "ProtocolVersion": version,
        "ProtocolDigest": LatexText(f"\\texttt{{{digest[:16]}}}"),
        "ProtocolDigestFull": LatexText(f"\\texttt{{{digest}}}"),
        "ProtocolFrozenFiles": len(manifest),
    }


def write_apparatus_macros(out_dir: Path, study: Study | None = None, scenario_set: str | None = None) -> Path:
    """Write ``apparatus_macros.tex``; what the team has not filled in is said on stderr (and on the page)."""
    import sys

    missing = load_apparatus().missing()
    if missing:
        print(
            f"{paths.shown(AUTHORS_FILE)}: {', '.join(missing)} not filled in; the paper prints a placeholder "
            "that says so",
            file=sys.stderr,
        )
    return write_macros(
        apparatus_macros(study, scenario_set),
        Path(out_dir) / "apparatus_macros.tex",
        comment="From manuscript/authors.yml and the freeze manifest of the study's scenario set.",
    )
