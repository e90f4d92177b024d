//! Loading the credentials `-S` and `-Y` check against, once at start.
//!
//! Both files have one format, memcached's: `user:password` per line (see
//! `recall_engine::auth::Credentials::parse`). `-Y` names its file;
//! `-S` reads the file named by `MEMCACHED_SASL_PWDB`, as a memcached built
//! with its own SASL password database does. recalld does not read Cyrus
//! sasldb, so `-S` without that variable refuses to start rather than run
//! with nobody able to log in. Errors name the file; no password is ever
//! printed.

use std::path::Path;
use std::sync::Arc;

use recall_engine::auth::{AuthConfig, CredentialCell, Credentials};

use crate::config::Config;

/// The environment variable memcached reads for its SASL password file.
pub const SASL_PWDB_ENV: &str = "MEMCACHED_SASL_PWDB";

/// The credentials the configuration asks for. `sasl_pwdb` is the value of
/// `MEMCACHED_SASL_PWDB` (passed in so tests need not set the process's
/// environment).
pub fn load(cfg: &Config, sasl_pwdb: Option<&Path>) -> Result<AuthConfig, String> {
    let mut auth = AuthConfig::default();
    if cfg.sasl {
        let path = sasl_pwdb.filter(|p| !p.as_os_str().is_empty()).ok_or_else(|| {
            format!(
                "-S: set {SASL_PWDB_ENV} to a file of user:password lines (recalld checks SASL PLAIN \
                 against that file; it does not read Cyrus sasldb)"
            )
        })?;
        auth.sasl = Some(Arc::new(read("SASL password file", path)?));
    }
    if let Some(file) = &cfg.auth_file {
        auth.ascii = Some(Arc::new(CredentialCell::new(read("auth file", file)?)));
    }
    Ok(auth)
}

/// SIGHUP: read the `-Y` file again, as memcached does. A file that cannot
/// be read or parsed leaves the users already loaded in place (memcached
/// keeps them too), and the error names the file. `None` without `-Y`.
pub fn reload_auth_file(cfg: &Config, auth: &AuthConfig) -> Option<Result<(), String>> {
    let cell = auth.ascii.as_deref()?;
    Some(read("auth file", cfg.auth_file.as_deref()?).map(|creds| cell.replace(creds)))
}

fn read(what: &str, path: &Path) -> Result<Credentials, String> {
    let text = std::fs::read(path).map_err(|e| format!("cannot read {what} {}: {e}", path.display()))?;
    let creds = Credentials::parse(&text).map_err(|e| format!("{what} {}: {e}", path.display()))?;
    if creds.is_empty() {
        return Err(format!("{what} {}: no user:password entries, so nobody could log in", path.display()));
    }
    Ok(creds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_file() {
        let dir = std::env::temp_dir().join(format!("recalld-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good");
        std::fs::write(&good, "u:p\n").unwrap();
        let bad = dir.join("bad");
        std::fs::write(&bad, "u:p\nno colon here\n").unwrap();
        let empty = dir.join("empty");
        std::fs::write(&empty, "\n").unwrap();
        let missing = dir.join("missing");
        let ascii = |f: &Path| Config { auth_file: Some(f.to_path_buf()), ..Config::default() };
        let e = load(&ascii(&bad), None).unwrap_err();
        assert!(e.contains(&bad.display().to_string()) && e.contains("line 2"), "{e}");
        let e = load(&ascii(&missing), None).unwrap_err();
        assert!(e.starts_with("cannot read auth file") && e.contains(&missing.display().to_string()), "{e}");
        let e = load(&ascii(&empty), None).unwrap_err();
        assert!(e.contains("nobody could log in"), "{e}");
        let a = load(&ascii(&good), None).unwrap();
        assert!(a.ascii.as_ref().unwrap().current().check(b"u", b"p") && a.sasl.is_none());

        // SIGHUP: a good file replaces the users; a bad one keeps them and
        // names the file.
        std::fs::write(&good, "u:q\n").unwrap();
        assert_eq!(reload_auth_file(&ascii(&good), &a), Some(Ok(())));
        let users = a.ascii.as_ref().unwrap();
        assert!(users.current().check(b"u", b"q") && !users.current().check(b"u", b"p"));
        let e = reload_auth_file(&ascii(&bad), &a).unwrap().unwrap_err();
        assert!(e.contains(&bad.display().to_string()), "{e}");
        assert!(users.current().check(b"u", b"q"), "a failed reload keeps the users loaded");
        assert_eq!(reload_auth_file(&Config::default(), &AuthConfig::default()), None);

        let sasl = Config { sasl: true, ..Config::default() };
        assert!(load(&sasl, None).unwrap_err().contains(SASL_PWDB_ENV));
        let e = load(&sasl, Some(&bad)).unwrap_err();
        assert!(e.starts_with("SASL password file") && e.contains(&bad.display().to_string()), "{e}");
        assert!(load(&sasl, Some(&good)).unwrap().sasl.unwrap().check(b"u", b"q"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
