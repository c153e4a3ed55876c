"""The bibliography: the works the paper must place itself among, each a complete entry and each cited.

The keys are the related work the design answers to (GDPval, TheAgentCompany,
METR's time-horizon and RE-Bench papers, OSWorld, WebArena, tau-bench,
Inspect) and the three the design section cites; their first authors and
years are stated here from the publications themselves.
"""

from __future__ import annotations

import re

from pilot import paths

BIB = paths.MANUSCRIPT_DIR / "references.bib"
SECTIONS = paths.MANUSCRIPT_DIR / "sections"
#: key: (first author's surname, year), as the publications give them.
REQUIRED = {
    "patwardhan2025gdpval": ("Patwardhan", "2025"),
    "xu2024theagentcompany": ("Xu", "2024"),
    "kwa2025longtasks": ("Kwa", "2025"),
    "wijk2024rebench": ("Wijk", "2024"),
    "xie2024osworld": ("Xie", "2024"),
    "zhou2024webarena": ("Zhou", "2024"),
    "yao2024taubench": ("Yao", "2024"),
    "aisi2024inspect": ("UK AI Security Institute", "2024"),
    "gu2024survey": ("Gu", "2024"),
    "panickssery2024selfpreference": ("Panickssery", "2024"),
    "wang2024fair": ("Wang", "2024"),
}


def entries() -> dict[str, dict[str, str]]:
    text = BIB.read_text(encoding="utf-8")
    out = {}
    for m in re.finditer(r"@(\w+)\{([^,]+),(.*?)\n\}", text, re.S):
        fields = {k.lower(): v.strip() for k, v in re.findall(r"(\w+)\s*=\s*\{(.*?)\},?\s*$", m.group(3), re.M)}
        out[m.group(2).strip()] = {"type": m.group(1).lower(), **fields}
    return out


def test_every_required_work_is_a_complete_entry():
    bib = entries()
    for key, (first, year) in REQUIRED.items():
        e = bib[key]
        assert e.get("title") and e.get("year") == year, key
        assert e.get("journal") or e.get("booktitle") or e.get("howpublished"), f"{key}: no venue"
        assert e["author"].lstrip("{").startswith(first), (key, e["author"][:40])


def test_every_entry_is_cited_and_every_citation_has_an_entry():
    bib = entries()
    cited = set()
    for tex in SECTIONS.glob("*.tex"):
        for group in re.findall(r"\\cite[tp]?\{([^}]+)\}", tex.read_text(encoding="utf-8")):
            cited |= {k.strip() for k in group.split(",")}
    assert cited <= set(bib), sorted(cited - set(bib))
    assert set(bib) <= cited, f"entries never cited: {sorted(set(bib) - cited)}"
    assert set(REQUIRED) <= cited
