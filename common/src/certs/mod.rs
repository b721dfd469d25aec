//! Cluster certificates, as Magnum makes and keeps them.
//!
//! - [`x509`]: CA and client certificate generation, CSR signing, the
//!   encrypted PKCS#8 keys (no I/O).
//! - [`filter`]: `[x509]` extension filtering of CSRs (no I/O).
//! - [`names`]: Magnum's extension and key usage names (read by the
//!   configuration and the filter).
//! - [`der`]: the little DER writing the above needs.
//! - [`store`]: the `x509keypair` cert manager on the Magnum database.
//! - [`capi`]: the four CAPI CA Secrets (no I/O).

pub mod capi;
pub mod der;
pub mod filter;
pub mod names;
pub mod store;
pub mod x509;
