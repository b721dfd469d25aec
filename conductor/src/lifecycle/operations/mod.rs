//! One module per Magnum operation, each a resumable sequence of steps
//! run by the core's step runner (`super::runner`) on the engine
//! (`super::engine`): [`create`], [`delete`], [`scale`] (`cluster_update`,
//! `cluster_resize`), [`upgrade`], [`nodegroups`] and [`rotate`]
//! (`credential_rotate`).
//!
//! May use: the core, the pure core and coordination; never the status
//! work (`super::status`), which never uses these either.

pub mod create;
pub mod delete;
pub mod nodegroups;
pub mod rotate;
pub mod scale;
pub mod upgrade;
