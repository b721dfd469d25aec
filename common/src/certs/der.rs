//! Just enough DER writing to assemble an X.509 TBSCertificate the way
//! Python's `cryptography` does for Magnum. Values we copy from a CSR
//! (subject, public key, extension values) are inserted byte for byte.

pub const SEQUENCE: u8 = 0x30;
pub const INTEGER: u8 = 0x02;
pub const BIT_STRING: u8 = 0x03;
pub const OCTET_STRING: u8 = 0x04;
pub const NULL: u8 = 0x05;
pub const OID: u8 = 0x06;
pub const UTF8_STRING: u8 = 0x0c;
pub const SET: u8 = 0x31;
pub const BOOLEAN: u8 = 0x01;
pub const UTC_TIME: u8 = 0x17;
pub const GENERALIZED_TIME: u8 = 0x18;

/// Tag-length-value.
pub fn tlv(tag: u8, value: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = value.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(value);
    out
}

pub fn seq(parts: &[&[u8]]) -> Vec<u8> {
    tlv(SEQUENCE, &parts.concat())
}

/// A non-negative INTEGER from big-endian magnitude bytes.
pub fn uint(magnitude: &[u8]) -> Vec<u8> {
    let m: &[u8] = {
        let skip = magnitude.iter().take_while(|b| **b == 0).count();
        let m = &magnitude[skip.min(magnitude.len().saturating_sub(1))..];
        if m.is_empty() { &[0] } else { m }
    };
    let mut v = Vec::with_capacity(m.len() + 1);
    if m[0] & 0x80 != 0 {
        v.push(0);
    }
    v.extend_from_slice(m);
    tlv(INTEGER, &v)
}

/// An OBJECT IDENTIFIER from its arcs.
pub fn oid(arcs: &[u64]) -> Vec<u8> {
    let mut v = Vec::new();
    let mut push = |mut n: u64| {
        let mut tmp = vec![(n & 0x7f) as u8];
        n >>= 7;
        while n > 0 {
            tmp.push(0x80 | (n & 0x7f) as u8);
            n >>= 7;
        }
        tmp.reverse();
        v.extend(tmp);
    };
    if arcs.len() >= 2 {
        push(arcs[0] * 40 + arcs[1]);
        for a in &arcs[2..] {
            push(*a);
        }
    }
    tlv(OID, &v)
}

/// A BIT STRING of whole bytes (no unused bits).
pub fn bit_string(bytes: &[u8]) -> Vec<u8> {
    let mut v = vec![0];
    v.extend_from_slice(bytes);
    tlv(BIT_STRING, &v)
}

/// A named BIT STRING (DER: trailing zero bits dropped). `bits[i]` is bit i.
pub fn named_bits(bits: &[bool]) -> Vec<u8> {
    let last = match bits.iter().rposition(|b| *b) {
        Some(i) => i,
        None => return tlv(BIT_STRING, &[0]),
    };
    let nbytes = last / 8 + 1;
    let mut bytes = vec![0u8; nbytes];
    for (i, set) in bits.iter().enumerate().take(last + 1) {
        if *set {
            bytes[i / 8] |= 0x80 >> (i % 8);
        }
    }
    let unused = (nbytes * 8 - (last + 1)) as u8;
    let mut v = vec![unused];
    v.extend(bytes);
    tlv(BIT_STRING, &v)
}

/// UTCTime before 2050, GeneralizedTime from 2050 (RFC 5280 4.1.2.5).
pub fn time(t: &chrono::NaiveDateTime) -> Vec<u8> {
    use chrono::Datelike;
    if t.year() < 2050 {
        tlv(UTC_TIME, t.format("%y%m%d%H%M%SZ").to_string().as_bytes())
    } else {
        tlv(
            GENERALIZED_TIME,
            t.format("%Y%m%d%H%M%SZ").to_string().as_bytes(),
        )
    }
}

/// `Name` with one RDN per attribute (what `x509.Name([...])` builds).
pub fn name(attrs: &[(&[u64], &str)]) -> Vec<u8> {
    let rdns: Vec<Vec<u8>> = attrs
        .iter()
        .map(|(o, v)| tlv(SET, &seq(&[&oid(o), &tlv(UTF8_STRING, v.as_bytes())])))
        .collect();
    tlv(SEQUENCE, &rdns.concat())
}

/// One `Extension` (critical written only when true, as DER requires).
pub fn extension(oid_der: &[u8], critical: bool, value: &[u8]) -> Vec<u8> {
    let crit = if critical {
        tlv(BOOLEAN, &[0xff])
    } else {
        Vec::new()
    };
    seq(&[oid_der, &crit, &tlv(OCTET_STRING, value)])
}

pub fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// SHA-256 of `data`, as lowercase hex.
pub fn sha256_hex(data: &[u8]) -> String {
    aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, data)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        out.push(A[(n >> 18) as usize & 63] as char);
        out.push(A[(n >> 12) as usize & 63] as char);
        out.push(if c.len() > 1 {
            A[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if c.len() > 2 {
            A[n as usize & 63] as char
        } else {
            '='
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings() {
        assert_eq!(oid(&[2, 5, 29, 15]), vec![0x06, 0x03, 0x55, 0x1d, 0x0f]);
        assert_eq!(
            oid(&[1, 2, 840, 113549, 1, 1, 11]),
            vec![
                0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b
            ]
        );
        assert_eq!(uint(&[0x80]), vec![0x02, 0x02, 0x00, 0x80]);
        assert_eq!(uint(&[0, 0, 5]), vec![0x02, 0x01, 0x05]);
        // keyUsage digitalSignature + keyEncipherment = bits 0 and 2: 03 02 05 a0
        assert_eq!(
            named_bits(&[true, false, true]),
            vec![0x03, 0x02, 0x05, 0xa0]
        );
        // keyCertSign alone = bit 5: 03 02 02 04
        assert_eq!(
            named_bits(&[false, false, false, false, false, true]),
            vec![0x03, 0x02, 0x02, 0x04]
        );
        // decipherOnly = bit 8 needs a second byte: 03 03 07 00 80
        let mut nine = [false; 9];
        nine[8] = true;
        assert_eq!(named_bits(&nine), vec![0x03, 0x03, 0x07, 0x00, 0x80]);
        assert_eq!(tlv(0x04, &[0; 200])[..3], [0x04, 0x81, 200]);
        assert_eq!(tlv(0x04, &[0; 300])[..4], [0x04, 0x82, 0x01, 0x2c]);
        assert_eq!(base64(b"Man"), "TWFu");
        assert_eq!(base64(b"Ma"), "TWE=");
        assert_eq!(base64(b"M"), "TQ==");
        assert!(pem("X", &[1; 100]).ends_with("-----END X-----\n"));
    }
}
