//! `magnum.common.x509.validator.filter_extensions`, exactly: which CSR
//! extensions reach a signed certificate, rewritten how, or refused.
//!
//! - An extension whose name is not in `[x509] allowed_extensions` is
//!   dropped, or refused (`CertificateValidationError`) when critical.
//!   Unknown OIDs have no name, so they are never allowed.
//! - keyUsage keeps only the bits in `allowed_key_usage` (minus
//!   "Certificate Sign" and "CRL Sign" unless `allow_ca`); a critical one
//!   asking for a bit outside the list is refused. It is re-encoded.
//! - basicConstraints with CA:TRUE becomes non-critical CA:FALSE unless
//!   `allow_ca`; refused when it was critical.
//! - Everything else allowed is copied as it came.

use super::der;
pub use super::names::{EXTENSION_NAMES, KEY_USAGE_NAMES};
use crate::config::X509Opts;

/// One extension: OID (arcs and DER), criticality, DER value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ext {
    pub oid: Vec<u64>,
    pub oid_der: Vec<u8>,
    pub critical: bool,
    pub value: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilterError {
    /// `CertificateValidationError(extension=<name>)`.
    NotAllowed(String),
    /// What Python raises as a bare ValueError.
    Value(String),
}

const KEY_USAGE: &[u64] = &[2, 5, 29, 15];
const BASIC_CONSTRAINTS: &[u64] = &[2, 5, 29, 19];

pub fn extension_name(oid: &[u64]) -> Option<&'static str> {
    EXTENSION_NAMES
        .iter()
        .find(|(o, _)| *o == oid)
        .map(|(_, n)| *n)
}

fn display(e: &Ext) -> String {
    match extension_name(&e.oid) {
        Some(n) => n.to_string(),
        None => e
            .oid
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join("."),
    }
}

/// The bits of a DER BIT STRING (`value` is the whole TLV).
fn parse_bits(value: &[u8]) -> Result<[bool; 9], FilterError> {
    let bad = || FilterError::Value("invalid keyUsage extension".into());
    if value.len() < 3 || value[0] != der::BIT_STRING || value[1] as usize != value.len() - 2 {
        return Err(bad());
    }
    let (unused, bytes) = (value[2], &value[3..]);
    if unused > 7 || (bytes.is_empty() && unused != 0) {
        return Err(bad());
    }
    let mut bits = [false; 9];
    for (i, b) in bits.iter_mut().enumerate() {
        if let Some(byte) = bytes.get(i / 8) {
            *b = byte & (0x80 >> (i % 8)) != 0;
        }
    }
    Ok(bits)
}

/// `ca` of a BasicConstraints value.
fn parse_ca(value: &[u8]) -> Result<bool, FilterError> {
    let bad = || FilterError::Value("invalid basicConstraints extension".into());
    if value.len() < 2 || value[0] != der::SEQUENCE || value[1] as usize != value.len() - 2 {
        return Err(bad());
    }
    let body = &value[2..];
    match body {
        [] => Ok(false),
        [t, 1, v, ..] if *t == der::BOOLEAN => Ok(*v != 0),
        [t, ..] if *t == der::INTEGER => Ok(false),
        _ => Err(bad()),
    }
}

pub fn filter_extensions(exts: Vec<Ext>, opts: &X509Opts) -> Result<Vec<Ext>, FilterError> {
    let mut allowed_ku: Vec<&str> = opts.allowed_key_usage.iter().map(String::as_str).collect();
    if !opts.allow_ca {
        allowed_ku.retain(|u| *u != "Certificate Sign" && *u != "CRL Sign");
    }
    let mut out = Vec::new();
    for e in exts {
        let allowed =
            extension_name(&e.oid).is_some_and(|n| opts.allowed_extensions.iter().any(|a| a == n));
        if !allowed {
            if e.critical {
                return Err(FilterError::NotAllowed(display(&e)));
            }
            continue;
        }
        if e.oid == KEY_USAGE {
            let bits = parse_bits(&e.value)?;
            let key_agreement = bits[4];
            let mut merged = [false; 9];
            for (i, set) in bits.iter().enumerate() {
                // cryptography refuses to read encipher/decipher-only
                // without keyAgreement; Magnum then treats them as unset.
                let set = *set && (i < 7 || key_agreement);
                if set && !allowed_ku.contains(&KEY_USAGE_NAMES[i]) {
                    if e.critical {
                        return Err(FilterError::NotAllowed(display(&e)));
                    }
                    continue;
                }
                merged[i] = set;
            }
            if (merged[7] || merged[8]) && !merged[4] {
                return Err(FilterError::Value(
                    "encipher_only and decipher_only can only be true when key_agreement is true"
                        .into(),
                ));
            }
            out.push(Ext {
                value: der::named_bits(&merged),
                ..e
            });
        } else if e.oid == BASIC_CONSTRAINTS && !opts.allow_ca && parse_ca(&e.value)? {
            if e.critical {
                return Err(FilterError::NotAllowed(display(&e)));
            }
            out.push(Ext {
                critical: false,
                value: der::seq(&[]),
                ..e
            });
        } else {
            out.push(e);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(oid: &[u64], critical: bool, value: Vec<u8>) -> Ext {
        Ext {
            oid: oid.to_vec(),
            oid_der: der::oid(oid),
            critical,
            value,
        }
    }

    #[test]
    fn key_usage_is_narrowed_or_refused() {
        let o = X509Opts::default();
        let mut bits = [false; 9];
        bits[0] = true; // digitalSignature
        bits[5] = true; // keyCertSign
        let ku = der::named_bits(&bits);
        let out = filter_extensions(vec![ext(KEY_USAGE, false, ku.clone())], &o).unwrap();
        assert_eq!(out[0].value, der::named_bits(&[true]));
        assert_eq!(
            filter_extensions(vec![ext(KEY_USAGE, true, ku)], &o),
            Err(FilterError::NotAllowed("keyUsage".into()))
        );
    }

    #[test]
    fn ca_flag_is_dropped_or_refused() {
        let o = X509Opts::default();
        let ca = der::seq(&[&der::tlv(der::BOOLEAN, &[0xff])]);
        let out = filter_extensions(vec![ext(BASIC_CONSTRAINTS, false, ca.clone())], &o).unwrap();
        assert_eq!(
            (out[0].critical, out[0].value.clone()),
            (false, vec![0x30, 0])
        );
        assert!(filter_extensions(vec![ext(BASIC_CONSTRAINTS, true, ca.clone())], &o).is_err());
        let allow = X509Opts {
            allow_ca: true,
            ..X509Opts::default()
        };
        assert_eq!(
            filter_extensions(vec![ext(BASIC_CONSTRAINTS, true, ca.clone())], &allow).unwrap()[0]
                .value,
            ca
        );
    }

    #[test]
    fn unknown_extensions() {
        let o = X509Opts::default();
        let unknown = ext(&[1, 2, 3, 4], false, vec![0x05, 0]);
        assert!(
            filter_extensions(vec![unknown.clone()], &o)
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            filter_extensions(
                vec![Ext {
                    critical: true,
                    ..unknown
                }],
                &o
            ),
            Err(FilterError::NotAllowed("1.2.3.4".into()))
        );
        let aia = ext(&[1, 3, 6, 1, 5, 5, 7, 1, 1], true, vec![0x30, 0]);
        assert_eq!(
            filter_extensions(vec![aia], &o),
            Err(FilterError::NotAllowed("authorityInfoAccess".into()))
        );
    }
}
