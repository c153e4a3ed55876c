"""The synthetic generator: reproducible, labelled SIMULATED, faithful to its stated model."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pilot import protocol, runtable
from pilot.simulated import synthetic
from pilot.stats import primary


def test_same_seed_same_table_and_labelled_simulated():
    a = synthetic.generate_runtable(5, n_scenarios=4)
    b = synthetic.generate_runtable(5, n_scenarios=4)
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(synthetic.generate_runtable(6, n_scenarios=4))
    assert a["study"].str.contains("SIMULATED").all() and (a["backend"] == synthetic.BACKEND).all()
    assert runtable.is_simulated(a)


def test_design_shape_waves_and_missing_outcomes():
    study = protocol.study()
    df = runtable.validate_runtable(synthetic.generate_runtable(8))
    main = runtable.primary_rows(df)
    J = study["design"]["n_scenarios"]
    assert len(main) == J * len(study.arms) * 3
    assert (
        set(main.wave) == {"pilot", "repeat3"} and (main[main.wave == "pilot"]["repeat"] <= study.pilot_repeats).all()
    )
    sens = df[df.wave == "sensitivity"]
    assert set(sens.model) == set(study["sensitivity_models"]["models"]) and set(sens.arm) == {
        study["sensitivity_models"]["arm"]
    }
    assert (df.S.isna() == df.Q.isna()).all()
    assert sorted(df.order_index) == list(range(len(df)))
    # Capped runs respect each scenario's caps.
    for sid, part in df.groupby("scenario"):
        caps = study.caps_for(sid)
        assert part.cost_usd.max() <= caps.usd + 1e-9 and part.wall_s.max() <= caps.wall_s + 1e-9


def test_extra_scenarios_beyond_the_list_are_standins():
    df = synthetic.generate_runtable(9, n_scenarios=14, repeats=2, sensitivity_wave=False)
    assert df.scenario.nunique() == 14 and df.scenario.str.startswith("SYN-").any()
    runtable.validate_runtable(df)  # stand-ins are allowed in a synthetic table


def test_planted_acceptance_and_the_null_model():
    model = synthetic.SyntheticModel.load()
    truth = synthetic.planted_acceptance(model, draws=20_000).set_index("arm")
    assert truth.loc["A3", "p_equal"] > truth.loc["A1", "p_equal"] > truth.loc["A0", "p_equal"]
    null = synthetic.planted_acceptance(model.with_null("A3", "A1"), draws=20_000).set_index("arm")
    assert null.loc["A3", "p_equal"] == pytest.approx(null.loc["A1", "p_equal"], abs=1e-12)  # common random numbers


def test_estimator_recovers_the_planted_contrast_on_a_large_synthetic_study():
    model = synthetic.SyntheticModel.load()
    specs = synthetic.study_scenarios(21, 200, model)
    truth = synthetic.planted_acceptance(model, specs=specs, draws=3_000).set_index("arm")["p_equal"]
    df = synthetic.generate_runtable(21, n_scenarios=200, repeats=3, sensitivity_wave=False)
    res = primary.primary_analysis(df, seed=2, B=2000, n_permutations=2000)
    # Within four bootstrap standard errors (a check that fails for a biased estimator or a wrong truth).
    reps = res.replicates["contrasts"][:, 0]
    assert abs(res.contrast("A3-A1").estimate - (truth["A3"] - truth["A1"])) < 4 * reps.std()
    acc = res.acceptance.set_index("arm")
    se = res.replicates["acceptance"].std(axis=0)
    assert (np.abs(acc.p_hat.to_numpy() - truth.to_numpy()) < 4 * se).all()


def test_malformed_model_is_refused(tmp_path):
    import yaml

    data = yaml.safe_load(synthetic.SYNTHETIC_CONFIG.read_text())
    del data["cost"]["median"]["A2"]
    bad = tmp_path / "model.yml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(protocol.ProtocolError, match=r"cost\.median.*A2"):
        synthetic.SyntheticModel.load(bad)
    del data["violation"]
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(protocol.ProtocolError, match="violation"):
        synthetic.SyntheticModel.load(bad)
