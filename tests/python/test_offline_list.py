"""deploy/offline/images.txt, the offline list (issue 53), is what
scripts/offline-list.sh makes now: the conductor's objects for a cluster
with every addon (`magnum-conductor cluster-objects`, defaults) and its
charts rendered by the real Helm engine. That the list is what a real
cluster with these addons references is test_labels_all.py's
(offline_list_is_what_the_cluster_references)."""
import os
import subprocess

import offline_list
from conftest import CONDUCTOR_BIN, ROOT

LIST = os.path.join(ROOT, "deploy", "offline", "images.txt")


def test_the_committed_list_is_current(tmp_path):
    empty = tmp_path / "empty.conf"
    empty.write_text("")
    now = offline_list.default_list(CONDUCTOR_BIN, [str(empty)])
    with open(LIST) as f:
        committed = f.read()
    assert committed == now, "deploy/offline/images.txt is stale: run scripts/offline-list.sh --write"
    entries = [ln for ln in now.splitlines() if not ln.startswith("#")]
    # Each entry says what moves it to a mirror; every addon's chart is in.
    assert entries and all("  # " in ln and ln.split("  # ", 1)[1].strip() for ln in entries), entries
    charts = {ln.split()[2] for ln in entries if ln.startswith("chart ")}
    assert charts == set(offline_list.CHART_OPTIONS), charts
    assert not any("bats" in ln for ln in entries), "a Helm test hook's image (never pulled) is listed"


def test_a_label_the_conductor_refuses_makes_no_list(tmp_path):
    empty = tmp_path / "empty.conf"
    empty.write_text("")
    p = subprocess.run([CONDUCTOR_BIN, "--config-file", str(empty), "cluster-objects", "--label", "kube_tag=1.x"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "kube_tag" in p.stderr and p.stdout == "", (p.returncode, p.stdout, p.stderr)
