"""Every metric the shipped Prometheus rules and dashboard use exists on a
conductor that has just become ready (issue 23), at 0 where nothing
happened yet: `increase()` then sees the first failure, and a dashboard
shows 0 instead of "No data". The names are read from deploy/prometheus,
so the rules, the dashboard and the conductor cannot drift apart."""
import os
import re
import urllib.request

import pytest

from test_lifecycle import Env

DEPLOY = os.path.join(os.path.dirname(__file__), "..", "..", "deploy", "prometheus")


def referenced():
    names = set()
    for f in os.listdir(DEPLOY):
        if f.endswith((".rules.yml", ".dashboard.json")):
            names |= set(re.findall(r"magnum_conductor_[a-z0-9_]*[a-z0-9]", open(os.path.join(DEPLOY, f)).read()))
    return names


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = Env(tmp_path_factory.mktemp("presence"), "v1beta1")
    yield e
    e.close()


def test_every_series_the_rules_and_dashboard_use_exists_from_the_start(env):
    names = referenced()
    assert len(names) >= 19, names  # rules + dashboard as shipped
    with urllib.request.urlopen(env.conductor.metrics_url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    exposed = {re.split(r"[{ ]", line, maxsplit=1)[0] for line in text.splitlines() if line and not line.startswith("#")}
    missing = sorted(names - exposed)
    assert not missing, f"not exported by a fresh conductor: {missing}"
    # At 0: nothing has happened yet.
    for line in text.splitlines():
        if line.startswith(("magnum_conductor_cluster_operations_total{", "magnum_conductor_lease_busy_total{",
                            "magnum_conductor_watch_errors_total{")):
            assert line.endswith(" 0"), line
