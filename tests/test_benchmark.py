"""Smoke test of analyses/benchmark.py at toy sizes: every section runs and the JSON has
the issue's keys with the right types. Timings are not asserted (shared machines)."""

from __future__ import annotations

import json
import math

import pytest


@pytest.fixture(scope="module")
def bench_script(analysis_script):
    return analysis_script("benchmark")


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.slow
def test_tiny_run_writes_every_key(bench_script, tmp_path):
    assert bench_script.main(["--tiny", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "benchmark.json").read_text())
    assert list(result)[: len(bench_script.KEYS)] == list(bench_script.KEYS)
    for key in bench_script.KEYS:
        if key == "peak_rss_mb_100k":  # the toy run never reaches 100,000
            assert result[key] is None
        elif "dice" in key and result[key] is None:
            # dice-ml is the optional [bench] extra; without it every DiCE key says why
            assert "dice-ml" in result["individual_speedup_vs_dice_reason"]
        elif key == "scaling_exponent":  # a slope of noisy toy timings: any sign
            assert isinstance(result[key], float) and math.isfinite(result[key]), key
        elif key == "mixed_min_cost_gap_vs_milp":  # a gap to an exact optimum: 0 when exact
            assert isinstance(result[key], float) and 0 <= result[key] < 1e-6, key
        elif key == "minutes_to_oar_level":  # per scenario; None: not reached within the cap
            assert set(result[key]) == {"school", "lending"}
            for minutes in result[key].values():
                assert minutes is None or (isinstance(minutes, float) and minutes >= 0)
        else:
            assert isinstance(result[key], float) and result[key] > 0, key
    assert result["hypergrad_rel_err"] < 1e-3
    assert len(result["load_avg_start"]) == 3
    assert set(result["pass"]) == set(bench_script.TARGETS)
    assert all(v is None or isinstance(v, bool) for v in result["pass"].values())
    for short in ("school", "lending"):
        best = result["oar_level_ppo_best"][short]
        assert 0 <= best <= 1 and 0 <= result["oar_level_oar_query_success"][short] <= 1
        if result["minutes_to_oar_level"][short] is not None:
            assert best >= result["oar_level_oar_query_success"][short]
    assert result["oar_level_cap_minutes"] > 0
    for short in ("school", "lending"):  # the CPU split of a batched -v2 world-step
        parts = [f"v2_batched_ms_{p}_{short}" for p in ("refit_passes", "rest_of_oar")]
        assert all(result[k] > 0 for k in parts)
        assert result[f"v2_batched_ms_rest_of_round_{short}"] > 0
        without = result[f"v2_batched_steps_per_s_without_refit_passes_{short}"]
        assert without > result[f"v2_batched_steps_per_s_{short}"] / 10
    for row in result["scaling_rows"]:
        assert row["peak_rss_mb"] >= row["import_rss_mb"] > 0


def test_verdicts(bench_script):
    result = {key: None for key in bench_script.KEYS}
    result.update(round_over_refit=2.0, env_steps_per_s=100.0)
    v = bench_script.verdicts(result)
    assert v["round_over_refit"] is True
    assert v["env_steps_per_s"] is False
    assert v["oar_pgd_step_s_30k"] is None
