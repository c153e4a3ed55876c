"""Oracle reasons written for people: a pattern's plain phrases in place of its syntax.

The phrases are checked against hand-written expectations; the reasons come
from the real oracle, evaluating ACC-01's gold package edited the way a
careless worker would (the memo no longer says NSF, returned or dishonoured;
the workbook's bank-balance label reworded).
"""

from __future__ import annotations

import re

import pytest

from pilot.scenarios import load_scenario
from pilot.view.oracle_text import criterion_intent, describe_pattern, for_people, pattern_words

#: (pattern, its phrases as a person reads them): written by hand.
PHRASES = [
    ("NSF|returned|dishonou?red", (("NSF",), ("returned",), ("dishonored", "dishonoured"))),
    ("balance per bank( statement)?", (("balance per bank", "balance per bank statement"),)),
    ("1\\.25", (("1.25",),)),
    ("BR-?22", (("BR22", "BR-22"),)),
    ("Box 1\\b", (("Box 1",),)),
    ("declin\\w*|turn\\w* down", (("declin…",), ("turn… down",))),
    ("(paragraph|para\\.?) ?3 ?\\(b\\)", (("para 3 (b)", "para. 3 (b)", "paragraph 3 (b)"),)),
]


@pytest.mark.parametrize(("pattern", "want"), PHRASES)
def test_a_pattern_reads_as_its_phrases(pattern, want):
    assert pattern_words(pattern) == want
    # Every phrase is one the pattern itself accepts (case as written; "…" stands for any ending).
    for phrases in want:
        for p in phrases:
            if "…" not in p:
                assert re.fullmatch(pattern, p), (pattern, p)


def test_a_pattern_in_words_has_no_syntax_left():
    text = describe_pattern("NSF|returned|dishonou?red")
    assert text == "“NSF”, “returned” or “dishonored” (or “dishonoured”)"
    assert not re.search(r"[|?\\()\[\]]", text.replace("(or ", "").replace(")", ""))


def test_only_the_criterion_s_own_patterns_are_rewritten():
    sc = load_scenario("ACC-01")
    names = sc.oracle.by_id("memo_names_items")
    # A reason that quotes none of the criterion's patterns is left exactly as the oracle wrote it.
    assert for_people("reconciliation_memo.docx has 12 words; the brief asks for at least 300", names) == (
        "reconciliation_memo.docx has 12 words; the brief asks for at least 300"
    )
    # A set the oracle prints in braces reads as a list.
    assert for_people("memo.pdf (Recommendation) names exactly {DSCR} as the one that fails") == (
        "memo.pdf (Recommendation) names exactly DSCR as the one that fails"
    )
    assert criterion_intent(sc.oracle.by_id("recon_formulas")) == (
        "bank_reconciliation_2026-10.xlsx is a working workbook with at least 4 formulas"
    )


@pytest.mark.usefixtures("soffice")
def test_the_real_oracle_s_reasons_read_for_people(tmp_path):
    # Imported here: the other tests of this file need no LibreOffice (tests/component_tiers.py SUPPORT_MODULES).
    from mutation_support import evaluate_variants, in_turn, replace_sentences, set_cells

    sid = "ACC-01"
    memo = "reconciliation_memo.docx"
    variants = {
        "no-nsf": (
            replace_sentences(
                sid,
                memo,
                (
                    "The bank also returned a Vesta Agritech cheque of 1,360.00 unpaid (NSF) on 14 October",
                    "The bank also sent back a Vesta Agritech cheque of 1,360.00 unpaid on 14 October",
                ),
                ("Reverse the returned Vesta Agritech receipt", "Reverse the bounced Vesta Agritech receipt"),
                ("about the returned cheque", "about the bounced cheque"),
            ),
            set(),
        ),
        "relabelled": (
            in_turn(set_cells("bank_reconciliation_2026-10.xlsx", ("Reconciliation", "A3", "Bank closing figure"))),
            set(),
        ),
    }
    evs = evaluate_variants(sid, variants, tmp_path)
    sc = load_scenario(sid)
    nsf = next(c for c in evs["no-nsf"].failed if c.id == "memo_names_items")
    assert "NSF|returned|dishonou?red" in nsf.reason  # the oracle's own words quote the pattern
    said = for_people(nsf.reason, sc.oracle.by_id(nsf.id))
    assert said == (f"{memo} does not mention “NSF”, “returned” or “dishonored” (or “dishonoured”)")
    label = next(c for c in evs["relabelled"].failed if c.id == "recon_bank_balance")
    assert "/balance per bank( statement)?/" in label.reason
    said = for_people(label.reason, sc.oracle.by_id(label.id))
    assert "“balance per bank” (or “balance per bank statement”)" in said and "/" not in said.split(":", 1)[1]
