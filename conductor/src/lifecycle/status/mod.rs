//! Status: what the management cluster reports, back into Magnum's rows.
//!
//! - [`reconcile`]: the status worker (watch events -> rows, drift repair,
//!   node-group removal, update timeouts);
//! - [`leader`]: what only the status leader does (resume, orphaned
//!   Leases, the census metrics); [`resume`]: what a previous conductor
//!   left in progress;
//! - [`owners`]: which rows and objects are this conductor's (other
//!   drivers' clusters are left alone).
//!
//! May use: the core (the engine and its watches), the pure core,
//! coordination and each other; never the operations (`super::operations`).

pub mod leader;
pub mod owners;
pub mod reconcile;
pub mod resume;
