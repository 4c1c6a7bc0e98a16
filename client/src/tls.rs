//! Connection security beyond the URL: TLS files for `rediss://` (a CA bundle instead of the
//! system trust store, a client certificate and key for mutual TLS) and credentials kept out
//! of the URL (a URL shows up in `ps`, shell history and logs; an environment variable or a
//! file does not). TLS itself is rustls through the `redis` crate (`tokio-rustls-comp`).
//!
//! Use: [`crate::RedisTransport::with_options`] + [`crate::Elector::with_transport`].
//! A plain `rediss://host:port/` URL with [`crate::Elector::new`] already works when the
//! server's certificate chains to the system trust store.

use std::path::{Path, PathBuf};

use redis::{ConnectionAddr, IntoConnectionInfo};

use crate::error::LeaseError;

/// TLS files and credentials applied on top of a Redis URL. `Default` = none of them.
#[derive(Clone, Default)]
pub struct ConnectOptions {
    /// PEM file with the CA certificate(s) that sign the server's certificate. Without it,
    /// the system trust store is used.
    pub ca_cert_file: Option<PathBuf>,
    /// PEM client certificate (chain) for mutual TLS (`tls-auth-clients yes`); needs `key_file`.
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    pub key_file: Option<PathBuf>,
    /// ACL user name (overrides none in the URL: giving both is an error).
    pub username: Option<String>,
    /// Password (from an environment variable or a file; giving one in the URL too is an error).
    pub password: Option<String>,
}

impl std::fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("ca_cert_file", &self.ca_cert_file)
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .field("username", &self.username)
            // Never printed: logs and panics must not carry the secret.
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl ConnectOptions {
    pub fn has_tls_files(&self) -> bool {
        self.ca_cert_file.is_some() || self.cert_file.is_some() || self.key_file.is_some()
    }
}

fn config(msg: impl Into<String>) -> LeaseError {
    LeaseError::Config(msg.into())
}

fn read_pem(what: &str, path: &Path) -> Result<Vec<u8>, LeaseError> {
    let bytes = std::fs::read(path)
        .map_err(|e| config(format!("cannot read {what} {}: {e}", path.display())))?;
    // Checked here so a wrong file (DER, empty, a key where a certificate belongs) is a
    // configuration error at start, not an opaque handshake failure on every reconnect.
    let marker: &[u8] = if what == "TLS key file" {
        b"PRIVATE KEY-----"
    } else {
        b"-----BEGIN CERTIFICATE-----"
    };
    if !bytes.windows(marker.len()).any(|w| w == marker) {
        return Err(config(format!(
            "{what} {} holds no PEM {}",
            path.display(),
            if what == "TLS key file" {
                "private key"
            } else {
                "certificate"
            }
        )));
    }
    Ok(bytes)
}

/// A `redis::Client` for `url` with `opts` applied. Errors never echo the URL (it may carry
/// a password).
pub fn redis_client(url: &str, opts: &ConnectOptions) -> Result<redis::Client, LeaseError> {
    let mut info = url
        .into_connection_info()
        .map_err(|e| config(format!("invalid redis url: {e}")))?;
    if opts.username.is_some() || opts.password.is_some() {
        let current = info.redis_settings().clone();
        if opts.password.is_some() && current.password().is_some() {
            return Err(config(
                "a password is given both in the URL and separately (environment/file): keep one",
            ));
        }
        if opts.username.is_some() && current.username().is_some() {
            return Err(config(
                "a username is given both in the URL and separately: keep one",
            ));
        }
        let mut settings = current;
        if let Some(u) = &opts.username {
            settings = settings.set_username(u);
        }
        if let Some(p) = &opts.password {
            settings = settings.set_password(p);
        }
        info = info.set_redis_settings(settings);
    }
    // Why refuse: `#insecure` turns certificate verification off, and the client would then
    // retry forever with a protocol error (the crate's insecure feature is not built in).
    // Refusing it is a configuration error, found at start.
    if matches!(info.addr(), ConnectionAddr::TcpTls { insecure: true, .. }) {
        return Err(config(
            "rediss://...#insecure is refused: certificate verification cannot be turned off (use --tls-ca-cert-file with a private CA)",
        ));
    }
    if !opts.has_tls_files() {
        return redis::Client::open(info).map_err(|e| config(format!("invalid redis url: {e}")));
    }
    if !matches!(info.addr(), ConnectionAddr::TcpTls { .. }) {
        return Err(config("TLS files are given but the URL is not rediss://"));
    }
    let client_tls = match (&opts.cert_file, &opts.key_file) {
        (Some(c), Some(k)) => Some(redis::ClientTlsConfig {
            client_cert: read_pem("TLS certificate file", c)?,
            client_key: read_pem("TLS key file", k)?,
        }),
        (None, None) => None,
        _ => {
            return Err(config(
                "a TLS client certificate needs its key file, and the other way round",
            ))
        }
    };
    let root_cert = match &opts.ca_cert_file {
        Some(p) => Some(read_pem("TLS CA certificate file", p)?),
        None => None,
    };
    redis::Client::build_with_tls(
        info,
        redis::TlsCertificates {
            client_tls,
            root_cert,
        },
    )
    .map_err(|e| config(format!("TLS configuration: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_inconsistent_options_without_echoing_the_url() {
        let secret = "redis://u:hunter2@127.0.0.1:6379/";
        let both = ConnectOptions {
            password: Some("x".into()),
            ..Default::default()
        };
        let e = redis_client(secret, &both).unwrap_err().to_string();
        assert!(e.contains("both in the URL"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
        let tls_on_plain = ConnectOptions {
            ca_cert_file: Some("/nonexistent".into()),
            ..Default::default()
        };
        let e = redis_client("redis://127.0.0.1/", &tls_on_plain)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not rediss://"), "{e}");
        let e = redis_client("rediss://127.0.0.1/#insecure", &ConnectOptions::default())
            .expect_err("#insecure refused")
            .to_string();
        assert!(e.contains("#insecure is refused"), "{e}");
        let cert_only = ConnectOptions {
            cert_file: Some("/nonexistent".into()),
            ..Default::default()
        };
        let e = redis_client("rediss://127.0.0.1/", &cert_only)
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs its key"), "{e}");
        let missing = ConnectOptions {
            ca_cert_file: Some("/nonexistent/ca.pem".into()),
            ..Default::default()
        };
        let e = redis_client("rediss://127.0.0.1/", &missing)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cannot read TLS CA certificate file /nonexistent/ca.pem"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let not_pem = dir.path().join("ca.der");
        std::fs::write(&not_pem, [0x30u8, 0x82, 0x01]).unwrap();
        let der = ConnectOptions {
            ca_cert_file: Some(not_pem),
            ..Default::default()
        };
        let e = redis_client("rediss://127.0.0.1/", &der)
            .unwrap_err()
            .to_string();
        assert!(e.contains("holds no PEM certificate"), "{e}");
        let dbg = format!(
            "{:?}",
            ConnectOptions {
                password: Some("hunter2".into()),
                ..Default::default()
            }
        );
        assert!(!dbg.contains("hunter2"), "{dbg}");
    }

    #[test]
    fn a_separate_password_reaches_the_connection_settings() {
        let opts = ConnectOptions {
            username: Some("elector".into()),
            password: Some("s3cret".into()),
            ..Default::default()
        };
        let c = redis_client("redis://127.0.0.1:6379/", &opts).unwrap();
        let s = c.get_connection_info().redis_settings();
        assert_eq!(
            (s.username(), s.password()),
            (Some("elector"), Some("s3cret"))
        );
    }
}
