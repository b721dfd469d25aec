"""test_labels_all.py's test on the v1beta1 line (CAPI 1.10, CAPO 0.12,
CAAPH 0.4): every implemented label at once through the real magnum-api,
each addon installed as its chart renders it and judged in the rendered
objects (issue 47: both CAPI lines), a module of its own so that the two
lines run in two test processes at once."""
import pytest

from test_labels_all import *  # noqa: F401,F403 (the test and the helpers it uses)
from test_labels_all import line_env


@pytest.fixture(scope="module", params=["v1beta1"])
def env(request, tmp_path_factory):
    yield from line_env(request.param, tmp_path_factory)
