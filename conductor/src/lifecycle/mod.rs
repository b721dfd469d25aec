//! Cluster operations on Cluster API, by concern (the layers and their
//! allowed directions: `docs/architecture.md`, kept true by
//! `tests/python/test_architecture.py`).
//!
//! The shared core, at this level:
//! - pure (no I/O, tested on their own): [`rows`] (the rows `cluster_create`
//!   inserts, and rows -> rendering input), [`plan`] (allowed statuses,
//!   what the management cluster should hold now: holds, autoscaled counts,
//!   rollouts; drift, upgrade paths, `nodes_to_remove`), [`sync`] (which
//!   columns a status view changes), [`cache`] (observed objects indexed by
//!   cluster);
//! - [`engine`]: the shared state, rows, desired state and applies;
//!   [`runner`]: the step runner (lock, acknowledgement, failure
//!   bookkeeping, outcomes, metrics) every operation runs on; [`error`]: why
//!   a step failed (so the engine never imports the runner); [`watch`]: the
//!   engine's watches on the CAPI kinds, one event = one cluster to look
//!   at, into [`cache`]; [`credentials`] and [`keystone`]: the OpenStack
//!   credentials of clusters; [`cloud`]: their identity in OpenStack, the
//!   delete's mark and the clean-up of what the workload cluster made there.
//!
//! Beside it:
//! - [`operations`]: one module per Magnum operation;
//! - [`status`]: the status worker, resume and the leader's duties;
//! - [`coordination`]: Leases and the status-leader election among
//!   several conductors.
//!
//! Operations and status use the core and coordination, never each other;
//! the core uses neither; coordination uses only the pure core.

pub mod cache;
pub mod cloud;
pub mod coordination;
pub mod credentials;
pub mod engine;
pub mod error;
pub mod keystone;
pub mod operations;
pub mod plan;
pub mod rows;
pub mod runner;
pub mod status;
pub mod sync;
pub mod topology;
pub mod watch;

pub use engine::Engine;
