//! Magnum's X.509 operations (magnum/common/x509/operations.py), in Rust:
//! CA and client certificate generation, CSR signing, and the encrypted
//! PKCS#8 keys Magnum stores.
//!
//! Certificates are assembled field by field like `cryptography` builds them
//! for Magnum: issuer `CN=<cluster name>`, the CSR's subject and public key
//! copied byte for byte, validity now-1 day .. now+`term_of_validity` days,
//! serial = a random UUID4 as an integer, the CSR's (filtered) extensions in
//! their order, then a SHA-1 SubjectKeyIdentifier, no AuthorityKeyIdentifier,
//! sha256WithRSAEncryption. (rcgen is not used: its DistinguishedName keeps
//! one value per attribute type, which would merge `O=` groups of a CSR.)

use std::fmt;

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::signature::KeyPair as _;
use chrono::{Duration, NaiveDateTime, SubsecRound, Utc};
use x509_parser::prelude::*;

use super::der;
use super::filter::{self, Ext, FilterError};
use crate::config::X509Opts;
use crate::secret::Secret;

const OID_SHA256_RSA: &[u64] = &[1, 2, 840, 113549, 1, 1, 11];
const OID_CN: &[u64] = &[2, 5, 4, 3];
const OID_O: &[u64] = &[2, 5, 4, 10];
const OID_SKI: &[u64] = &[2, 5, 29, 14];
const OID_KEY_USAGE: &[u64] = &[2, 5, 29, 15];
const OID_BASIC_CONSTRAINTS: &[u64] = &[2, 5, 29, 19];
const OID_EXT_KEY_USAGE: &[u64] = &[2, 5, 29, 37];
const OID_CLIENT_AUTH: &[u64] = &[1, 3, 6, 1, 5, 5, 7, 3, 2];

/// Errors, each mapping to what Magnum raises.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CertError {
    /// `magnum.common.exception.InvalidCsr`.
    #[error("Received invalid csr {0}.")]
    InvalidCsr(String),
    /// `magnum.common.exception.CertificateValidationError`.
    #[error("Extension '{0}' not allowed")]
    Validation(String),
    /// A Python `ValueError` (e.g. a CSR that already carries a SKI).
    #[error("{0}")]
    Value(String),
    /// A stored key that cannot be decrypted or used.
    #[error("private key: {0}")]
    Key(String),
    #[error("certificate generation failed: {0}")]
    Internal(String),
}

impl From<FilterError> for CertError {
    fn from(e: FilterError) -> Self {
        match e {
            FilterError::NotAllowed(name) => CertError::Validation(name),
            FilterError::Value(m) => CertError::Value(m),
        }
    }
}

/// A certificate and its encrypted key, as Magnum stores them.
#[derive(Clone, PartialEq)]
pub struct StoredKeyPair {
    /// PEM, no trailing newline (Magnum strips it).
    pub certificate: String,
    /// `-----BEGIN ENCRYPTED PRIVATE KEY-----` PEM, ending with a newline.
    pub private_key: Secret,
    /// 12 lowercase base32 characters, stored in plain text by Magnum.
    pub passphrase: Secret,
}

impl fmt::Debug for StoredKeyPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoredKeyPair")
            .field("certificate", &self.certificate)
            .field("private_key", &self.private_key)
            .field("passphrase", &self.passphrase)
            .finish()
    }
}

/// A decrypted RSA private key (PKCS#8 DER). Never printed.
pub struct PrivateKey {
    der: pkcs8::SecretDocument,
}

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PrivateKey(<redacted>)")
    }
}

impl PrivateKey {
    pub fn pkcs8_der(&self) -> &[u8] {
        self.der.as_bytes()
    }
    /// Unencrypted PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`), as
    /// `operations.decrypt_key` returns it: for the CAPI Secrets.
    pub fn to_pem(&self) -> Secret {
        Secret::new(der::pem("PRIVATE KEY", self.der.as_bytes()))
    }
    fn signer(&self) -> Result<aws_lc_rs::rsa::KeyPair, CertError> {
        aws_lc_rs::rsa::KeyPair::from_pkcs8(self.der.as_bytes())
            .map_err(|e| CertError::Key(format!("not a usable RSA key: {e}")))
    }
}

/// Decrypt a PEM private key as Magnum stored it: encrypted PKCS#8 (PBES2
/// with PBKDF2-HMAC-SHA256 or -SHA1, AES-CBC; what every `cryptography`
/// release wrote), or an unencrypted PKCS#8 key when there is no passphrase.
pub fn decrypt_private_key(pem: &str, passphrase: Option<&str>) -> Result<PrivateKey, CertError> {
    use pkcs8::der::Decode;
    let (label, doc) = pkcs8::der::SecretDocument::from_pem(pem.trim())
        .map_err(|e| CertError::Key(format!("not PEM: {e}")))?;
    let der = match label {
        "ENCRYPTED PRIVATE KEY" => {
            let pass = passphrase
                .ok_or_else(|| CertError::Key("encrypted key without a passphrase".into()))?;
            let info = pkcs8::EncryptedPrivateKeyInfoRef::from_der(doc.as_bytes())
                .map_err(|e| CertError::Key(format!("not encrypted PKCS#8: {e}")))?;
            info.decrypt(pass.as_bytes())
                .map_err(|e| CertError::Key(format!("cannot decrypt (wrong passphrase?): {e}")))?
        }
        "PRIVATE KEY" => doc,
        other => return Err(CertError::Key(format!("unsupported PEM label {other:?}"))),
    };
    let key = PrivateKey { der };
    key.signer()?;
    Ok(key)
}

/// Encrypt a PKCS#8 key like `BestAvailableEncryption` (PBES2,
/// PBKDF2-HMAC-SHA256 with 2048 iterations, AES-256-CBC, 16-byte salt).
pub fn encrypt_private_key(key: &PrivateKey, passphrase: &str) -> Result<Secret, CertError> {
    use pkcs8::der::Decode;
    let mut salt = [0u8; 16];
    let mut iv = [0u8; 16];
    fill_random(&mut salt)?;
    fill_random(&mut iv)?;
    let params = pkcs8::pkcs5::pbes2::Parameters::generate_pbkdf2_sha256_aes256cbc(2048, &salt, iv)
        .map_err(|e| CertError::Internal(e.to_string()))?;
    let info = pkcs8::PrivateKeyInfoRef::from_der(key.der.as_bytes())
        .map_err(|e| CertError::Internal(e.to_string()))?;
    let enc = info
        .encrypt_with_params(params, passphrase.as_bytes())
        .map_err(|e| CertError::Internal(e.to_string()))?;
    Ok(Secret::new(der::pem(
        "ENCRYPTED PRIVATE KEY",
        enc.as_bytes(),
    )))
}

fn fill_random(buf: &mut [u8]) -> Result<(), CertError> {
    use aws_lc_rs::rand::SecureRandom;
    aws_lc_rs::rand::SystemRandom::new()
        .fill(buf)
        .map_err(|_| CertError::Internal("no randomness".into()))
}

fn generate_key(bits: u32) -> Result<PrivateKey, CertError> {
    use aws_lc_rs::rsa::KeySize;
    let size = match bits {
        2048 => KeySize::Rsa2048,
        3072 => KeySize::Rsa3072,
        4096 => KeySize::Rsa4096,
        8192 => KeySize::Rsa8192,
        other => {
            return Err(CertError::Internal(format!(
                "unsupported RSA key size {other}"
            )));
        }
    };
    let kp = aws_lc_rs::rsa::KeyPair::generate(size)
        .map_err(|_| CertError::Internal("RSA key generation failed".into()))?;
    let der = kp
        .as_der()
        .map_err(|_| CertError::Internal("cannot serialize the key".into()))?;
    let doc = pkcs8::der::SecretDocument::try_from(der.as_ref())
        .map_err(|e| CertError::Internal(e.to_string()))?;
    Ok(PrivateKey { der: doc })
}

/// SHA-1 of the subjectPublicKey BIT STRING contents (RFC 5280 method 1,
/// what `SubjectKeyIdentifier.from_public_key` computes).
fn key_identifier(spki_der: &[u8]) -> Result<Vec<u8>, CertError> {
    let (_, spki) = SubjectPublicKeyInfo::from_der(spki_der)
        .map_err(|e| CertError::InvalidCsr(format!("bad public key: {e}")))?;
    let d = aws_lc_rs::digest::digest(
        &aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY,
        &spki.subject_public_key.data,
    );
    Ok(d.as_ref().to_vec())
}

/// What goes into one certificate.
struct Tbs<'a> {
    issuer_cn: &'a str,
    subject_der: &'a [u8],
    spki_der: &'a [u8],
    extensions: Vec<Ext>,
    now: NaiveDateTime,
    term_days: i64,
}

fn build_and_sign(tbs: Tbs<'_>, ca_key: &PrivateKey) -> Result<String, CertError> {
    // int(uuid4()): the UUID's 128 bits as a positive integer.
    let serial = *uuid::Uuid::new_v4().as_bytes();
    let alg = der::seq(&[&der::oid(OID_SHA256_RSA), &der::tlv(der::NULL, &[])]);
    let validity = der::seq(&[
        &der::time(&(tbs.now - Duration::days(1))),
        &der::time(&(tbs.now + Duration::days(tbs.term_days))),
    ]);
    let mut exts: Vec<Vec<u8>> = tbs
        .extensions
        .iter()
        .map(|e| der::extension(&e.oid_der, e.critical, &e.value))
        .collect();
    let ski = der::tlv(der::OCTET_STRING, &key_identifier(tbs.spki_der)?);
    exts.push(der::extension(&der::oid(OID_SKI), false, &ski));
    let version = der::tlv(0xa0, &der::uint(&[2]));
    let ext_block = der::tlv(0xa3, &der::tlv(der::SEQUENCE, &exts.concat()));
    let tbs_der = der::seq(&[
        &version,
        &der::uint(&serial),
        &alg,
        &der::name(&[(OID_CN, tbs.issuer_cn)]),
        &validity,
        tbs.subject_der,
        tbs.spki_der,
        &ext_block,
    ]);
    let signer = ca_key.signer()?;
    let mut sig = vec![0u8; signer.public_modulus_len()];
    signer
        .sign(
            &aws_lc_rs::signature::RSA_PKCS1_SHA256,
            &aws_lc_rs::rand::SystemRandom::new(),
            &tbs_der,
            &mut sig,
        )
        .map_err(|_| CertError::Internal("RSA signing failed".into()))?;
    let cert = der::seq(&[&tbs_der, &alg, &der::bit_string(&sig)]);
    Ok(der::pem("CERTIFICATE", &cert).trim_end().to_string())
}

fn now() -> NaiveDateTime {
    Utc::now().naive_utc().trunc_subsecs(0)
}

fn ext(oid: &[u64], critical: bool, value: Vec<u8>) -> Ext {
    Ext {
        oid_der: der::oid(oid),
        oid: oid.to_vec(),
        critical,
        value,
    }
}

/// `generate_ca_certificate(name, password)`: a self-signed CA with
/// BasicConstraints CA:TRUE pathlen:0 (critical), KeyUsage keyCertSign
/// (critical), SKI; key encrypted with a fresh passphrase.
pub fn generate_ca(name: &str, opts: &X509Opts) -> Result<(StoredKeyPair, PrivateKey), CertError> {
    let key = generate_key(opts.rsa_key_size)?;
    let spki = spki_of(&key)?;
    let bc = der::seq(&[&der::tlv(der::BOOLEAN, &[0xff]), &der::uint(&[0])]);
    let mut ku = [false; 9];
    ku[5] = true;
    let extensions = vec![
        ext(OID_BASIC_CONSTRAINTS, true, bc),
        ext(OID_KEY_USAGE, true, der::named_bits(&ku)),
    ];
    let subject = der::name(&[(OID_CN, name)]);
    let certificate = build_and_sign(
        Tbs {
            issuer_cn: name,
            subject_der: &subject,
            spki_der: &spki,
            extensions,
            now: now(),
            term_days: opts.term_of_validity,
        },
        &key,
    )?;
    let passphrase = crate::short_id::generate_id();
    let private_key = encrypt_private_key(&key, &passphrase)?;
    Ok((
        StoredKeyPair {
            certificate,
            private_key,
            passphrase: Secret::new(passphrase),
        },
        key,
    ))
}

/// `generate_client_certificate(issuer, "admin", "system:masters", ca_key)`:
/// KeyUsage digitalSignature+keyEncipherment (critical), EKU clientAuth,
/// BasicConstraints CA:FALSE (critical), SKI.
pub fn generate_client(
    issuer_cn: &str,
    subject_cn: &str,
    organization: &str,
    ca_key: &PrivateKey,
    opts: &X509Opts,
) -> Result<StoredKeyPair, CertError> {
    let key = generate_key(opts.rsa_key_size)?;
    let spki = spki_of(&key)?;
    let mut ku = [false; 9];
    ku[0] = true;
    ku[2] = true;
    let eku = der::seq(&[&der::oid(OID_CLIENT_AUTH)]);
    let extensions = vec![
        ext(OID_KEY_USAGE, true, der::named_bits(&ku)),
        ext(OID_EXT_KEY_USAGE, false, eku),
        ext(OID_BASIC_CONSTRAINTS, true, der::seq(&[])),
    ];
    let subject = der::name(&[(OID_CN, subject_cn), (OID_O, organization)]);
    let certificate = build_and_sign(
        Tbs {
            issuer_cn,
            subject_der: &subject,
            spki_der: &spki,
            extensions,
            now: now(),
            term_days: opts.term_of_validity,
        },
        ca_key,
    )?;
    let passphrase = crate::short_id::generate_id();
    let private_key = encrypt_private_key(&key, &passphrase)?;
    Ok(StoredKeyPair {
        certificate,
        private_key,
        passphrase: Secret::new(passphrase),
    })
}

fn spki_of(key: &PrivateKey) -> Result<Vec<u8>, CertError> {
    let kp = key.signer()?;
    let spki = kp
        .public_key()
        .as_der()
        .map_err(|_| CertError::Internal("cannot serialize the public key".into()))?;
    Ok(spki.as_ref().to_vec())
}

/// Largest CSR we look at (Magnum reads anything; a CSR is a few KiB).
pub const MAX_CSR_BYTES: usize = 64 * 1024;

/// Short, printable form of a bad CSR for the error message.
fn csr_excerpt(csr: &str) -> String {
    let s: String = csr.chars().take(120).collect();
    if csr.len() > s.len() {
        format!("{s:?}... ({} bytes)", csr.len())
    } else {
        format!("{s:?}")
    }
}

/// `sign(csr, issuer_name, ca_key)` with `validator.filter_extensions`.
pub fn sign_csr(
    csr_pem: &str,
    issuer_cn: &str,
    ca_key: &PrivateKey,
    opts: &X509Opts,
) -> Result<String, CertError> {
    let invalid = || CertError::InvalidCsr(csr_excerpt(csr_pem));
    if csr_pem.len() > MAX_CSR_BYTES {
        return Err(invalid());
    }
    let (_, pem) =
        x509_parser::pem::parse_x509_pem(csr_pem.trim().as_bytes()).map_err(|_| invalid())?;
    if pem.label != "CERTIFICATE REQUEST" && pem.label != "NEW CERTIFICATE REQUEST" {
        return Err(invalid());
    }
    let (rest, csr) = X509CertificationRequest::from_der(&pem.contents).map_err(|_| invalid())?;
    if !rest.is_empty() {
        return Err(invalid());
    }
    let info = &csr.certification_request_info;
    let mut requested = Vec::new();
    for attr in info.attributes() {
        if let ParsedCriAttribute::ExtensionRequest(req) = attr.parsed_attribute() {
            for e in &req.extensions {
                let arcs: Vec<u64> = e.oid.iter().map(|it| it.collect()).ok_or_else(invalid)?;
                requested.push(Ext {
                    oid_der: der::oid(&arcs),
                    oid: arcs,
                    critical: e.critical,
                    value: e.value.to_vec(),
                });
            }
        }
    }
    let extensions = filter::filter_extensions(requested, opts)?;
    if extensions.iter().any(|e| e.oid == OID_SKI) {
        return Err(CertError::Value(
            "This extension has already been set.".into(),
        ));
    }
    build_and_sign(
        Tbs {
            issuer_cn,
            subject_der: info.subject.as_raw(),
            spki_der: info.subject_pki.raw,
            extensions,
            now: now(),
            term_days: opts.term_of_validity,
        },
        ca_key,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> X509Opts {
        X509Opts::default()
    }

    /// Does `cert`'s signature verify with `issuer`'s public key?
    fn signed_by(cert: &X509Certificate<'_>, issuer: &X509Certificate<'_>) -> bool {
        aws_lc_rs::signature::UnparsedPublicKey::new(
            &aws_lc_rs::signature::RSA_PKCS1_2048_8192_SHA256,
            &issuer.public_key().subject_public_key.data,
        )
        .verify(cert.tbs_certificate.as_ref(), &cert.signature_value.data)
        .is_ok()
    }

    #[test]
    fn ca_and_client_look_like_magnums() {
        let (ca, ca_key) = generate_ca("k8s-demo", &opts()).unwrap();
        assert!(!ca.certificate.ends_with('\n'));
        assert!(
            ca.private_key
                .expose()
                .starts_with("-----BEGIN ENCRYPTED PRIVATE KEY-----\n")
        );
        assert!(
            ca.private_key
                .expose()
                .ends_with("-----END ENCRYPTED PRIVATE KEY-----\n")
        );
        assert_eq!(ca.passphrase.expose().len(), 12);
        assert!(!format!("{ca:?} {ca_key:?}").contains("PRIVATE KEY-----\nMII"));
        let (_, pem) = x509_parser::pem::parse_x509_pem(ca.certificate.as_bytes()).unwrap();
        let cert = pem.parse_x509().unwrap();
        assert_eq!(cert.subject().to_string(), "CN=k8s-demo");
        assert_eq!(cert.issuer().to_string(), "CN=k8s-demo");
        let bc = cert.basic_constraints().unwrap().unwrap();
        assert!(bc.critical && bc.value.ca && bc.value.path_len_constraint == Some(0));
        let ku = cert.key_usage().unwrap().unwrap();
        assert!(ku.critical && ku.value.key_cert_sign() && !ku.value.digital_signature());
        assert!(signed_by(&cert, &cert), "self-signed");
        let exts: Vec<String> = cert
            .extensions()
            .iter()
            .map(|e| e.oid.to_id_string())
            .collect();
        assert_eq!(exts, ["2.5.29.19", "2.5.29.15", "2.5.29.14"]);
        let days = (cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp())
            / 86400;
        assert_eq!(days, 1826);

        let again =
            decrypt_private_key(ca.private_key.expose(), Some(ca.passphrase.expose())).unwrap();
        assert_eq!(again.pkcs8_der(), ca_key.pkcs8_der());
        assert!(decrypt_private_key(ca.private_key.expose(), Some("wrong-passwd")).is_err());

        let client =
            generate_client("k8s-demo", "admin", "system:masters", &ca_key, &opts()).unwrap();
        let (_, pem) = x509_parser::pem::parse_x509_pem(client.certificate.as_bytes()).unwrap();
        let c = pem.parse_x509().unwrap();
        assert_eq!(c.subject().to_string(), "CN=admin, O=system:masters");
        assert!(signed_by(&c, &cert));
        let exts: Vec<(String, bool)> = c
            .extensions()
            .iter()
            .map(|e| (e.oid.to_id_string(), e.critical))
            .collect();
        assert_eq!(
            exts,
            [
                ("2.5.29.15".into(), true),
                ("2.5.29.37".into(), false),
                ("2.5.29.19".into(), true),
                ("2.5.29.14".into(), false)
            ]
        );
    }

    /// Keys as older OpenSSL/cryptography releases wrote them for Magnum
    /// (PBKDF2 with HMAC-SHA1 or -SHA256, AES-128/256-CBC), made by the
    /// openssl CLI from one of our keys: all decrypt to the same key.
    #[test]
    fn decrypts_keys_of_older_magnums() {
        let (_, key) = generate_ca("old", &opts()).unwrap();
        let dir = std::env::temp_dir().join(format!("mc-pkcs8-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let plain = dir.join("key.pem");
        std::fs::write(&plain, key.to_pem().expose()).unwrap();
        for (cipher, prf) in [
            ("aes-256-cbc", "hmacWithSHA1"),
            ("aes-256-cbc", "hmacWithSHA256"),
            ("aes-128-cbc", "hmacWithSHA1"),
        ] {
            let out = std::process::Command::new("openssl")
                .args([
                    "pkcs8",
                    "-topk8",
                    "-v2",
                    cipher,
                    "-v2prf",
                    prf,
                    "-iter",
                    "2048",
                    "-passout",
                    "pass:abcdefgh2345",
                    "-in",
                ])
                .arg(&plain)
                .output()
                .expect("openssl CLI");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let pem = String::from_utf8(out.stdout).unwrap();
            assert!(pem.starts_with("-----BEGIN ENCRYPTED PRIVATE KEY-----"));
            let back = decrypt_private_key(&pem, Some("abcdefgh2345")).unwrap();
            assert_eq!(back.pkcs8_der(), key.pkcs8_der(), "{cipher} {prf}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_csrs_are_invalid_csr() {
        let (_, key) = generate_ca("x", &opts()).unwrap();
        for bad in [
            "",
            "garbage",
            "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n",
        ] {
            assert!(
                matches!(
                    sign_csr(bad, "x", &key, &opts()),
                    Err(CertError::InvalidCsr(_))
                ),
                "{bad}"
            );
        }
        let big = "A".repeat(1 << 20);
        assert!(
            matches!(sign_csr(&big, "x", &key, &opts()), Err(CertError::InvalidCsr(m)) if m.len() < 300)
        );
    }
}
