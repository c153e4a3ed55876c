"""The manuscript's design tables and macros are generated from protocol/."""

from __future__ import annotations

import re

from pilot.latex import macro_name, write_macros
from pilot.protocol import load_arms, load_study
from pilot.report.design_tables import arms_frame, caps_frame, design_macros, write_design_outputs


def test_arms_table_follows_arms_yml():
    frame = arms_frame(load_arms())
    assert list(frame["Arm"]) == [
        "A0 (restricted)",
        "A1 (shell)",
        "A2 (macOS)",
        "A3 (full computer use)",
        "A4 (self-repairing)",
    ]
    a1 = frame.iloc[1]["Denied in the shell"]
    for prog in ("osascript", "open", "soffice", "textutil", "qlmanage", "cupsfilter", "curl", "wget"):
        assert f"\\texttt{{{prog}}}" in a1
    assert "\\texttt{-{}-tools}" in frame.iloc[0]["Enforcement"]  # both hyphens print
    assert "install trees absent" in frame.iloc[2]["Enforcement"] and "no network" in frame.iloc[2]["Enforcement"]
    assert "portal" in frame.iloc[3]["Enforcement"]


def test_caps_table_applies_a006():
    frame = caps_frame(load_study(), ["ACC-01", "HR-01", "LEGAL-01"]).set_index("Scenario")
    # Only the study's scenarios: EST-01's own caps (A-016) belong to the extension set, not to this table.
    assert "EST-01" not in frame.index and "RES-01" not in frame.index
    assert frame.loc["ACC-01", "Dollar cap"] == 6.0 and frame.loc["ACC-01", "Wall limit (s)"] == 3600
    assert frame.loc["LEGAL-01", "Dollar cap"] == 4.0 and frame.loc["LEGAL-01", "Source"] == "A-006"
    assert frame.loc["HR-01", "Source"] == "global"
    # With no list, the scenarios with caps of their own.
    assert set(caps_frame(load_study()).Scenario) == {
        "global (all others)",
        "ACC-01",
        "RES-01",
        "BANK-01",
        "LEGAL-01",
        "EST-01",
        "CRE-01",
    }


def test_design_macros_state_the_protocol_numbers(tmp_path):
    macros = design_macros(load_study())
    assert macros["EnvelopeUsd"] == 800 and macros["MaxTurns"] == 150 and macros["PilotRuns"] == 100
    written = write_design_outputs(tmp_path)
    text = (tmp_path / "design_macros.tex").read_text()
    assert "\\newcommand{\\EnvelopeUsd}{800}" in text
    assert "\\newcommand{\\BootstrapResamples}{5{,}000}" in text
    assert {p.name for p in written} >= {"arms_table.tex", "caps_table.tex", "design_macros.tex"}
    arms_tex = (tmp_path / "arms_table.tex").read_text()
    assert "\\label{tab:arms}" in arms_tex
    assert "bubblewrap" in arms_tex and "audited as a deviation" in arms_tex  # the shared enforcement, in the caption


def test_macro_names_are_letters_only(tmp_path):
    assert macro_name("power", "J", 10, "R", 3, "delta", 0.25) == "PowerJOneZeroRThreeDeltaZeroTwoFive"
    write_macros({"Ok": 1.5}, tmp_path / "m.tex")
    assert re.search(r"\\newcommand\{\\Ok\}\{1\.500\}", (tmp_path / "m.tex").read_text())
