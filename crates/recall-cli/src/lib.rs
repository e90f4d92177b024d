//! # recall-cli
//!
//! The `recall` binary (`src/main.rs`, its cluster administration in
//! `src/cluster.rs`), and, as the library, the transport flags every
//! command-line tool over recall-client shares (`recall`, `recall-fs`), so
//! they are spelled and checked once.
//!
//! Names follow memcached's where it has one: `-s`/`--unix` for a unix
//! socket as `memcached -s`, `--auth-file` as `memcached -Y`'s long name.
//! The TLS flags are named after the files they take.

use std::path::PathBuf;

use recall_client::transport::{Dialer, Login, TlsOptions};
use recall_client::{ClientBuilder, Result};

#[derive(clap::Args, Debug, Clone, Default)]
pub struct TransportArgs {
    /// A server on a unix socket (recalld -s PATH); the same as a server
    /// given as unix:PATH or /PATH. Repeatable.
    #[arg(long = "unix", value_name = "PATH", global = true)]
    pub unix: Vec<PathBuf>,

    /// Connect over TLS (recalld -Z), trusting the CA certificates in
    /// this PEM file. Unix sockets stay plain.
    #[arg(long = "tls-ca", value_name = "FILE", global = true)]
    pub tls_ca: Option<PathBuf>,

    /// Client certificate chain (PEM) for servers that ask for one
    /// (ssl_verify_mode, ssl_ca_cert); needs --tls-key.
    #[arg(long = "tls-cert", value_name = "FILE", requires = "tls_key", global = true)]
    pub tls_cert: Option<PathBuf>,

    /// Private key (PEM) of --tls-cert.
    #[arg(long = "tls-key", value_name = "FILE", requires = "tls_cert", global = true)]
    pub tls_key: Option<PathBuf>,

    /// The name the server's certificate must carry (default: each
    /// server's host).
    #[arg(long = "tls-server-name", value_name = "NAME", global = true)]
    pub tls_server_name: Option<String>,

    /// Log in to a server started with -Y (the text protocol's auth file)
    /// with the first user:password line of this file.
    #[arg(long = "auth-file", value_name = "FILE", global = true)]
    pub auth_file: Option<PathBuf>,

    /// Log in to a server started with -S (SASL PLAIN) with the first
    /// user:password line of this file. The commands then go over the
    /// binary protocol, which has the classic ones only (no meta,
    /// streaming, metadump or cluster commands).
    #[arg(long = "sasl-auth-file", value_name = "FILE", conflicts_with = "auth_file", global = true)]
    pub sasl_auth_file: Option<PathBuf>,
}

impl TransportArgs {
    /// Whether any TLS flag was given.
    fn tls(&self) -> Option<TlsOptions> {
        if self.tls_ca.is_none() && self.tls_cert.is_none() && self.tls_server_name.is_none() {
            return None;
        }
        let mut t = TlsOptions::new();
        if let Some(ca) = &self.tls_ca {
            t = t.ca_file(ca);
        }
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            t = t.client_cert(cert, key);
        }
        if let Some(n) = &self.tls_server_name {
            t = t.server_name(n);
        }
        Some(t)
    }

    /// The `--unix` servers as server specs.
    pub fn unix_servers(&self) -> impl Iterator<Item = String> + '_ {
        self.unix.iter().map(|p| format!("unix:{}", p.display()))
    }

    /// The flags' login, if any. A file that cannot be read is an error
    /// here, naming the file.
    pub fn login(&self) -> Result<Option<Login>> {
        if let Some(f) = &self.auth_file {
            let (user, password) = Login::read_user_password(f)?;
            return Ok(Some(Login::Text { user, password }));
        }
        if let Some(f) = &self.sasl_auth_file {
            let (user, password) = Login::read_user_password(f)?;
            return Ok(Some(Login::SaslPlain { user, password }));
        }
        Ok(None)
    }

    /// What opens the connections of commands with no typed API (`recall
    /// cluster`), with the flags' TLS and login.
    pub fn dialer(&self) -> Result<Dialer> {
        Dialer::new(self.tls().as_ref(), self.login()?)
    }

    /// The builder with the flags' TLS and login (the servers are the
    /// caller's: see [`TransportArgs::unix_servers`]). An auth file that
    /// cannot be read is an error here, naming the file.
    pub fn apply(&self, mut b: ClientBuilder) -> Result<ClientBuilder> {
        if let Some(t) = self.tls() {
            b = b.tls(t);
        }
        if let Some(l) = self.login()? {
            b = b.login(l);
        }
        Ok(b)
    }
}
