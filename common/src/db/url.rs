//! `[database] connection` as deployers write it for SQLAlchemy + PyMySQL
//! (`mysql+pymysql://user:pw@host:3306/magnum?charset=utf8&ssl_ca=...`),
//! translated into what sqlx needs.
//!
//! sqlx's own URL parser silently ignores parameters it does not know, which
//! would turn PyMySQL's `ssl_ca`/`ssl_verify_cert` into an unverified
//! connection. So the URL is parsed here, every parameter is either mapped,
//! reported as ignored (non-TLS ones, logged by the caller) or refused (any
//! TLS parameter we cannot honour).
//!
//! TLS follows PyMySQL's intent: `ssl_ca` alone verifies the chain *and* the
//! host name; `ssl_verify_cert=true` verifies the chain; `ssl_verify_identity`
//! adds the host name; `ssl_check_hostname=false` drops it; `ssl_verify_cert=
//! false` encrypts without verifying. Where SQLAlchemy + PyMySQL 1.2 combine
//! badly (with `ssl_ca` *and* `ssl_verify_cert`, PyMySQL rebuilds its context
//! without the CA file), we keep the operator's CA: stricter, never weaker.

use std::fmt;

use percent_encoding::percent_decode_str;

use crate::secret::Secret;

/// How the connection is protected, in sqlx's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    Disabled,
    /// TLS if the server offers it, unverified (PyMySQL's default too).
    Preferred,
    /// TLS required, certificate not verified.
    Required,
    VerifyCa,
    VerifyIdentity,
}

/// A parsed `[database] connection`.
#[derive(Clone, PartialEq)]
pub struct DbUrl {
    pub driver: String,
    pub user: Option<String>,
    pub password: Secret,
    pub host: Option<String>,
    pub port: Option<u16>,
    pub database: Option<String>,
    pub socket: Option<String>,
    pub charset: Option<String>,
    pub tls: TlsMode,
    pub ssl_ca: Option<String>,
    pub ssl_cert: Option<String>,
    pub ssl_key: Option<String>,
    /// Query parameters with no meaning for us (logged, not fatal).
    pub ignored: Vec<String>,
}

impl fmt::Debug for DbUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DbUrlError {
    #[error("[database] connection is not set")]
    Missing,
    #[error("[database] connection: {0}")]
    Invalid(String),
    #[error(
        "[database] connection: driver {0:?} is not supported; use mysql+pymysql:// (MariaDB or MySQL)"
    )]
    Driver(String),
    #[error(
        "[database] connection: TLS parameter {0:?} is not supported; refusing to connect without it"
    )]
    UnsupportedTls(String),
}

/// PyMySQL's reading of a verify flag.
fn flag(name: &str, v: &str) -> Result<bool, DbUrlError> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" | "required" => Ok(true),
        "0" | "false" | "no" | "off" | "none" => Ok(false),
        _ => Err(DbUrlError::Invalid(format!(
            "{name}={v:?} is not a boolean"
        ))),
    }
}

fn decode(s: &str) -> String {
    percent_decode_str(s).decode_utf8_lossy().into_owned()
}

impl DbUrl {
    pub fn parse(url: &str) -> Result<DbUrl, DbUrlError> {
        let url = url.trim();
        if url.is_empty() {
            return Err(DbUrlError::Missing);
        }
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| DbUrlError::Invalid("expected <driver>://...".into()))?;
        let dialect = scheme.split('+').next().unwrap_or_default();
        if !dialect.eq_ignore_ascii_case("mysql") && !dialect.eq_ignore_ascii_case("mariadb") {
            return Err(DbUrlError::Driver(scheme.to_string()));
        }
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (authority, database) = match rest.split_once('/') {
            Some((a, d)) => (a, (!d.is_empty()).then(|| d.to_string())),
            None => (rest, None),
        };
        // user[:password]@host — the password may not hold a raw '@' (as in
        // SQLAlchemy), so the last '@' splits.
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            Some(u) => match u.split_once(':') {
                Some((n, p)) => (Some(decode(n)), Secret::new(decode(p))),
                None => (Some(decode(u)), Secret::default()),
            },
            None => (None, Secret::default()),
        };
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| DbUrlError::Invalid("unclosed '[' in host".into()))?;
            (Some(h.to_string()), after.strip_prefix(':'))
        } else {
            match hostport.split_once(':') {
                Some((h, p)) => ((!h.is_empty()).then(|| h.to_string()), Some(p)),
                None => ((!hostport.is_empty()).then(|| hostport.to_string()), None),
            }
        };
        let port = match port.filter(|p| !p.is_empty()) {
            Some(p) => Some(
                p.parse::<u16>()
                    .map_err(|_| DbUrlError::Invalid(format!("port {p:?} is not a number")))?,
            ),
            None => None,
        };

        let mut out = DbUrl {
            driver: scheme.to_string(),
            user,
            password,
            host,
            port,
            database,
            socket: None,
            charset: None,
            tls: TlsMode::Preferred,
            ssl_ca: None,
            ssl_cert: None,
            ssl_key: None,
            ignored: Vec::new(),
        };
        let mut verify_cert = None;
        let mut verify_identity = None;
        let mut check_hostname = None;
        let mut disabled = false;
        for pair in query
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
        {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let (k, v) = (decode(&k.replace('+', " ")), decode(&v.replace('+', " ")));
            match k.as_str() {
                "charset" => out.charset = Some(v),
                "unix_socket" => out.socket = Some(v),
                "ssl_ca" => out.ssl_ca = Some(v),
                "ssl_cert" => out.ssl_cert = Some(v),
                "ssl_key" => out.ssl_key = Some(v),
                "ssl_verify_cert" => verify_cert = Some(flag(&k, &v)?),
                "ssl_verify_identity" => verify_identity = Some(flag(&k, &v)?),
                "ssl_check_hostname" => check_hostname = Some(flag(&k, &v)?),
                "ssl_disabled" => disabled = flag(&k, &v)?,
                _ if k.starts_with("ssl") || k == "tls" => {
                    return Err(DbUrlError::UnsupportedTls(k));
                }
                _ => out.ignored.push(k),
            }
        }
        let any_tls = out.ssl_ca.is_some()
            || out.ssl_cert.is_some()
            || out.ssl_key.is_some()
            || verify_cert.is_some()
            || verify_identity.is_some()
            || check_hostname.is_some();
        out.tls = if disabled {
            if any_tls {
                return Err(DbUrlError::Invalid(
                    "ssl_disabled=true contradicts the other ssl_* parameters".into(),
                ));
            }
            TlsMode::Disabled
        } else if !any_tls {
            TlsMode::Preferred
        } else if verify_identity == Some(true) {
            TlsMode::VerifyIdentity
        } else {
            match verify_cert {
                Some(false) => TlsMode::Required,
                Some(true) if check_hostname == Some(true) => TlsMode::VerifyIdentity,
                Some(true) => TlsMode::VerifyCa,
                None if out.ssl_ca.is_some() && check_hostname.unwrap_or(true) => {
                    TlsMode::VerifyIdentity
                }
                None if out.ssl_ca.is_some() => TlsMode::VerifyCa,
                None => TlsMode::Required,
            }
        };
        if out.ssl_cert.is_some() != out.ssl_key.is_some() && out.ssl_key.is_some() {
            return Err(DbUrlError::Invalid("ssl_key given without ssl_cert".into()));
        }
        Ok(out)
    }

    /// The URL with the password hidden, for logs and errors.
    pub fn redacted(&self) -> String {
        let auth = match &self.user {
            Some(u) if self.password.is_empty() => format!("{u}@"),
            Some(u) => format!("{u}:***@"),
            None => String::new(),
        };
        let host = self.host.as_deref().unwrap_or("");
        let port = self.port.map(|p| format!(":{p}")).unwrap_or_default();
        format!(
            "{}://{auth}{host}{port}/{} (tls {:?})",
            self.driver,
            self.database.as_deref().unwrap_or(""),
            self.tls
        )
    }

    /// sqlx connect options for this URL.
    pub fn connect_options(&self) -> sqlx::mysql::MySqlConnectOptions {
        use sqlx::mysql::{MySqlConnectOptions, MySqlSslMode};
        let mut o = MySqlConnectOptions::new();
        if let Some(h) = &self.host {
            o = o.host(h);
        }
        if let Some(p) = self.port {
            o = o.port(p);
        }
        if let Some(s) = &self.socket {
            o = o.socket(s);
        }
        if let Some(u) = &self.user {
            o = o.username(u);
        }
        if !self.password.is_empty() {
            o = o.password(self.password.expose());
        }
        if let Some(d) = &self.database {
            o = o.database(d);
        }
        // Magnum writes str values that may be 4-byte UTF-8 into utf8mb4
        // tables; "utf8" in a PyMySQL URL means the same intent.
        let charset = match self.charset.as_deref() {
            None | Some("utf8") | Some("utf8mb3") => "utf8mb4",
            Some(c) => c,
        };
        o = o.charset(charset);
        o = o.ssl_mode(match self.tls {
            TlsMode::Disabled => MySqlSslMode::Disabled,
            TlsMode::Preferred => MySqlSslMode::Preferred,
            TlsMode::Required => MySqlSslMode::Required,
            TlsMode::VerifyCa => MySqlSslMode::VerifyCa,
            TlsMode::VerifyIdentity => MySqlSslMode::VerifyIdentity,
        });
        if let Some(ca) = &self.ssl_ca {
            o = o.ssl_ca(ca);
        }
        if let Some(c) = &self.ssl_cert {
            o = o.ssl_client_cert(c);
        }
        if let Some(k) = &self.ssl_key {
            o = o.ssl_client_key(k);
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls(q: &str) -> TlsMode {
        DbUrl::parse(&format!("mysql+pymysql://u:p@db:3306/magnum{q}"))
            .unwrap()
            .tls
    }

    #[test]
    fn parses_what_openstack_ansible_writes() {
        let u = DbUrl::parse(
            "mysql+pymysql://magnum:p%40ss%3Aw%23rd@10.0.0.5:3306/magnum_service?charset=utf8&ssl_verify_cert=true&ssl_ca=/etc/ssl/ca.pem&read_timeout=30",
        )
        .unwrap();
        assert_eq!(u.user.as_deref(), Some("magnum"));
        assert_eq!(u.password.expose(), "p@ss:w#rd");
        assert_eq!(u.host.as_deref(), Some("10.0.0.5"));
        assert_eq!(u.port, Some(3306));
        assert_eq!(u.database.as_deref(), Some("magnum_service"));
        assert_eq!(u.charset.as_deref(), Some("utf8"));
        assert_eq!(u.tls, TlsMode::VerifyCa);
        assert_eq!(u.ssl_ca.as_deref(), Some("/etc/ssl/ca.pem"));
        assert_eq!(u.ignored, vec!["read_timeout".to_string()]);
        assert!(!format!("{u:?}").contains("p@ss"));
    }

    #[test]
    fn tls_follows_pymysql_intent() {
        assert_eq!(tls(""), TlsMode::Preferred);
        assert_eq!(tls("?ssl_ca=/ca"), TlsMode::VerifyIdentity);
        assert_eq!(
            tls("?ssl_ca=/ca&ssl_check_hostname=false"),
            TlsMode::VerifyCa
        );
        assert_eq!(tls("?ssl_ca=/ca&ssl_verify_cert=true"), TlsMode::VerifyCa);
        assert_eq!(
            tls("?ssl_ca=/ca&ssl_verify_identity=true"),
            TlsMode::VerifyIdentity
        );
        assert_eq!(tls("?ssl_ca=/ca&ssl_verify_cert=false"), TlsMode::Required);
        assert_eq!(tls("?ssl_verify_cert=true"), TlsMode::VerifyCa);
        assert_eq!(tls("?ssl_cert=/c&ssl_key=/k"), TlsMode::Required);
        assert_eq!(tls("?ssl_disabled=true"), TlsMode::Disabled);
        assert_eq!(tls("?ssl_disabled=false"), TlsMode::Preferred);
    }

    #[test]
    fn tls_parameters_are_never_dropped() {
        for q in [
            "?ssl_capath=/etc/ssl",
            "?ssl_cipher=AES",
            "?ssl_key_password=x",
            "?ssl_mode=REQUIRED",
        ] {
            assert!(
                matches!(
                    DbUrl::parse(&format!("mysql+pymysql://u@h/m{q}")),
                    Err(DbUrlError::UnsupportedTls(_))
                ),
                "{q}"
            );
        }
        assert!(DbUrl::parse("mysql+pymysql://u@h/m?ssl_verify_cert=maybe").is_err());
        assert!(DbUrl::parse("mysql+pymysql://u@h/m?ssl_disabled=1&ssl_ca=/x").is_err());
    }

    #[test]
    fn sockets_ipv6_and_drivers() {
        let u =
            DbUrl::parse("mysql+pymysql://magnum:pw@/magnum?unix_socket=/run/mysqld/mysqld.sock")
                .unwrap();
        assert_eq!(u.host, None);
        assert_eq!(u.socket.as_deref(), Some("/run/mysqld/mysqld.sock"));
        let u = DbUrl::parse("mysql://root@[::1]:3307/magnum").unwrap();
        assert_eq!((u.host.as_deref(), u.port), (Some("::1"), Some(3307)));
        assert!(matches!(
            DbUrl::parse("sqlite:////var/lib/magnum.sqlite"),
            Err(DbUrlError::Driver(_))
        ));
        assert_eq!(DbUrl::parse("  "), Err(DbUrlError::Missing));
        assert!(DbUrl::parse("mysql://u@h:port/m").is_err());
    }
}
