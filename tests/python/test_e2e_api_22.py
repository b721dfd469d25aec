"""test_e2e_api.py's sessions with Magnum 22.0.0's magnum-api (the console
script on v1beta1, the WSGI application on v1beta2): the same tests, a
module of its own so that the two releases run in two test processes at
once (issue 48)."""
import pytest

from test_e2e_api import *  # noqa: F401,F403 (the tests and the fixtures they use)
from test_e2e_api import session_env


@pytest.fixture(scope="module", params=[("22", "console", "v1beta1"), ("22", "wsgi", "v1beta2")],
                ids=lambda p: "-".join(p))
def env(request, tmp_path_factory):
    yield from session_env(request, tmp_path_factory)
