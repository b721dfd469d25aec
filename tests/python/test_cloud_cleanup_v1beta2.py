"""test_cloud_cleanup.py's tests on the v1beta2 line (CAPI 1.14, CAPO 0.14):
the same functions and fixtures, a module of its own so that the two lines
run in two test processes at once (together they were the suite's longest
module, issue 48). Its own tenant in the run's Keystone, Neutron, Octavia
and Cinder (the module-scoped `cloud`); the variants that run on v1beta1 skip here, as the
v1beta2 ones skip there (`on_line`)."""
import pytest

from test_cloud_cleanup import *  # noqa: F401,F403 (the tests and the fixtures they use)
from test_cloud_cleanup import line_env


@pytest.fixture(scope="module", params=["v1beta2"])
def env(cloud, tmp_path_factory, request):
    yield from line_env(cloud, tmp_path_factory, request.param)
