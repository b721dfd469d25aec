//! The fuzz targets' bodies, shared by the cargo-fuzz binaries
//! (`fuzz_targets/*.rs`) and the stable replay of the committed corpora
//! (`tests/it/fuzz_corpus.rs`): any input must give a value or an error.

use rpc_schema::envelope::{self, Compression};
use rpc_schema::{ConductorRequest, Incoming, methods};

const LIMIT: usize = 1 << 20;

/// An AMQP body as the conductor receives it, through everything that
/// decodes it before a handler runs: kombu decompression (the first byte
/// picks none, gzip, bz2 or lzma, as the `compression` header would), the
/// oslo envelope, the context, the dispatcher's checks and the typed
/// arguments (OVO objects included).
pub fn rpc_message(data: &[u8]) {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let mime = [
        "",
        "application/x-gzip",
        "application/x-bz2",
        "application/x-lzma",
    ][usize::from(selector % 4)];
    let plain;
    let body = if mime.is_empty() {
        body
    } else {
        let Some(c) = Compression::from_header(mime) else {
            return;
        };
        match c.decompress(body, LIMIT) {
            Ok(p) => {
                plain = p;
                &plain[..]
            }
            Err(_) => return,
        }
    };
    // The conductor reads a message straight from its text; the dict's way
    // must give the same request, or the same error.
    let direct = Incoming::from_body(body, LIMIT);
    let via_dict = envelope::decode(body, LIMIT).map(Incoming::from_message);
    assert_eq!(direct, via_dict, "the two decoders disagree");
    let Ok(incoming) = direct else {
        return;
    };
    let _ = incoming.is_call();
    let _ = incoming.method_name();
    if let Ok(req) =
        incoming.request(|name| methods::method(name).is_some() || name == methods::PING_METHOD)
        && let Ok(decoded) = ConductorRequest::decode(&req.method, &req.args)
    {
        let _ = decoded.method();
    }
}

/// magnum.conf text through the oslo.config reader and the typed options
/// (interpolation, lists, booleans, ranges, the transport URL and its query).
pub fn oslo_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = common::config::ini::parse("magnum.conf", text);
    let _ = common::config::Config::from_text(text);
}

/// `[DEFAULT] transport_url` and `[database] connection`.
pub fn urls(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(u) = common::transport_url::TransportUrl::parse(s) {
        let _ = format!("{u:?}");
    }
    if let Ok(u) = common::db::DbUrl::parse(s) {
        let _ = u.redacted();
    }
}

/// `sign_certificate`'s CSR path: a PEM from the network, parsed, checked
/// and signed by a cluster CA (one CA per process: key generation is not
/// what is fuzzed).
pub fn csr(data: &[u8]) {
    use common::certs::x509::{self, PrivateKey};
    use common::config::X509Opts;
    use std::sync::OnceLock;
    static CA: OnceLock<Option<(PrivateKey, X509Opts)>> = OnceLock::new();
    let Ok(pem) = std::str::from_utf8(data) else {
        return;
    };
    let ca = CA.get_or_init(|| {
        let opts = X509Opts::default();
        x509::generate_ca("fuzz-ca", &opts)
            .ok()
            .map(|(_, key)| (key, opts))
    });
    if let Some((key, opts)) = ca {
        let _ = x509::sign_csr(pem, "fuzz-ca", key, opts);
    }
}
