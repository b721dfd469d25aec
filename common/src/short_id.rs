//! Magnum's `short_id.generate_id()`: the 12-character lowercase base32 id
//! that names a conductor's server queue (`magnum-conductor.<id>`).

/// A new random id, from a uuid4 as Magnum derives it: the uuid's 60-bit
/// `time` field, as 8 bytes, base32-encoded, first 12 characters, lowercase.
pub fn generate_id() -> String {
    from_uuid(&uuid::Uuid::new_v4())
}

/// The id Magnum's `short_id.get_id()` derives from a given uuid.
pub fn from_uuid(u: &uuid::Uuid) -> String {
    let b = u.as_bytes();
    // Python's UUID.time: time_low (bytes 0-3), time_mid (4-5), and the low
    // 12 bits of time_hi_and_version (6-7).
    let time_low = u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let time_mid = u64::from(u16::from_be_bytes([b[4], b[5]]));
    let time_hi = u64::from(u16::from_be_bytes([b[6], b[7]]) & 0x0fff);
    let time = (time_hi << 48) | (time_mid << 32) | time_low;
    // _to_byte_string(value, 60): shifts 52, 44, ..., 4, -4.
    let bytes: Vec<u8> = (0..8)
        .map(|i| {
            let off: i32 = 52 - 8 * i;
            let v = if off >= 0 {
                time >> off
            } else {
                time << (-off)
            };
            (v & 0xff) as u8
        })
        .collect();
    base32_lower(&bytes).chars().take(12).collect()
}

fn base32_lower(data: &[u8]) -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut out = String::new();
    let mut buffer: u32 = 0;
    let mut bits = 0;
    for &byte in data {
        buffer = (buffer << 8) | u32::from(byte);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(ALPHABET[((buffer >> bits) & 31) as usize] as char);
        }
    }
    if bits > 0 {
        out.push(ALPHABET[((buffer << (5 - bits)) & 31) as usize] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_magnum() {
        // python: short_id.get_id('a4f5b1d2-6c3e-4f7a-9b8c-0d1e2f3a4b5c')
        let u = uuid::Uuid::parse_str("a4f5b1d2-6c3e-4f7a-9b8c-0d1e2f3a4b5c").unwrap();
        assert_eq!(from_uuid(&u), PYTHON_ID);
        let id = generate_id();
        assert_eq!(id.len(), 12);
        assert!(
            id.chars()
                .all(|c| c.is_ascii_lowercase() || ('2'..='7').contains(&c))
        );
    }

    const PYTHON_ID: &str = "66tmh2splmos";
}
