//! Magnum clusters on Cluster API: the pure parts first.
//!
//! - [`labels`]: which cluster labels we honour, refuse or ignore;
//! - [`infra_labels`]: those about placement, networks, storage, load balancers and auditing;
//! - [`label_upgrade`]: what an upgrade to another template does to the labels;
//! - [`naming`]: `stack_id`, namespaces and object names;
//! - [`render`]: the CAPI objects of a cluster, for either CAPI line;
//! - [`addons`]: CNI, cloud-controller-manager and Cinder CSI as HelmChartProxies;
//! - [`autoscaler`]: the per-cluster cluster-autoscaler;
//! - [`status`]: what the watched CAPI objects mean for Magnum's rows.
//!
//! The I/O that uses them lives in [`crate::lifecycle`].

pub mod addons;
pub mod autoscaler;
pub mod infra_labels;
pub mod keystone_auth;
pub mod label_table;
pub mod label_upgrade;
pub mod label_values;
pub mod labels;
pub mod manila;
pub mod naming;
pub mod render;
pub mod status;
pub mod topology;
