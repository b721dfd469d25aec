//! Logging as oslo.log does it, from `[DEFAULT]`:
//!
//! - `log_file` (joined to `log_dir` when relative; `log_dir` alone gives
//!   `<log_dir>/magnum-conductor.log`): appended to, and reopened on SIGHUP
//!   (logrotate's `postrotate` sends it; no copytruncate needed);
//! - `use_journal`: the native systemd journal protocol (priority per
//!   level, `SYSLOG_IDENTIFIER=magnum-conductor`);
//! - `use_stderr`: stderr as well; with no file and no journal, stdout
//!   (oslo.log's default stream);
//! - `use_json`: one JSON object per line;
//! - `debug`, and `default_log_levels` (`target=LEVEL` pairs; oslo's level
//!   names; Python module names match nothing here and are harmless);
//!   `RUST_LOG`, when set, wins over both.
//!
//! Every line written while a request is handled carries its request id
//! (the `request` span, see [`crate::server`]).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use common::config::DefaultOpts;
use tracing::Level;
use tracing_subscriber::Layer;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The journal's socket.
pub const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

/// The filter directives for these options (pure).
pub fn directives(debug: bool, default_log_levels: &[String]) -> String {
    let mut d = vec![if debug {
        "debug".to_string()
    } else {
        "info".to_string()
    }];
    for pair in default_log_levels {
        let Some((target, level)) = pair.split_once('=') else {
            continue;
        };
        let level = match level.trim().to_ascii_uppercase().as_str() {
            "TRACE" => "trace",
            "DEBUG" => "debug",
            "INFO" => "info",
            "WARN" | "WARNING" => "warn",
            "ERROR" | "CRITICAL" | "FATAL" => "error",
            _ => continue,
        };
        let target = target.trim();
        if !target.is_empty()
            && target
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        {
            d.push(format!("{target}={level}"));
        }
    }
    d.join(",")
}

/// The file to log to (oslo.log's `_get_log_file_path`), if any.
pub fn log_path(opts: &DefaultOpts) -> Option<PathBuf> {
    match (&opts.log_dir, &opts.log_file) {
        (Some(dir), Some(file)) => Some(Path::new(dir).join(file)),
        (None, Some(file)) => Some(PathBuf::from(file)),
        (Some(dir), None) => Some(Path::new(dir).join("magnum-conductor.log")),
        (None, None) => None,
    }
}

/// A log file that can be reopened (after logrotate moved it away).
#[derive(Clone)]
pub struct LogFile {
    path: PathBuf,
    file: Arc<Mutex<File>>,
}

impl LogFile {
    pub fn open(path: &Path) -> io::Result<LogFile> {
        Ok(LogFile {
            path: path.to_path_buf(),
            file: Arc::new(Mutex::new(Self::append(path)?)),
        })
    }

    fn append(path: &Path) -> io::Result<File> {
        OpenOptions::new().create(true).append(true).open(path)
    }

    /// Open the path again (SIGHUP); on failure keep the old file.
    pub fn reopen(&self) -> io::Result<()> {
        let f = Self::append(&self.path)?;
        match self.file.lock() {
            Ok(mut g) => *g = f,
            Err(p) => *p.into_inner() = f,
        }
        Ok(())
    }
}

pub struct LogFileWriter(Arc<Mutex<File>>);

impl Write for LogFileWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.0.lock() {
            Ok(mut f) => f.write(buf),
            Err(p) => p.into_inner().write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogFile {
    type Writer = LogFileWriter;
    fn make_writer(&'a self) -> LogFileWriter {
        LogFileWriter(self.file.clone())
    }
}

/// One journal entry in the native protocol (pure): `PRIORITY`,
/// `SYSLOG_IDENTIFIER`, and `MESSAGE` in the length-prefixed form (a
/// message may hold newlines).
pub fn journal_entry(level: Level, message: &[u8]) -> Vec<u8> {
    let priority = match level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    };
    let message = message.strip_suffix(b"\n").unwrap_or(message);
    let mut out =
        format!("PRIORITY={priority}\nSYSLOG_IDENTIFIER=magnum-conductor\nMESSAGE\n").into_bytes();
    out.extend_from_slice(&(message.len() as u64).to_le_bytes());
    out.extend_from_slice(message);
    out.push(b'\n');
    out
}

/// Writes each event as one journal datagram (stderr if the journal
/// cannot be reached).
#[derive(Clone)]
pub struct Journal {
    socket: Arc<std::os::unix::net::UnixDatagram>,
    path: PathBuf,
}

impl Journal {
    pub fn connect(path: &Path) -> io::Result<Journal> {
        let socket = std::os::unix::net::UnixDatagram::unbound()?;
        // Fails now if there is no journal to talk to.
        socket.connect(path)?;
        Ok(Journal {
            socket: Arc::new(socket),
            path: path.to_path_buf(),
        })
    }
}

pub struct JournalWriter {
    journal: Journal,
    level: Level,
    buf: Vec<u8>,
}

impl Write for JournalWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for JournalWriter {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let entry = journal_entry(self.level, &self.buf);
        if self.journal.socket.send(&entry).is_err()
            && self
                .journal
                .socket
                .send_to(&entry, &self.journal.path)
                .is_err()
        {
            let _ = io::stderr().write_all(&self.buf);
        }
    }
}

impl<'a> MakeWriter<'a> for Journal {
    type Writer = JournalWriter;
    fn make_writer(&'a self) -> JournalWriter {
        JournalWriter {
            journal: self.clone(),
            level: Level::INFO,
            buf: Vec::new(),
        }
    }
    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> JournalWriter {
        JournalWriter {
            journal: self.clone(),
            level: *meta.level(),
            buf: Vec::new(),
        }
    }
}

type Boxed = Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync>;

fn layer<W>(writer: W, json: bool, ansi: bool, timestamps: bool) -> Boxed
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let l = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_target(false)
        .with_ansi(ansi);
    match (json, timestamps) {
        (true, _) => l
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .boxed(),
        (false, true) => l.boxed(),
        (false, false) => l.without_time().boxed(),
    }
}

/// What SIGHUP reopens.
#[derive(Clone, Default)]
pub struct Handle {
    file: Option<LogFile>,
}

impl Handle {
    pub fn reopen(&self) {
        if let Some(f) = &self.file {
            match f.reopen() {
                Ok(()) => tracing::info!(path = %f.path.display(), "log file reopened"),
                Err(e) => {
                    tracing::error!(path = %f.path.display(), error = %e, "cannot reopen the log file")
                }
            }
        }
    }
}

/// What [`init`] would refuse, checked without installing anything: the
/// log file opened for appending (created as `init` creates it), the
/// journal's socket reached.
pub fn check(opts: &DefaultOpts) -> Result<(), String> {
    if let Some(p) = log_path(opts) {
        LogFile::open(&p).map_err(|e| format!("cannot open log file {}: {e}", p.display()))?;
    }
    if opts.use_journal {
        Journal::connect(Path::new(JOURNAL_SOCKET))
            .map_err(|e| format!("use_journal: cannot reach {JOURNAL_SOCKET}: {e}"))?;
    }
    Ok(())
}

/// Install the subscriber. An unusable log file or journal is an error
/// (the caller says so and stops, as oslo.log would raise).
pub fn init(opts: &DefaultOpts) -> Result<Handle, String> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.is_empty() => tracing_subscriber::EnvFilter::builder().parse_lossy(v),
        _ => tracing_subscriber::EnvFilter::builder()
            .parse_lossy(directives(opts.debug, &opts.default_log_levels)),
    };
    let mut layers: Vec<Boxed> = Vec::new();
    let mut handle = Handle::default();
    let path = log_path(opts);
    if let Some(p) = &path {
        let f =
            LogFile::open(p).map_err(|e| format!("cannot open log file {}: {e}", p.display()))?;
        layers.push(layer(f.clone(), opts.use_json, false, true));
        handle.file = Some(f);
    }
    if opts.use_journal {
        let j = Journal::connect(Path::new(JOURNAL_SOCKET))
            .map_err(|e| format!("use_journal: cannot reach {JOURNAL_SOCKET}: {e}"))?;
        // The journal stamps entries itself.
        layers.push(layer(j, opts.use_json, false, false));
    }
    if opts.use_stderr {
        layers.push(layer(io::stderr, opts.use_json, false, true));
    } else if path.is_none() && !opts.use_journal {
        layers.push(layer(io::stdout, opts.use_json, !opts.use_json, true));
    }
    tracing_subscriber::registry()
        .with(layers)
        .with(filter)
        .try_init()
        .map_err(|e| e.to_string())?;
    Ok(handle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oslo_levels_become_filter_directives() {
        let d = directives(
            false,
            &[
                "kube=WARNING".into(),
                "amqp=WARN".into(),
                "oslo.messaging=INFO".into(),
                "sqlx=CRITICAL".into(),
                "bad".into(),
                "x=LOUD".into(),
            ],
        );
        assert_eq!(d, "info,kube=warn,amqp=warn,sqlx=error");
        assert_eq!(directives(true, &[]), "debug");
    }

    #[test]
    fn log_paths_as_oslo_log() {
        let mut o = common::config::Config::from_text("[DEFAULT]\n")
            .unwrap()
            .default;
        assert_eq!(log_path(&o), None);
        o.log_dir = Some("/var/log/magnum".into());
        assert_eq!(
            log_path(&o),
            Some(PathBuf::from("/var/log/magnum/magnum-conductor.log"))
        );
        o.log_file = Some("conductor.log".into());
        assert_eq!(
            log_path(&o),
            Some(PathBuf::from("/var/log/magnum/conductor.log"))
        );
        o.log_file = Some("/tmp/x.log".into());
        assert_eq!(log_path(&o), Some(PathBuf::from("/tmp/x.log")));
    }

    #[test]
    fn journal_entries_use_the_binary_message_field() {
        let e = journal_entry(Level::WARN, b"two\nlines\n");
        let head = b"PRIORITY=4\nSYSLOG_IDENTIFIER=magnum-conductor\nMESSAGE\n";
        assert!(e.starts_with(head));
        let rest = &e[head.len()..];
        assert_eq!(&rest[..8], &9u64.to_le_bytes());
        assert_eq!(&rest[8..], b"two\nlines\n");
    }

    #[test]
    fn a_journal_datagram_reaches_a_listening_socket() {
        let dir = std::env::temp_dir().join(format!("mc-journal-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("socket");
        let _ = std::fs::remove_file(&path);
        let server = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        let j = Journal::connect(&path).unwrap();
        {
            let mut w = j.make_writer();
            w.write_all(b"hello\n").unwrap();
        }
        let mut buf = [0u8; 256];
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &journal_entry(Level::INFO, b"hello\n")[..]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
