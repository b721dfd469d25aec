//! OVO datetimes on the wire: `YYYY-MM-DDTHH:MM:SS` plus `Z` (UTC) or the
//! offset, microseconds dropped (`oslo_versionedobjects.fields.DateTime`).

/// Parse an ISO 8601 datetime the way `timeutils.parse_isotime` accepts it
/// (date, `T` or space, time with optional seconds and fraction, optional
/// `Z`/`±HH[:MM]`, no zone meaning UTC) and write it back the way OVO
/// emits it. `None` when it is not a valid datetime.
pub fn normalize_isotime(s: &str) -> Option<String> {
    let s = s.trim();
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<u32> {
        let part = s.get(from..from + len)?;
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse().ok()
        } else {
            None
        }
    };
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    if b.get(4) != Some(&b'-') || b.get(7) != Some(&b'-') {
        return None;
    }
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        _ => return None,
    };
    if day == 0 || day > days_in_month {
        return None;
    }
    let (mut hour, mut minute, mut second) = (0, 0, 0);
    let mut i = 10;
    if b.len() > 10 {
        if b[10] != b'T' && b[10] != b' ' && b[10] != b't' {
            return None;
        }
        hour = num(11, 2)?;
        if b.get(13) != Some(&b':') {
            return None;
        }
        minute = num(14, 2)?;
        i = 16;
        if b.get(16) == Some(&b':') {
            second = num(17, 2)?;
            i = 19;
            if matches!(b.get(19), Some(b'.') | Some(b',')) {
                i = 20;
                let start = i;
                while b.get(i).is_some_and(u8::is_ascii_digit) {
                    i += 1;
                }
                if i == start {
                    return None;
                }
            }
        }
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let zone = &s[i..];
    let suffix = match zone {
        "" | "Z" | "z" => "Z".to_string(),
        z if z.starts_with('+') || z.starts_with('-') => {
            let digits: String = z[1..].chars().filter(|c| *c != ':').collect();
            if !(digits.len() == 2 || digits.len() == 4)
                || !digits.bytes().all(|c| c.is_ascii_digit())
            {
                return None;
            }
            let hh: u32 = digits[..2].parse().ok()?;
            let mm: u32 = if digits.len() == 4 {
                digits[2..].parse().ok()?
            } else {
                0
            };
            if hh > 23 || mm > 59 {
                return None;
            }
            if hh == 0 && mm == 0 {
                "Z".to_string()
            } else {
                format!("{}{:02}:{:02}", &z[..1], hh, mm)
            }
        }
        _ => return None,
    };
    Some(format!(
        "{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}{suffix}"
    ))
}

#[cfg(test)]
mod tests {
    use super::normalize_isotime as n;

    #[test]
    fn formats_like_ovo() {
        assert_eq!(
            n("2025-03-04T10:20:30Z").as_deref(),
            Some("2025-03-04T10:20:30Z")
        );
        assert_eq!(
            n("2025-03-04T10:20:30.123456").as_deref(),
            Some("2025-03-04T10:20:30Z")
        );
        assert_eq!(
            n("2025-03-04 10:20:30+00:00").as_deref(),
            Some("2025-03-04T10:20:30Z")
        );
        assert_eq!(
            n("2025-03-04T10:20:30+0200").as_deref(),
            Some("2025-03-04T10:20:30+02:00")
        );
        assert_eq!(n("2025-03-04").as_deref(), Some("2025-03-04T00:00:00Z"));
        assert_eq!(
            n("2024-02-29T00:00").as_deref(),
            Some("2024-02-29T00:00:00Z")
        );
        for bad in [
            "",
            "2025-02-30T00:00:00",
            "2025-13-01",
            "yesterday",
            "2025-03-04T25:00:00",
            "2025-03-04T10:20:30+2",
        ] {
            assert_eq!(n(bad), None, "{bad}");
        }
    }
}
