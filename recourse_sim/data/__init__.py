"""Datasets: bundled real data (iris, digits, Adult, COMPAS, German credit, FICO)
and the synthetic school-assignment world of the OAR paper.

Everything is loaded from files inside the package; nothing is downloaded.
Loaded arrays are cached and read-only: copy before changing them.
"""

from __future__ import annotations

from recourse_sim.data._resources import clear_checksum_cache
from recourse_sim.data.fico import FICO_GROUPS, FicoData, load_fico
from recourse_sim.data.school import (
    SCHOOL_FEATURES,
    SchoolCohort,
    school_world,
    true_outcome,
    true_success_probability,
)
from recourse_sim.data.tabular import DATASET_NAMES, Dataset, load

__all__ = [
    "DATASET_NAMES",
    "FICO_GROUPS",
    "SCHOOL_FEATURES",
    "Dataset",
    "FicoData",
    "SchoolCohort",
    "clear_cache",
    "load",
    "load_fico",
    "school_world",
    "true_outcome",
    "true_success_probability",
]


def clear_cache() -> None:
    """Forget every cached dataset, e.g. after pointing the loaders at other files in tests."""
    from recourse_sim.data import fico, tabular

    tabular._load_cached.cache_clear()
    fico._load_fico_cached.cache_clear()
    clear_checksum_cache()
