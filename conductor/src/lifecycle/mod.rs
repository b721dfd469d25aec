//! Cluster operations on Cluster API.
//!
//! Pure parts (no I/O, tested on their own):
//! - [`rows`]: the rows `cluster_create` inserts, and rows -> rendering input;
//! - [`plan`]: allowed statuses, what the management cluster should hold
//!   now (holds, autoscaled counts, rollouts), drift, upgrade paths,
//!   `nodes_to_remove`;
//! - [`sync`]: which columns a status view changes;
//! - [`runner::failure_writes`]: what a failed operation writes;
//! - [`error`]: why a step failed (used by the engine, the runner and the
//!   operations alike, so the engine never imports the runner).
//!
//! I/O:
//! - [`engine`]: the shared state, rows, desired state and applies;
//! - [`runner`]: the step runner (lock, acknowledgement, failure
//!   bookkeeping, outcomes, metrics) every operation runs on;
//! - one module per operation: [`create`], [`delete`], [`scale`]
//!   (`cluster_update`, `cluster_resize`), [`upgrade`], [`nodegroups`],
//!   [`rotate`] (`credential_rotate`);
//! - [`lease`] and [`elect`]: who leads and who drives a cluster among
//!   several conductors;
//! - [`reconcile`]: the status worker (watch events -> rows, drift repair,
//!   nodegroup removal, update timeouts); [`resume`]: what a previous
//!   conductor left in progress;
//! - [`watch`]: watches on the CAPI kinds, one event = one cluster to look at,
//!   into [`cache`] (pure: indexed by cluster, projected objects);
//! - [`credentials`] and [`keystone`]: the OpenStack credentials of clusters.

pub mod cache;
pub mod create;
pub mod credentials;
pub mod delete;
pub mod elect;
pub mod engine;
pub mod error;
pub mod keystone;
pub mod leader;
pub mod lease;
pub mod nodegroups;
pub mod owners;
pub mod plan;
pub mod reconcile;
pub mod resume;
pub mod rotate;
pub mod rows;
pub mod runner;
pub mod scale;
pub mod sync;
pub mod upgrade;
pub mod watch;

pub use engine::Engine;
