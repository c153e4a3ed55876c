"""``pilot scenarios check`` on every bundle added to the design's ten (the extension set's, A-016, and any other).

Each is held to the same matrix as the ten (tests/test_scenario_check.py), in
a batch of its own so that the two batches run on different test workers; a
bundle added later (``pilot scenarios new``, then an amendment that puts it in
a set) is checked here without any change to this file.
"""

from __future__ import annotations

import kit_support
import pytest

from pilot import protocol
from pilot.protocol.scenario import list_scenarios
from pilot.scenario_kit.checks import check_scenarios

# One batch of every added bundle (a thousand packages through one LibreOffice) is set up by the first test; on a
# loaded two-core machine it takes longer than the suite's 600 s default, which would fail the first test.
pytestmark = [pytest.mark.timeout(2400), pytest.mark.usefixtures("soffice")]

_STUDY = protocol.study()
SCENARIOS = [s for s in list_scenarios() if s not in _STUDY.scenario_set()]
# One of the design's bundles rides along, so that a batch of one added scenario still has another's gold to cheat with.
COMPANION = "OPS-01"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return check_scenarios([*SCENARIOS, COMPANION], workdir=tmp_path_factory.mktemp("kit"))


def test_the_extension_adds_bundles_the_design_lacks():
    assert SCENARIOS and not set(SCENARIOS) & set(_STUDY.scenario_set())
    assert set(_STUDY.scenario_set("extension")) - set(_STUDY.scenario_set()) <= set(SCENARIOS)


def test_every_bundle_passes_every_check(report):
    kit_support.assert_every_check_passes(report, [*SCENARIOS, COMPANION])


@pytest.mark.parametrize("sid", SCENARIOS)
def test_each_bundle_gets_the_whole_matrix(report, sid):
    kit_support.assert_whole_matrix(report, sid)
