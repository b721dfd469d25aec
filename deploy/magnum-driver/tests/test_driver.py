"""The driver as magnum-api sees it: found through Magnum's own entry-point
lookup (`Driver.get_driver`), its tuples, its checks, and its refusal to do
conductor work. Run with the Python of a Magnum 22 or 23 environment in
which the package is installed."""
import pytest

from magnum.common import exception
import magnum.conf
from magnum.drivers.common import driver as magnum_driver

CONF = magnum.conf.CONF


@pytest.fixture(autouse=True)
def fresh_definitions():
    magnum_driver.Driver.definitions = None
    yield
    magnum_driver.Driver.definitions = None
    CONF.clear_override("os_distros", group="capi")


def test_found_through_magnums_lookup():
    d = magnum_driver.Driver.get_driver("vm", "ubuntu", "kubernetes")
    assert type(d).__module__ == "magnum_capi_rust.driver"
    assert magnum_driver.Driver.get_driver("vm", "rockylinux", "kubernetes") is not None
    # By name, as a template's `driver` field selects it.
    assert type(magnum_driver.Driver.get_driver("vm", "anything", "kubernetes", "k8s_capi_rust")).__name__ == "Driver"


def test_unserved_distributions_are_refused():
    # Ignition distributions are not ours (Magnum 22 still ships the Heat
    # driver k8s_fedora_coreos_v1, which provides fedora-coreos itself).
    from magnum_capi_rust.driver import Driver
    served = {p["os"] for p in Driver().provides}
    assert served == {"ubuntu", "rockylinux"}
    with pytest.raises(exception.ClusterTypeNotSupported):
        magnum_driver.Driver.get_driver("vm", "flatcar", "kubernetes")
    with pytest.raises(exception.ClusterTypeNotSupported):
        magnum_driver.Driver.get_driver("bm", "ubuntu", "kubernetes")


def test_distributions_are_configurable():
    CONF.set_override("os_distros", ["debian"], group="capi")
    assert magnum_driver.Driver.get_driver("vm", "debian", "kubernetes") is not None
    magnum_driver.Driver.definitions = None
    with pytest.raises(exception.ClusterTypeNotSupported):
        magnum_driver.Driver.get_driver("vm", "ubuntu", "kubernetes")


def test_control_plane_sizes_as_the_conductor():
    d = magnum_driver.Driver.get_driver("vm", "ubuntu", "kubernetes")
    for ok in (1, 3, 5):
        d.validate_master_size(ok)
        d.validate_master_resize(ok)
    for bad in (0, 2, 4, -1):
        with pytest.raises(exception.MasterNGSizeInvalid):
            d.validate_master_size(bad)
        with pytest.raises(exception.MasterNGSizeInvalid):
            d.validate_master_resize(bad)


@pytest.mark.parametrize("method,args", [
    ("create_cluster", (None, None, 60)), ("delete_cluster", (None, None)),
    ("update_cluster", (None, None)), ("resize_cluster", (None, None, None, 3, [])),
    ("upgrade_cluster", (None, None, None, 1, None)), ("create_nodegroup", (None, None, None)),
    ("update_nodegroup", (None, None, None)), ("delete_nodegroup", (None, None, None)),
])
def test_conductor_work_is_not_done_here(method, args):
    d = magnum_driver.Driver.get_driver("vm", "ubuntu", "kubernetes")
    with pytest.raises(NotImplementedError, match="Rust magnum-conductor"):
        getattr(d, method)(*args)
