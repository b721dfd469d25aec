//! Typed reads of one group of options with oslo.config's value syntax
//! (strings, lists, booleans, integers with bounds, ports, choices) and
//! `$option` / `${group.option}` interpolation, bounded. Every read records
//! its kind and default for the documentation ([`super::known::record`]).

use super::ConfigError;
use super::ini::Layered;
use super::known::record;

/// Typed reads of one group, with oslo.config's value syntax.
pub(super) struct Group<'a> {
    pub(super) layered: &'a Layered,
    pub(super) name: &'static str,
    /// Values that win over the files (the transport URL query).
    pub(super) overrides: Option<&'a std::collections::BTreeMap<String, String>>,
}

impl Group<'_> {
    pub(super) fn raw(&self, name: &'static str) -> Option<String> {
        record(self.name, name, "string value", None);
        if let Some(v) = self.overrides.and_then(|o| o.get(name)) {
            return Some(v.clone());
        }
        self.layered
            .get(self.name, name)
            .map(|v| interpolate(self.layered, self.name, v, 0))
    }
    pub(super) fn invalid(&self, name: &'static str, reason: String) -> ConfigError {
        ConfigError::Invalid {
            group: self.name,
            name,
            reason,
        }
    }
    pub(super) fn string(&self, name: &'static str, default: &str) -> String {
        record(self.name, name, "string value", Some(default.to_string()));
        self.raw(name).unwrap_or_else(|| default.to_string())
    }
    pub(super) fn opt_string(&self, name: &'static str) -> Option<String> {
        self.raw(name).filter(|s| !s.is_empty())
    }
    /// An oslo.config ListOpt: comma-separated, items trimmed, empty items
    /// dropped.
    pub(super) fn list(&self, name: &'static str, default: &[&str]) -> Vec<String> {
        record(self.name, name, "list value", Some(default.join(",")));
        match self.raw(name) {
            None => default.iter().map(|s| s.to_string()).collect(),
            Some(v) => v
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
        }
    }
    pub(super) fn boolean(&self, name: &'static str, default: bool) -> Result<bool, ConfigError> {
        record(self.name, name, "boolean value", Some(default.to_string()));
        match self.raw(name) {
            None => Ok(default),
            Some(v) => match v.trim().to_ascii_lowercase().as_str() {
                "true" | "1" | "on" | "yes" => Ok(true),
                "false" | "0" | "off" | "no" => Ok(false),
                _ => Err(self.invalid(name, format!("{v:?} is not a boolean"))),
            },
        }
    }
    pub(super) fn int(
        &self,
        name: &'static str,
        default: i64,
        min: Option<i64>,
        max: Option<i64>,
    ) -> Result<i64, ConfigError> {
        record(self.name, name, "integer value", Some(default.to_string()));
        let Some(v) = self.raw(name) else {
            return Ok(default);
        };
        let n: i64 = v
            .trim()
            .parse()
            .map_err(|_| self.invalid(name, format!("{v:?} is not an integer")))?;
        if let Some(lo) = min.filter(|lo| n < *lo) {
            return Err(self.invalid(name, format!("{n} is less than the minimum {lo}")));
        }
        if let Some(hi) = max.filter(|hi| n > *hi) {
            return Err(self.invalid(name, format!("{n} is greater than the maximum {hi}")));
        }
        Ok(n)
    }
    pub(super) fn float(
        &self,
        name: &'static str,
        default: f64,
        min: f64,
    ) -> Result<f64, ConfigError> {
        record(
            self.name,
            name,
            "floating point value",
            Some(default.to_string()),
        );
        let Some(v) = self.raw(name) else {
            return Ok(default);
        };
        let n: f64 = v
            .trim()
            .parse()
            .map_err(|_| self.invalid(name, format!("{v:?} is not a number")))?;
        if !n.is_finite() || n < min {
            return Err(self.invalid(name, format!("{n} is less than the minimum {min}")));
        }
        Ok(n)
    }
    pub(super) fn choice(
        &self,
        name: &'static str,
        default: &str,
        choices: &[&str],
    ) -> Result<String, ConfigError> {
        let v = self.string(name, default);
        if choices.contains(&v.as_str()) {
            Ok(v)
        } else {
            Err(self.invalid(name, format!("{v:?} is not one of {choices:?}")))
        }
    }
}

/// oslo.config's `$opt` / `${group.opt}` substitution against values set in
/// the files (`safe_substitute`: unknown names stay as written; `$$` and
/// `\$` are a literal `$`).
///
/// Bounded: references nested deeper than 8, or expanding the value past
/// [`MAX_INTERPOLATED`] bytes (`a = $b$b$b`, `b = $c$c$c`... grows
/// exponentially: found by fuzzing), are left as written, with a warning.
pub fn interpolate(layered: &Layered, group: &str, value: &str, depth: usize) -> String {
    let mut budget = MAX_INTERPOLATED;
    let out = expand(layered, group, value, depth, &mut budget);
    if budget == 0 {
        tracing::warn!(
            group,
            "a value's $-references expand past {MAX_INTERPOLATED} bytes: the rest is left unexpanded"
        );
    }
    out
}

/// The most an interpolated value may grow to.
pub const MAX_INTERPOLATED: usize = 64 * 1024;

fn expand(layered: &Layered, group: &str, value: &str, depth: usize, budget: &mut usize) -> String {
    if !value.contains('$') || depth > 8 || *budget == 0 {
        return value.to_string();
    }
    let value = value.replace("\\$", "$$");
    let mut out = String::with_capacity(value.len());
    let mut rest = value.as_str();
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(r) = after.strip_prefix('$') {
            out.push('$');
            rest = r;
            continue;
        }
        let (name, consumed) = if let Some(inner) = after.strip_prefix('{') {
            match inner.find('}') {
                Some(end) => (&inner[..end], end + 2),
                None => ("", 0),
            }
        } else {
            let len = after
                .char_indices()
                .take_while(|(i, c)| {
                    if *i == 0 {
                        c.is_ascii_alphabetic() || *c == '_'
                    } else {
                        c.is_ascii_alphanumeric() || *c == '_' || *c == '.'
                    }
                })
                .count();
            (&after[..len], len)
        };
        let valid = !name.is_empty()
            && name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
        let found = valid.then(|| lookup(layered, group, name)).flatten();
        match found {
            Some(v) if *budget > 0 => {
                let e = expand(layered, group, &v, depth + 1, budget);
                if e.len() > *budget {
                    // Over budget: this reference stays as written.
                    *budget = 0;
                    out.push('$');
                    rest = after;
                    continue;
                }
                *budget -= e.len();
                out.push_str(&e);
                rest = &after[consumed..];
            }
            _ => {
                out.push('$');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

fn lookup(layered: &Layered, group: &str, name: &str) -> Option<String> {
    if let Some((g, opt)) = name.split_once('.')
        && let Some(v) = layered.get(g, opt)
    {
        return Some(v.to_string());
    }
    layered
        .get(group, name)
        .or_else(|| layered.get("DEFAULT", name))
        .map(str::to_string)
}
