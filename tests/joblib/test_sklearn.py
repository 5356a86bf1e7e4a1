"""scikit-learn's n_jobs on the mizu backend: the same fits, scores and predictions as under loky."""

import os

import numpy as np
import pytest

from helpers import require

try:
    from joblib import parallel_config
    from sklearn.datasets import make_classification
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.model_selection import GridSearchCV, cross_val_score
except ImportError as exc:
    require(False, f"scikit-learn is not installed ({exc}): pip install scikit-learn", module=True)

import mizu  # noqa: F401  (registers the backend)


@pytest.fixture(scope="module")
def data():
    return make_classification(n_samples=600, n_features=12, n_informative=6, random_state=0)


def under(backend, fit):
    with parallel_config(backend=backend, n_jobs=2, temp_folder=os.environ["JOBLIB_TEMP_FOLDER"]):
        return fit()


def test_a_grid_search_finds_what_it_finds_under_loky(data):
    X, y = data

    def fit():
        search = GridSearchCV(RandomForestClassifier(n_estimators=15, random_state=0),
                              {"max_depth": [2, 4, None], "min_samples_leaf": [1, 5]}, cv=3, n_jobs=2).fit(X, y)
        return search.best_params_, search.cv_results_["mean_test_score"].tolist(), search.predict_proba(X)

    mizu_found, loky_found = under("mizu", fit), under("loky", fit)
    assert mizu_found[:2] == loky_found[:2]
    np.testing.assert_array_equal(mizu_found[2], loky_found[2])


def test_a_random_forest_fits_the_same_trees(data):
    X, y = data

    def fit():
        forest = RandomForestClassifier(n_estimators=40, random_state=3, n_jobs=2).fit(X, y)
        return forest.predict_proba(X), [tree.tree_.node_count for tree in forest.estimators_]

    mizu_found, loky_found = under("mizu", fit), under("loky", fit)
    np.testing.assert_array_equal(mizu_found[0], loky_found[0])
    assert mizu_found[1] == loky_found[1]


def test_cross_val_score_scores_the_same(data):
    X, y = data

    def fit():
        return cross_val_score(RandomForestClassifier(n_estimators=10, random_state=1), X, y, cv=5, n_jobs=2)

    np.testing.assert_array_equal(under("mizu", fit), under("loky", fit))
