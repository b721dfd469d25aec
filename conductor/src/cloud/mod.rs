//! The cloud around a cluster: what its workload cluster creates in
//! OpenStack, and removing it when the cluster goes.
//!
//! A workload cluster's cloud-controller-manager (OCCM) makes Octavia load
//! balancers, their floating IPs and security groups for Services of type
//! LoadBalancer; its Cinder CSI plugin makes volumes and snapshots for
//! PersistentVolumeClaims. Both tag what they make with the cluster's
//! **cloud identity** (OCCM's `cluster.name`, Cinder CSI's `clusterID`):
//! the Magnum cluster uuid here, as Magnum's own drivers set it.
//!
//! - [`identity`] (pure): the identity of a cluster, how each kind of
//!   resource names it, and the clean-up plan: from what the APIs list to
//!   what to delete, what to wait for and what to keep;
//! - [`api`]: a thin typed client for Keystone (application-credential
//!   tokens and the catalog), Neutron, Octavia and Cinder.
//!
//! Who runs the clean-up, and when: `crate::lifecycle::status::cleanup`.

pub mod api;
pub mod identity;
