"""`[capi] os_distros`, registered on Magnum's CONF.

The Rust magnum-conductor reads the same option from the same magnum.conf
(its `[capi]` group), so magnum-api and the conductor agree on which
images' clusters are served.
"""
from oslo_config import cfg

GROUP = cfg.OptGroup(name="capi", title="Rust magnum-conductor on Cluster API")

OPTS = [
    cfg.ListOpt(
        "os_distros",
        default=["ubuntu", "rockylinux"],
        help="Values of the Glance image property os_distro whose clusters the Rust "
             "magnum-conductor builds (kubeadm with cloud-init). Templates and clusters "
             "of another os_distro are refused (ClusterTypeNotSupported). Ignition "
             "distributions (flatcar, fedora-coreos) are not supported by the conductor."),
]


def register_opts(conf):
    conf.register_group(GROUP)
    conf.register_opts(OPTS, group=GROUP)


def list_opts():
    return {GROUP: OPTS}
