"""CX-01's oracle fails the packages of an analyst who falls into one of its traps, and only there.

Each variant is the gold package copied and edited by hand the way a careless
support analyst would have produced it: the legacy re-import counted twice,
the awaiting-customer time left on the SLA clock, P1 tickets measured in
business hours, the clock rule left unsaid, the superseded version 2 of the
policy applied in place of version 3. The criteria each must fail are
worked out from the trap (which cell or slide line the mistake changes, with
the figures of cx_01's docstring: Onboarding 32 of 36 = 88.9%, Accounts 27 of
32 = 84.4% and P1 10 of 13 = 76.9% with the duplicates; Billing 25 of 30 =
83.3% with the pauses; Technical 29 of 30 = 96.7% and P1 12 of 12 = 100.0% in
business hours; under version 2, P2 at 24 business hours and an 85% target,
Billing's and Onboarding's P2 tickets of 22 business hours are met: Billing
and Onboarding 29 of 30 = 96.7%, P2 27 of 30 = 90.0%, Technical's 86.7%
above 85%), not read off the oracle. Two wordings a careful analyst
might use instead of the gold's must pass. All variants share one LibreOffice
batch and go through the deck-aware dispatcher, as every caller does.
"""

from __future__ import annotations

import re

import mutation_support
import pytest
from mutation_support import Mutation, in_turn

from pilot.oracle_formats.evaluate import evaluate_many
from pilot.scenarios import build_gold_workspace

pytestmark = pytest.mark.usefixtures("soffice")

SID = "CX-01"
BOOK = "sla_workbook.xlsx"
DECK = "support_review.pptx"

# The gold workbook's Attainment sheet (cx_01.solve): row 3 the team header, rows 4-7 Billing, Technical,
# Onboarding and Accounts (D attainment %, E CSAT %), row 9 the priority header, rows 10-13 P1 to P4.
BILLING, TECHNICAL, ONBOARDING, ACCOUNTS, P1, P2 = "D4", "D5", "D6", "D7", "D10", "D11"

GOLD_BREACH = "Technical and Accounts breached the 90% SLA target in October."
GOLD_MET = "Billing and Onboarding met the SLA target."
GOLD_TECH_ROW = "Technical | 30 | 26 | 86.7 | 71.4"
GOLD_BILLING_ROW = "Billing | 30 | 28 | 93.3 | 88.2"
GOLD_ONBOARDING_ROW = "Onboarding | 30 | 28 | 93.3 | 100.0"
GOLD_CLOCK = "time in 'Awaiting customer' was excluded from the SLA clock, "


def _book(*edits: tuple[str, object]) -> Mutation:
    """Type figures into the Attainment sheet over its formulas, as an analyst with other figures would."""
    return mutation_support.set_cells(BOOK, *(("Attainment", coord, value) for coord, value in edits))


def _deck(*pairs: tuple[str, str]) -> Mutation:
    """Replace lines of the deck; the rest stays as the gold wrote it (one slide per required title).

    Exact text, unlike a memo's sentences: a slide's lines are never wrapped.
    """

    def tr(lines: list[str]) -> list[str]:
        joined = "\n".join(lines)
        for old, new in pairs:
            assert old in joined, f"{old!r} not in {DECK}"
            joined = joined.replace(old, new)
        return joined.split("\n")

    return mutation_support.rewrite_document(SID, DECK, tr)


# name -> (mutation, the criteria that must fail, and nothing else; empty: the package passes)
VARIANTS = {
    # The re-import's eight second rows counted: Onboarding (both its late tickets among them), Accounts (two
    # more met rows) and P1 (one P1 ticket among them) move; Billing, Technical and Billing's CSAT do not.
    "duplicates_counted_in_the_workbook": (
        _book((ONBOARDING, 88.9), (ACCOUNTS, 84.4), (P1, 76.9)),
        {"book_onboarding_attainment", "book_accounts_attainment", "book_p1_attainment"},
    ),
    # The same analyst tells the review that Onboarding breached.
    "duplicates_counted_in_the_deck": (
        _deck(
            (GOLD_BREACH, "Technical, Onboarding and Accounts breached the 90% SLA target in October."),
            (GOLD_MET, "Billing met the SLA target."),
        ),
        {"deck_breaching_teams"},
    ),
    # Awaiting-customer time left on the clock: Billing falls to 83.3 in the workbook and is named in the deck;
    # P1 tickets have no waits, so P1 does not move.
    "clock_stop_ignored_everywhere": (
        in_turn(
            _book((BILLING, 83.3)),
            _deck(
                (GOLD_BREACH, "Billing, Technical and Accounts breached the 90% SLA target in October."),
                (GOLD_MET, "Onboarding met the SLA target."),
            ),
        ),
        {"book_billing_attainment", "deck_breaching_teams"},
    ),
    # The deck never says that awaiting-customer time was left off the clock.
    "clock_stop_left_unsaid": (_deck((GOLD_CLOCK, "")), {"deck_states_clock_stop"}),
    # P1 measured in business hours: Technical's overnight P1 tickets met, Technical at 96.7 and P1 at 100.0,
    # and Technical cleared in the deck; the table on the deck shows 96.7 for Technical.
    "p1_in_business_hours": (
        in_turn(
            _book((TECHNICAL, 96.7), (P1, 100.0)),
            _deck(
                (GOLD_TECH_ROW, "Technical | 30 | 29 | 96.7 | 71.4"),
                (GOLD_BREACH, "Accounts breached the 90% SLA target in October."),
                (GOLD_MET, "Billing, Technical and Onboarding met the SLA target."),
            ),
        ),
        {"book_technical_attainment", "book_p1_attainment", "deck_breaching_teams", "deck_states_technical"},
    ),
    # The superseded version 2 applied (P2 within 24 business hours, target 85%): in the workbook Billing and
    # Onboarding rise to 96.7 and P2 to 90.0 (P1, P3, P4, Technical and Accounts unchanged: no P1 target moved,
    # and Accounts' and Technical's misses are not P2 tickets under 24 hours); in the deck their rows move and,
    # against 85%, Technical is said to meet the target and Accounts alone to breach. Technical's own figure
    # (86.7) and the clock-stop sentence are untouched.
    "superseded_policy_applied": (
        in_turn(
            _book((BILLING, 96.7), (ONBOARDING, 96.7), (P2, 90.0)),
            _deck(
                (GOLD_BILLING_ROW, "Billing | 30 | 29 | 96.7 | 88.2"),
                (GOLD_ONBOARDING_ROW, "Onboarding | 30 | 29 | 96.7 | 100.0"),
                (GOLD_BREACH, "Accounts breached the 85% SLA target in October."),
                (GOLD_MET, "Billing, Technical and Onboarding met the SLA target."),
            ),
        ),
        {"book_billing_attainment", "book_onboarding_attainment", "book_p2_attainment", "deck_breaching_teams"},
    ),
    # Careful wordings other than the gold's: each team's figure beside its verdict, and the verdict stated per team.
    "figures_beside_the_verdict": (
        _deck(
            (GOLD_BREACH, "Technical (86.7%) and Accounts (83.3%) fell below the 90% SLA target."),
            (GOLD_MET, "Billing (93.3%) and Onboarding (93.3%) met the target."),
        ),
        set(),
    ),
    "one_line_per_team": (
        _deck(
            (GOLD_BREACH, "Technical: breached the SLA target. Accounts: breached the SLA target."),
            (GOLD_MET, "Billing: met the SLA target. Onboarding: met the SLA target."),
        ),
        set(),
    ),
}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    return mutation_support.evaluate_variants(SID, VARIANTS, tmp_path_factory.mktemp("cx01"), evaluate=evaluate_many)


def test_gold_passes_every_criterion(verdicts):
    mutation_support.assert_gold_passes(verdicts["gold"])


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_fails_exactly_its_criteria(verdicts, name):
    mutation_support.assert_fails_exactly(verdicts[name], VARIANTS[name][1])


def test_the_gold_deck_states_what_the_variants_edit(tmp_path):
    # The variants edit the gold's own lines: if the solver's wording moved, they would edit nothing.
    from pilot.oracle_formats.pptx_reader import parse

    gold = build_gold_workspace(SID, tmp_path / "gold")
    text = "\n".join(parse(gold / "outputs" / DECK).lines())
    for line in (GOLD_BREACH, GOLD_MET, GOLD_TECH_ROW, GOLD_BILLING_ROW, GOLD_ONBOARDING_ROW):
        assert line in text.split("\n")
    assert re.search(re.escape(GOLD_CLOCK), text)


def test_the_version_in_force_and_the_superseded_one_give_the_hand_figures():
    # Version 3 (1 July 2026) governs October; version 2 (1 January 2025) is the superseded one beside it.
    # The figures are the hand counts of the docstring above: (met, tickets) per team and P2, and who breaches.
    from pilot import paths
    from pilot.scenarios.library import cx_01

    inputs = paths.SCENARIOS_DIR / SID / "inputs"
    current = cx_01.policy_in_force(inputs)
    assert (current["version"], current["file"], current["targets"]["P2"], current["attainment"]) == (
        3,
        "sla_policy_v3.docx",
        16,
        90,
    )
    old = cx_01.read_policy(inputs / "sla_policy_v2.pdf")
    assert (old["version"], old["targets"]["P2"], old["attainment"]) == (2, 24, 85)
    for policy, billing, onboarding, p2, breaching in [
        (current, 28, 28, 25, ["Technical", "Accounts"]),
        (old, 29, 29, 27, ["Accounts"]),
    ]:
        facts = cx_01.compute(inputs, policy)
        assert (facts["by_team"]["Billing"]["met"], facts["by_team"]["Onboarding"]["met"]) == (billing, onboarding)
        assert facts["by_priority"]["P2"]["met"] == p2 and facts["by_priority"]["P2"]["tickets"] == 30
        assert (facts["by_team"]["Technical"]["met"], facts["by_team"]["Accounts"]["met"]) == (26, 25)
        assert facts["breaching"] == breaching


def test_a_policy_without_its_targets_is_refused_by_name(tmp_path):
    from pilot.scenarios.library import cx_01

    bad = tmp_path / "sla_policy_v4.docx"
    cx_01.write_docx([cx_01.Para("Version 4, effective 1 November 2026. The target is 95%.")], bad)
    with pytest.raises(ValueError, match=r"sla_policy_v4\.docx: .*section 2 targets"):
        cx_01.read_policy(bad)
