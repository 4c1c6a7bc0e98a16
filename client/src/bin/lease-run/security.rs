//! `lease-run`'s TLS and credential options turned into [`ConnectOptions`]. The password
//! never comes from the command line (visible to every user in `ps`): it comes from the
//! URL (discouraged), the environment variable [`PASSWORD_ENV`], or a file.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use redis_lease_client::ConnectOptions;
use tracing::warn;

/// Environment variable holding the Redis password. Removed from CMD's environment: CMD
/// gets its own credentials if it needs Redis, never the elector's.
pub const PASSWORD_ENV: &str = "LEASE_REDIS_PASSWORD";

pub struct Flags {
    pub ca_cert_file: Option<PathBuf>,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    pub username: Option<String>,
    pub password_file: Option<PathBuf>,
}

pub fn connect_options(f: Flags) -> Result<ConnectOptions, String> {
    let from_env = std::env::var_os(PASSWORD_ENV);
    let password = match (&f.password_file, from_env) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "both {PASSWORD_ENV} and --redis-password-file are set: keep one"
            ))
        }
        (Some(p), None) => Some(read_password_file(p)?),
        (None, Some(v)) => Some(
            v.into_string()
                .map_err(|_| format!("{PASSWORD_ENV} is not valid UTF-8"))?,
        ),
        (None, None) => None,
    };
    if password.as_deref() == Some("") {
        return Err("the Redis password is empty".into());
    }
    Ok(ConnectOptions {
        ca_cert_file: f.ca_cert_file,
        cert_file: f.cert_file,
        key_file: f.key_file,
        username: f.username,
        password,
    })
}

fn read_password_file(p: &PathBuf) -> Result<String, String> {
    let text = std::fs::read_to_string(p)
        .map_err(|e| format!("cannot read --redis-password-file {}: {e}", p.display()))?;
    if let Ok(m) = std::fs::metadata(p) {
        if m.permissions().mode() & 0o077 != 0 {
            warn!(file = %p.display(), "the password file is readable by group or others (chmod 600 it)");
        }
    }
    // One line; the newline an editor or `echo` adds is not part of the password.
    let pw = text
        .strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(&text);
    Ok(pw.to_string())
}
