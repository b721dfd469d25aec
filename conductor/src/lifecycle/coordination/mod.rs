//! Coordination among several conductors (one queue, one database, one
//! management cluster): who drives a cluster and who leads the status work.
//!
//! - [`lease`]: a coordination.k8s.io Lease per cluster, held by the
//!   conductor driving it (an operation, a drift repair), renewed while
//!   held and taken over when its holder stops renewing; the leader's Lease;
//! - [`elect`]: the status-leader campaign on the broker (an exclusive
//!   queue), with the leader's own judgement of its health.
//!
//! May use: the pure core (`rows`, `plan`, `sync`, `cache`) and each
//! other; never the engine, the operations or the status work, which use
//! this instead.

pub mod elect;
pub mod lease;
