//! oslo.config's INI dialect (`oslo_config/iniparser.py` + `cfg.py`), and
//! its layering of several files.
//!
//! - `key = value` or `key: value`, whichever separator comes first;
//!   whitespace stripped; one pair of matching surrounding quotes removed.
//! - Comments are whole lines starting with `#` or `;`; a `#` inside a
//!   value (a password) is kept.
//! - A line starting with a space or tab continues the previous value
//!   (joined with `\n`); a blank line ends it.
//! - Every occurrence of a key is kept; single-valued options use the last.
//! - Section names are lower-cased, except `DEFAULT`.
//! - Later files win over earlier ones.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A parse error, with the file and line.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{file}:{line}: {message}: {text:?}")]
pub struct ParseError {
    pub file: String,
    pub line: usize,
    pub message: &'static str,
    pub text: String,
}

/// Values of one file: section -> key -> every value given, in order.
pub type Sections = BTreeMap<String, BTreeMap<String, Vec<String>>>;

/// Section names as oslo.config normalizes them.
pub fn normalize_section(name: &str) -> String {
    if name == "DEFAULT" {
        name.to_string()
    } else {
        name.to_lowercase()
    }
}

/// Parse one file's text.
pub fn parse(file: &str, text: &str) -> Result<Sections, ParseError> {
    let mut sections = Sections::new();
    let mut section: Option<String> = None;
    let mut pending: Option<(String, Vec<String>, usize)> = None;

    let err = |line: usize, message: &'static str, text: &str| ParseError {
        file: file.to_string(),
        line,
        message,
        text: text.to_string(),
    };
    let flush = |sections: &mut Sections,
                 section: &Option<String>,
                 pending: &mut Option<(String, Vec<String>, usize)>|
     -> Result<(), ParseError> {
        if let Some((key, value, line)) = pending.take() {
            let Some(s) = section else {
                return Err(err(line, "Section must be started before assignment", &key));
            };
            sections
                .entry(s.clone())
                .or_default()
                .entry(key)
                .or_default()
                .push(value.join("\n"));
        }
        Ok(())
    };

    for (idx, raw) in text.lines().enumerate() {
        let lineno = idx + 1;
        let line = raw.trim_end();
        if line.is_empty() {
            flush(&mut sections, &section, &mut pending)?;
            continue;
        }
        if line.starts_with(' ') || line.starts_with('\t') {
            match pending.as_mut() {
                Some((_, value, _)) => value.push(line.trim_start().to_string()),
                None => return Err(err(lineno, "Unexpected continuation line", line)),
            }
            continue;
        }
        flush(&mut sections, &section, &mut pending)?;
        if line.starts_with('[') {
            if !line.ends_with(']') {
                return Err(err(lineno, "Invalid section (must end with ])", line));
            }
            if line.len() <= 2 {
                return Err(err(lineno, "Empty section name", line));
            }
            let name = normalize_section(&line[1..line.len() - 1]);
            sections.entry(name.clone()).or_default();
            section = Some(name);
        } else if line.starts_with('#') || line.starts_with(';') {
            continue;
        } else {
            let colon = line.find(':');
            let equal = line.find('=');
            let split = match (colon, equal) {
                (None, None) => return Err(err(lineno, "No ':' or '=' found in assignment", line)),
                (None, Some(e)) => e,
                (Some(c), None) => c,
                (Some(c), Some(e)) => c.min(e),
            };
            let key = line[..split].trim().to_string();
            let mut value = line[split + 1..].trim();
            if value.len() >= 2
                && (value.starts_with('"') || value.starts_with('\''))
                && value.as_bytes()[0] == value.as_bytes()[value.len() - 1]
            {
                value = &value[1..value.len() - 1];
            }
            if key.is_empty() {
                return Err(err(lineno, "Key cannot be empty", line));
            }
            pending = Some((key, vec![value.to_string()], lineno));
        }
    }
    flush(&mut sections, &section, &mut pending)?;
    Ok(sections)
}

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read config directory {path}: {source}")]
    ReadDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Parse(#[from] ParseError),
}

/// Several files layered the oslo way: later files override earlier ones.
#[derive(Debug, Clone, Default)]
pub struct Layered {
    /// Parsed files, in load order.
    files: Vec<(String, Sections)>,
}

impl Layered {
    /// Load `--config-file` paths in order, then each `--config-dir`'s
    /// `*.conf` files in sorted order, as oslo.config does.
    pub fn load(files: &[PathBuf], dirs: &[PathBuf]) -> Result<Layered, LoadError> {
        let mut all: Vec<PathBuf> = files.to_vec();
        for dir in dirs {
            let rd = std::fs::read_dir(dir).map_err(|source| LoadError::ReadDir {
                path: dir.clone(),
                source,
            })?;
            let mut in_dir: Vec<PathBuf> = rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "conf") && p.is_file())
                .collect();
            in_dir.sort();
            all.extend(in_dir);
        }
        let mut layered = Layered::default();
        for path in all {
            let text = std::fs::read_to_string(&path).map_err(|source| LoadError::Read {
                path: path.clone(),
                source,
            })?;
            layered.push_text(&path, &text)?;
        }
        Ok(layered)
    }

    /// Add one file's text on top.
    pub fn push_text(&mut self, name: &Path, text: &str) -> Result<(), ParseError> {
        let display = name.display().to_string();
        let sections = parse(&display, text)?;
        self.files.push((display, sections));
        Ok(())
    }

    /// All values of `group.key` from the last file that sets it.
    pub fn get_all(&self, group: &str, key: &str) -> Option<&[String]> {
        let group = normalize_section(group);
        self.files
            .iter()
            .rev()
            .find_map(|(_, s)| s.get(&group).and_then(|g| g.get(key)).map(Vec::as_slice))
    }

    /// Every value of a multi-valued `group.key` (oslo's `MultiStrOpt`),
    /// from every file that sets it, in file order.
    pub fn get_multi(&self, group: &str, key: &str) -> Vec<String> {
        let group = normalize_section(group);
        self.files
            .iter()
            .filter_map(|(_, s)| s.get(&group).and_then(|g| g.get(key)))
            .flat_map(|v| v.iter().cloned())
            .collect()
    }

    /// The effective (last) raw value of `group.key`.
    pub fn get(&self, group: &str, key: &str) -> Option<&str> {
        self.get_all(group, key)
            .and_then(|v| v.last())
            .map(String::as_str)
    }

    /// Every (group, key) set in any file.
    pub fn keys(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .files
            .iter()
            .flat_map(|(_, s)| {
                s.iter()
                    .flat_map(|(g, kv)| kv.keys().map(move |k| (g.clone(), k.clone())))
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// The files loaded, in order.
    pub fn file_names(&self) -> Vec<&str> {
        self.files.iter().map(|(n, _)| n.as_str()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
# a comment
[DEFAULT]
transport_url = rabbit://u:pa#ss;w@h1:5672,u:p@h2:5672/vhost
host: node1
debug = 'True'
multi = a
multi = b

[Oslo_Messaging_Rabbit]
rabbit_quorum_queue=true
long = first
  second
\tthird
; another comment
quoted = \"with = and : inside\"
mixed = 'not stripped\"
";

    #[test]
    fn parses_like_oslo() {
        let s = parse("x.conf", SAMPLE).unwrap();
        let d = &s["DEFAULT"];
        assert_eq!(
            d["transport_url"],
            vec!["rabbit://u:pa#ss;w@h1:5672,u:p@h2:5672/vhost"]
        );
        assert_eq!(d["host"], vec!["node1"]);
        assert_eq!(d["debug"], vec!["True"]);
        assert_eq!(d["multi"], vec!["a", "b"]);
        let r = &s["oslo_messaging_rabbit"];
        assert_eq!(r["long"], vec!["first\nsecond\nthird"]);
        assert_eq!(r["quoted"], vec!["with = and : inside"]);
        assert_eq!(r["mixed"], vec!["'not stripped\""]);
    }

    #[test]
    fn parse_errors_name_file_and_line() {
        assert_eq!(parse("a.conf", "key = v\n").unwrap_err().line, 1);
        assert_eq!(
            parse("a.conf", "[x]\n  cont\n").unwrap_err().message,
            "Unexpected continuation line"
        );
        assert_eq!(
            parse("a.conf", "[x\n").unwrap_err().message,
            "Invalid section (must end with ])"
        );
        assert_eq!(
            parse("a.conf", "[]\n").unwrap_err().message,
            "Empty section name"
        );
        assert_eq!(
            parse("a.conf", "[x]\nnovalue\n").unwrap_err().message,
            "No ':' or '=' found in assignment"
        );
        assert_eq!(
            parse("a.conf", "[x]\n= v\n").unwrap_err().message,
            "Key cannot be empty"
        );
    }

    #[test]
    fn later_files_win() {
        let mut l = Layered::default();
        l.push_text(Path::new("a"), "[DEFAULT]\nhost = a\ndebug = true\n")
            .unwrap();
        l.push_text(Path::new("b"), "[DEFAULT]\nhost = b\n")
            .unwrap();
        assert_eq!(l.get("DEFAULT", "host"), Some("b"));
        assert_eq!(l.get("DEFAULT", "debug"), Some("true"));
        assert_eq!(
            l.get("default", "host"),
            None,
            "only DEFAULT keeps its case"
        );
    }

    #[test]
    fn config_dir_sorted_after_files() {
        let dir = std::env::temp_dir().join(format!("oslo-conf-test-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("d")).unwrap();
        std::fs::write(dir.join("main.conf"), "[DEFAULT]\nhost = main\nx = 1\n").unwrap();
        std::fs::write(dir.join("d/20-b.conf"), "[DEFAULT]\nhost = b\n").unwrap();
        std::fs::write(dir.join("d/10-a.conf"), "[DEFAULT]\nhost = a\nx = 2\n").unwrap();
        std::fs::write(dir.join("d/ignored.txt"), "[DEFAULT]\nhost = no\n").unwrap();
        let l = Layered::load(&[dir.join("main.conf")], &[dir.join("d")]).unwrap();
        assert_eq!(l.get("DEFAULT", "host"), Some("b"));
        assert_eq!(l.get("DEFAULT", "x"), Some("2"));
        assert!(matches!(
            Layered::load(&[dir.join("missing.conf")], &[]),
            Err(LoadError::Read { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
