//! Wire types of Magnum's conductor RPC over oslo.messaging, with no I/O.
//!
//! Layers, outside in:
//! - [`envelope`]: kombu compression and the `oslo.version`/`oslo.message`
//!   envelope (and the legacy un-enveloped form);
//! - [`message`]: the inner dict: routing keys, `_context_*` (→ [`context`]),
//!   and the dispatcher's checks (method, version, namespace);
//! - [`methods`]: the 19 conductor methods plus oslo's ping, with typed args;
//! - [`ovo`]: oslo.versionedobjects primitives of Magnum objects;
//! - [`reply`] and [`failure`]: what goes back to a caller.
//!
//! [`pyjson`], [`pyvalue`] and [`time`] reproduce Python's JSON text, `str()`
//! and `%` formatting, and OVO datetimes, so our bytes match Python's.
//!
//! Decoding never panics: every malformed input is an error value.

pub mod context;
pub mod envelope;
pub mod failure;
mod magnum_exceptions;
pub mod message;
pub mod methods;
pub mod ovo;
pub mod pyjson;
pub mod pyvalue;
pub mod reply;
pub mod time;

pub use context::RequestContext;
pub use envelope::{Compression, EnvelopeError};
pub use failure::RemoteFailure;
pub use message::{Incoming, RpcRequest};
pub use methods::ConductorRequest;
pub use ovo::MagnumObject;
pub use reply::Outcome;
