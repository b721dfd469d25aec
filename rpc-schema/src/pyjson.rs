//! JSON text exactly as Python's `json.dumps` writes it with its defaults
//! (`ensure_ascii=True`, separators `", "` and `": "`).
//!
//! oslo.messaging serializes the inner message with `jsonutils.dumps` and kombu
//! serializes the envelope with `json.dumps`; both use those defaults. Writing
//! the same bytes means a captured Python message and ours compare equal, and a
//! peer that logs or hashes bodies sees nothing unusual.

use std::io;

use serde::Serialize;
use serde_json::ser::{CharEscape, Formatter};

/// A serde_json formatter that reproduces Python's default `json.dumps` output.
#[derive(Debug, Default, Clone, Copy)]
pub struct PythonFormatter;

impl Formatter for PythonFormatter {
    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }

    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        // serde_json has already escaped `"`, `\` and C0 controls; Python's
        // ensure_ascii additionally escapes DEL and everything above ASCII.
        if fragment.is_ascii() && !fragment.as_bytes().contains(&0x7f) {
            return w.write_all(fragment.as_bytes());
        }
        let mut start = 0;
        for (i, ch) in fragment.char_indices() {
            if (' '..='~').contains(&ch) {
                continue;
            }
            w.write_all(&fragment.as_bytes()[start..i])?;
            let mut units = [0u16; 2];
            for unit in ch.encode_utf16(&mut units) {
                write!(w, "\\u{:04x}", unit)?;
            }
            start = i + ch.len_utf8();
        }
        w.write_all(&fragment.as_bytes()[start..])
    }

    fn write_char_escape<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        escape: CharEscape,
    ) -> io::Result<()> {
        let s: &[u8] = match escape {
            CharEscape::Quote => b"\\\"",
            CharEscape::ReverseSolidus => b"\\\\",
            CharEscape::Solidus => b"\\/",
            CharEscape::Backspace => b"\\b",
            CharEscape::FormFeed => b"\\f",
            CharEscape::LineFeed => b"\\n",
            CharEscape::CarriageReturn => b"\\r",
            CharEscape::Tab => b"\\t",
            CharEscape::AsciiControl(b) => return write!(w, "\\u{:04x}", b),
        };
        w.write_all(s)
    }
}

/// Serialize `value` to bytes the way Python's `json.dumps(value)` would.
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, PythonFormatter);
    // Serializing a `serde_json::Value` or our own plain structs into a Vec
    // cannot fail: there is no I/O and no non-string map key.
    if value.serialize(&mut ser).is_err() {
        out.clear();
        out.extend_from_slice(b"null");
    }
    out
}

/// Serialize `value` to a string the way Python's `json.dumps(value)` would.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> String {
    // The formatter only ever writes ASCII.
    String::from_utf8(to_vec(value)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn matches_python_dumps() {
        // Expected strings produced by CPython 3.11 `json.dumps(...)`.
        let v = json!({"a": [1, 2, {"b": null}], "c": "x\u{e9}\u{1f600}\u{7f}\n\"\\", "d": true});
        assert_eq!(
            to_string(&v),
            r#"{"a": [1, 2, {"b": null}], "c": "x\u00e9\ud83d\ude00\u007f\n\"\\", "d": true}"#
        );
        assert_eq!(to_string(&json!({})), "{}");
        assert_eq!(to_string(&json!([])), "[]");
        assert_eq!(to_string(&json!("\u{1}")), r#""\u0001""#);
    }
}
