//! The names Magnum gives certificate extensions and key usages (no
//! imports): what `[x509] allowed_extensions` and `allowed_key_usage` are
//! checked against when the configuration is read, and what the CSR
//! filter ([`super::filter`]) matches. Apart from both, so the
//! configuration does not import the filter that imports it.

/// cryptography's names (`_OID_NAMES`) for the extensions Magnum lists.
pub const EXTENSION_NAMES: &[(&[u64], &str)] = &[
    (&[2, 5, 29, 35], "authorityKeyIdentifier"),
    (&[2, 5, 29, 14], "subjectKeyIdentifier"),
    (&[1, 3, 6, 1, 5, 5, 7, 1, 1], "authorityInfoAccess"),
    (&[2, 5, 29, 19], "basicConstraints"),
    (&[2, 5, 29, 31], "cRLDistributionPoints"),
    (&[2, 5, 29, 32], "certificatePolicies"),
    (&[2, 5, 29, 37], "extendedKeyUsage"),
    (&[1, 3, 6, 1, 5, 5, 7, 48, 1, 5], "OCSPNoCheck"),
    (&[2, 5, 29, 54], "inhibitAnyPolicy"),
    (&[2, 5, 29, 15], "keyUsage"),
    (&[2, 5, 29, 30], "nameConstraints"),
    (&[2, 5, 29, 17], "subjectAltName"),
    (&[2, 5, 29, 18], "issuerAltName"),
];

/// Magnum's key usage names, in bit order (KeyUsages enum).
pub const KEY_USAGE_NAMES: [&str; 9] = [
    "Digital Signature",
    "Non Repudiation",
    "Key Encipherment",
    "Data Encipherment",
    "Key Agreement",
    "Certificate Sign",
    "CRL Sign",
    "Encipher Only",
    "Decipher Only",
];
