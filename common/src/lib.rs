//! Shared pieces of the conductor: oslo.config-compatible configuration
//! ([`config`]), oslo.messaging transport URLs ([`transport_url`]), Magnum's
//! short ids ([`short_id`]) and a [`secret::Secret`] string that never prints.

pub mod api_proxy;
pub mod certs;
pub mod config;
pub mod db;
pub mod secret;
pub mod short_id;
pub mod transport_url;
