//! Transport settings: the unix socket (`-s`, `-a`) and TLS (`-Z` and
//! memcached's `-o ssl_*` options), with memcached's meanings:
//!
//! * `-s PATH` serves on the unix socket only (no TCP, no UDP); `-a` is the
//!   socket file's access mask in octal, default 0700.
//! * `-Z` puts TLS on every TCP listener but those `-l` marks `notls:`
//!   (`btls:` asks for no client certificate, `mtls:` requires one; see
//!   listen.rs). `ssl_chain_cert` is required;
//!   `ssl_key` defaults to the chain file (a key "part of the chain");
//!   `ssl_verify_mode` is 0 none, 1 request (a certificate, if sent, must
//!   verify), 2 require, 3 once (as 2: TLS 1.3 has no renegotiation to
//!   verify again on); `ssl_min_version` is 2 (tlsv1.2, the default) or 3
//!   (tlsv1.3): rustls does not offer TLS 1.0 or 1.1.

use std::path::{Path, PathBuf};

use super::listen::{parse_listen, ListenRules, ListenSpec};
use super::value::{self, Setting, Spelled};
use super::{Cli, Config, ConfigError};

/// `ssl_min_version`: the oldest TLS version accepted. memcached numbers
/// them (2 is TLS 1.2); `stats settings` prints the name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

impl Setting for TlsVersion {
    fn parse_text(v: &str) -> Result<Self, ConfigError> {
        match v {
            "2" | "tlsv1.2" => Ok(TlsVersion::Tls12),
            "3" | "tlsv1.3" => Ok(TlsVersion::Tls13),
            "0" | "1" | "tlsv1.0" | "tlsv1.1" => Err(ConfigError(format!(
                "ssl_min_version {v}: TLS 1.0 and 1.1 are not offered (recalld's TLS, rustls, supports 1.2 and 1.3): use 2 (tlsv1.2) or 3 (tlsv1.3)"
            ))),
            _ => Err(ConfigError(format!("Invalid ssl_min_version {v:?}: 2 (tlsv1.2) or 3 (tlsv1.3)"))),
        }
    }

    fn text(&self) -> String {
        match self {
            TlsVersion::Tls12 => "tlsv1.2",
            TlsVersion::Tls13 => "tlsv1.3",
        }
        .into()
    }
}

impl Config {
    /// `-s`, `-a` and `-Z` from the command line.
    pub(super) fn apply_transport_flags(&mut self, cli: &Cli) -> Result<(), ConfigError> {
        if let Some(p) = &cli.unix_socket {
            self.unix_socket = value::path(p.clone());
        }
        if let Some(m) = &cli.unix_mask {
            self.unix_mask = Spelled::parse(m)?;
        }
        self.ssl_enabled |= cli.enable_ssl;
        Ok(())
    }

    /// One `-o ssl_*` option; `Ok(false)` if `k` is not one.
    pub(super) fn apply_ssl_option(
        &mut self,
        k: &str,
        v: &str,
        warnings: &mut Vec<String>,
    ) -> Result<bool, ConfigError> {
        let path = || {
            if v.is_empty() {
                Err(ConfigError(format!("Missing {k} argument")))
            } else {
                Ok(Some(PathBuf::from(v)))
            }
        };
        match k {
            "ssl_chain_cert" => self.ssl_chain_cert = path()?,
            "ssl_key" => self.ssl_key = path()?,
            "ssl_ca_cert" => self.ssl_ca_cert = path()?,
            "ssl_verify_mode" => {
                self.ssl_verify_mode = v.parse().ok().filter(|m| *m <= 3).ok_or_else(|| {
                    ConfigError(format!(
                        "Invalid ssl_verify_mode {v:?}: 0 (none), 1 (request), 2 (require) or 3 (once)"
                    ))
                })?
            }
            // `-o` keeps the name, which `stats settings` shows as memcached does.
            "ssl_min_version" => self.ssl_min_version = Spelled::new(TlsVersion::parse_text(v)?),
            "ssl_session_cache" => self.ssl_session_cache = true,
            // PEM (1) is the only key format recalld reads.
            "ssl_keyformat" if v == "1" => {}
            "ssl_keyformat" => {
                return Err(ConfigError(format!("ssl_keyformat {v:?}: recalld reads PEM keys only (ssl_keyformat=1)")))
            }
            // Refused rather than ignored: the operator asked for a
            // restriction recalld would not apply.
            "ssl_ciphers" => {
                return Err(ConfigError(
                    "ssl_ciphers is not supported: recalld offers rustls's cipher suites (TLS 1.3 AES-GCM and \
                     ChaCha20-Poly1305, TLS 1.2 ECDHE with the same); use ssl_min_version=3 to allow TLS 1.3 only"
                        .into(),
                ))
            }
            "ssl_wbuf_size" | "ssl_kernel_tls" => warnings.push(format!("-o {k}: accepted, no effect in recalld")),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Check the transport settings (the certificate files are read, and
    /// their errors reported, when the server starts).
    pub(super) fn validate_transport(&self) -> Result<(), ConfigError> {
        self.listeners()?;
        if self.ssl_verify_mode > 3 {
            return Err(ConfigError(format!(
                "Invalid ssl_verify_mode {}: 0 (none), 1 (request), 2 (require) or 3 (once)",
                self.ssl_verify_mode
            )));
        }
        if self.ssl_enabled {
            if self.ssl_chain_cert.is_none() {
                return Err(ConfigError(
                    "TLS (-Z) needs a certificate: -o ssl_chain_cert=FILE (and ssl_key=FILE unless the key is in it)"
                        .into(),
                ));
            }
            if self.ssl_verify_mode > 0 && self.ssl_ca_cert.is_none() {
                return Err(ConfigError(format!(
                    "ssl_verify_mode {} checks client certificates: it needs -o ssl_ca_cert=FILE (the CAs they must chain to)",
                    self.ssl_verify_mode
                )));
            }
        }
        Ok(())
    }

    /// What to tell the operator about a transport setting that does less
    /// than they may think.
    pub(super) fn transport_warnings(&self) -> Vec<String> {
        let mut w = self.listeners().map(|(_, w)| w).unwrap_or_default();
        if self.ssl_enabled && self.unix_socket.is_some() {
            w.push("-Z: TLS is for TCP; with -s recalld serves only the unix socket, without TLS".into());
        }
        w
    }

    /// The TCP listeners `-l` and `-p` name (none with `-s`: memcached
    /// then serves the unix socket alone; none with `-p 0`, where memcached
    /// binds no TCP socket at all, whatever ports `-l` names), and
    /// memcached's warnings about them. See listen.rs for the syntax.
    pub fn listeners(&self) -> Result<(Vec<ListenSpec>, Vec<String>), ConfigError> {
        let (specs, warnings) = self.listen_entries()?;
        Ok((if self.port.is_off() { Vec::new() } else { specs }, warnings))
    }

    /// Every `-l` entry, with `-p` as the port of those without one (0
    /// when `-p` is off or any): where UDP listens when there is no TCP
    /// listener to follow.
    pub fn listen_entries(&self) -> Result<(Vec<ListenSpec>, Vec<String>), ConfigError> {
        if self.unix_socket.is_some() {
            return Ok((Vec::new(), Vec::new()));
        }
        let rules = ListenRules {
            default_port: self.port.bind().unwrap_or(0),
            ssl: self.ssl_enabled,
            auth_file: self.auth_file.is_some(),
            sasl: self.sasl,
        };
        let (specs, warnings) = parse_listen(&self.listen, rules)?;
        if self.ssl_enabled && self.ssl_ca_cert.is_none() && specs.iter().any(|s| s.tls == super::ListenTls::Peer) {
            return Err(ConfigError(
                "mtls: listeners check client certificates: they need -o ssl_ca_cert=FILE (the CAs they must chain to)"
                    .into(),
            ));
        }
        Ok((specs, warnings))
    }

    /// `stats settings`' unix socket lines, as memcached prints them.
    pub(super) fn unix_settings(&self) -> Vec<(String, String)> {
        vec![
            ("domain_socket".into(), shown(&self.unix_socket, "NULL")),
            ("umask".into(), format!("{:o}", self.unix_mask.get().bits())),
        ]
    }

    /// `stats settings`' TLS lines, as memcached prints them (an unset
    /// chain or key is C's "(null)" there, an unset CA "NULL").
    pub(super) fn ssl_settings(&self) -> Vec<(String, String)> {
        let b = |v: bool| if v { "yes" } else { "no" }.to_string();
        vec![
            ("ssl_enabled".into(), b(self.ssl_enabled)),
            ("ssl_chain_cert".into(), shown(&self.ssl_chain_cert, "(null)")),
            ("ssl_key".into(), shown(&self.ssl_key, "(null)")),
            // memcached prints OpenSSL's flags for the mode: PEER (1),
            // FAIL_IF_NO_PEER_CERT (2), CLIENT_ONCE (4).
            ("ssl_verify_mode".into(), [0, 1, 3, 7][usize::from(self.ssl_verify_mode.min(3))].to_string()),
            ("ssl_keyformat".into(), "1".into()),
            ("ssl_ciphers".into(), "NULL".into()),
            ("ssl_ca_cert".into(), shown(&self.ssl_ca_cert, "NULL")),
            // rustls writes at most one 16 KiB record per write, as
            // memcached's default output buffer does.
            ("ssl_wbuf_size".into(), "16384".into()),
            ("ssl_session_cache".into(), b(self.ssl_session_cache)),
            ("ssl_kernel_tls".into(), "no".into()),
            ("ssl_min_version".into(), self.ssl_min_version.as_text().to_string()),
        ]
    }
}

/// An optional path as `stats settings` shows it: C's spelling of a null
/// pointer when unset.
pub(super) fn shown(p: &Option<PathBuf>, none: &str) -> String {
    p.as_deref().map_or_else(|| none.to_string(), |p: &Path| p.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::super::{Cli, Config, TlsVersion};
    use clap::Parser;

    fn cfg(args: &[&str]) -> Result<Config, String> {
        let cli = Cli::try_parse_from(std::iter::once("recalld").chain(args.iter().copied())).unwrap();
        Config::from_cli(&cli).map(|(c, _)| c).map_err(|e| e.0)
    }

    fn setting(c: &Config, name: &str) -> String {
        c.stats_settings().into_iter().find(|(k, _)| k == name).map(|(_, v)| v).unwrap_or_default()
    }

    #[test]
    fn unix_socket_and_mask() {
        let c = cfg(&[]).unwrap();
        assert_eq!((setting(&c, "domain_socket"), setting(&c, "umask")), ("NULL".into(), "700".into()));
        let c = cfg(&["-s", "/tmp/r.sock", "-a", "0755"]).unwrap();
        assert_eq!(c.unix_mask.get().bits(), 0o755);
        assert_eq!((setting(&c, "domain_socket"), setting(&c, "umask")), ("/tmp/r.sock".into(), "755".into()));
        for bad in ["0800", "rw", "1777"] {
            let e = cfg(&["-s", "/tmp/r.sock", "-a", bad]).unwrap_err();
            assert!(e.contains("-a") && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn tls_options_with_memcached_meanings() {
        let c = cfg(&[]).unwrap();
        assert_eq!(setting(&c, "ssl_enabled"), "no");
        assert_eq!(setting(&c, "ssl_chain_cert"), "(null)");
        assert_eq!(setting(&c, "ssl_ca_cert"), "NULL");
        assert_eq!(setting(&c, "ssl_min_version"), "tlsv1.2");
        let c = cfg(&[
            "-Z",
            "-o",
            "ssl_chain_cert=/c.pem,ssl_key=/k.pem,ssl_ca_cert=/ca.pem,ssl_verify_mode=2,ssl_min_version=3,ssl_session_cache",
        ])
        .unwrap();
        assert!(c.ssl_enabled && c.ssl_session_cache);
        assert_eq!((c.ssl_verify_mode, c.ssl_min_version.get()), (2, TlsVersion::Tls13));
        assert_eq!(setting(&c, "ssl_key"), "/k.pem");
        // As memcached prints it: OpenSSL's PEER | FAIL_IF_NO_PEER_CERT.
        assert_eq!(setting(&c, "ssl_verify_mode"), "3");
        assert_eq!(cfg(&["-o", "ssl_min_version=tlsv1.2"]).unwrap().ssl_min_version.get(), TlsVersion::Tls12);
    }

    #[test]
    fn tls_settings_recalld_cannot_honour_are_refused() {
        let e = cfg(&["-Z"]).unwrap_err();
        assert!(e.contains("ssl_chain_cert"), "{e}");
        let e = cfg(&["-Z", "-o", "ssl_chain_cert=/c.pem,ssl_verify_mode=2"]).unwrap_err();
        assert!(e.contains("ssl_ca_cert"), "{e}");
        let e = cfg(&["-Z", "-o", "ssl_chain_cert=/c.pem", "-l", "127.0.0.1,mtls:127.0.0.2"]).unwrap_err();
        assert!(e.starts_with("mtls:") && e.contains("ssl_ca_cert"), "{e}");
        assert!(cfg(&["-Z", "-o", "ssl_chain_cert=/c.pem,ssl_ca_cert=/ca.pem", "-l", "mtls:127.0.0.2"]).is_ok());
        for (opt, word) in [
            ("ssl_min_version=1", "not offered"),
            ("ssl_min_version=9", "Invalid ssl_min_version"),
            ("ssl_verify_mode=4", "Invalid ssl_verify_mode"),
            ("ssl_ciphers=HIGH", "ssl_ciphers"),
            ("ssl_keyformat=2", "PEM"),
            ("ssl_key=", "Missing ssl_key"),
        ] {
            let e = cfg(&["-o", opt]).unwrap_err();
            assert!(e.contains(word), "{opt}: {e}");
        }
    }
}
