//! memcached's `-l` listener list (memcached.c `server_sockets`): entries
//! separated by `,` or `;`, each
//!
//! ```text
//! [notls:|btls:|mtls:][proto[ascii|binary|negotiating]:][tag[NAME]:|tag_NAME_:]HOST[:PORT]
//! ```
//!
//! with `[v6]` brackets around an IPv6 address that has a port, an
//! unbracketed IPv6 address taking the default port, and `*` for every
//! address. The error texts are memcached's. Where memcached's C reads
//! past what it checked, recalld refuses instead:
//!
//! * a prefix is a prefix only when followed by its `:` (`notls:`) or its
//!   bracket (`proto[`, `tag[`, `tag_`): memcached strips a leading
//!   `notls`, `proto` or `tag` from any host name that starts with one;
//! * `proto[...]` names one of ascii, binary, negotiating, or a prefix of
//!   one (memcached compares `strncmp(name, "ascii", len)`); memcached
//!   keeps the default for an unknown name, recalld says "Invalid
//!   protocol spec";
//! * text after `]` of `[v6]` other than `:PORT` is refused.
//!
//! Tags are accepted and used nowhere: memcached shows them only to its
//! proxy, which recalld does not have.

use recall_engine::ProtocolChoice;

use super::value::Setting;
use super::ConfigError;

/// `-B`, `protocol`: what every listener speaks unless its `proto[...]`
/// says otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Text or binary, told apart by each connection's first byte.
    Auto,
    Ascii,
    Binary,
}

impl Protocol {
    pub fn choice(self) -> ProtocolChoice {
        match self {
            Protocol::Auto => ProtocolChoice::Auto,
            Protocol::Ascii => ProtocolChoice::Ascii,
            Protocol::Binary => ProtocolChoice::Binary,
        }
    }
}

impl Setting for Protocol {
    fn parse_text(s: &str) -> Result<Self, ConfigError> {
        match s {
            "auto" => Ok(Protocol::Auto),
            "ascii" => Ok(Protocol::Ascii),
            "binary" => Ok(Protocol::Binary),
            // memcached's text.
            _ => Err(ConfigError(format!(
                "Invalid value for binding protocol: {s} -- should be one of auto, binary, or ascii"
            ))),
        }
    }

    fn text(&self) -> String {
        match self {
            Protocol::Auto => "auto",
            Protocol::Ascii => "ascii",
            Protocol::Binary => "binary",
        }
        .into()
    }
}

/// A listener's TLS, by its prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenTls {
    /// No prefix: TLS if `-Z`, with `ssl_verify_mode`'s client checks.
    Default,
    /// `notls:`: plain text even with `-Z`.
    None,
    /// `btls:`: TLS, never asking for a client certificate.
    NoPeer,
    /// `mtls:`: TLS, requiring a client certificate.
    Peer,
}

/// One `-l` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenSpec {
    /// `None` for `*`: every address (IPv4 and IPv6).
    pub host: Option<String>,
    pub port: u16,
    pub tls: ListenTls,
    /// `proto[...]`; `None` keeps `-B`'s choice.
    pub protocol: Option<ProtocolChoice>,
    pub tag: Option<String>,
}

/// What the rest of the command line decides about the entries.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListenRules {
    /// `-p`: the port of an entry without one.
    pub default_port: u16,
    /// `-Z`.
    pub ssl: bool,
    /// `-Y`: text authentication.
    pub auth_file: bool,
    /// `-S`: SASL, binary only.
    pub sasl: bool,
}

/// Parse `-l`. Warnings (memcached's) come back beside the entries.
pub fn parse_listen(list: &str, rules: ListenRules) -> Result<(Vec<ListenSpec>, Vec<String>), ConfigError> {
    let mut specs = Vec::new();
    let mut warnings = Vec::new();
    for entry in list.split([',', ';']).filter(|e| !e.is_empty()) {
        specs.push(parse_entry(entry, rules, &mut warnings)?);
    }
    if specs.is_empty() {
        return Err(ConfigError(format!("No address to listen on in -l {list:?}")));
    }
    Ok((specs, warnings))
}

fn err<T>(msg: String) -> Result<T, ConfigError> {
    Err(ConfigError(msg))
}

fn parse_entry(entry: &str, rules: ListenRules, warnings: &mut Vec<String>) -> Result<ListenSpec, ConfigError> {
    let mut p = entry;
    let mut tls = ListenTls::Default;
    for (word, mode) in [("notls", ListenTls::None), ("btls", ListenTls::NoPeer), ("mtls", ListenTls::Peer)] {
        if let Some(rest) = p.strip_prefix(word).and_then(|r| r.strip_prefix(':')) {
            if !rules.ssl {
                // memcached's text, including its name for mtls.
                let shown = if word == "mtls" { "otls" } else { word };
                return err(format!("'{shown}' option is valid only when SSL is enabled"));
            }
            tls = mode;
            p = rest;
            break;
        }
    }

    let mut protocol = None;
    if let Some(rest) = p.strip_prefix("proto[") {
        let Some((name, after)) = rest.split_once(']') else {
            return err(format!("Invalid protocol spec: \"{}\"", &p["proto".len()..]));
        };
        let Some(after) = after.strip_prefix(':') else {
            return err(format!("Invalid protocol spec: \"{}\"", &p["proto".len()..]));
        };
        let is = |full: &str| full.starts_with(name);
        protocol = Some(if is("ascii") {
            if rules.sasl {
                return err("You cannot allow the ASCII protocol while using SASL.".into());
            }
            ProtocolChoice::Ascii
        } else if is("binary") {
            if rules.auth_file {
                return err("Cannot use binary protocol when ascii authentication enabled".into());
            }
            ProtocolChoice::Binary
        } else if is("negotiating") {
            if rules.sasl {
                return err("You cannot allow the ASCII protocol while using SASL.".into());
            }
            if rules.auth_file {
                warnings.push("WARNING: negotiating ports are ascii only when ascii authentication enabled".into());
                ProtocolChoice::Ascii
            } else {
                ProtocolChoice::Auto
            }
        } else if is("proxy") {
            return err(format!("Server not built with proxy: \"{entry}\""));
        } else {
            return err(format!("Invalid protocol spec: \"{}\"", &p["proto".len()..]));
        });
        p = after;
    }

    let mut tag = None;
    let tagged = p.strip_prefix("tag[").map(|r| (r, ']')).or_else(|| p.strip_prefix("tag_").map(|r| (r, '_')));
    if let Some((rest, close)) = tagged {
        let Some((name, after)) = rest.split_once(close) else {
            return err(format!("Invalid tag in socket config: \"{}\"", &p["tag".len()..]));
        };
        if name.is_empty() || name.len() > 8 {
            return err(format!("Listener tags must be between 1 and 8 characters: \"{name}\""));
        }
        let Some(after) = after.strip_prefix(':') else {
            return err(format!("Invalid tag in socket config: \"{}\"", &p["tag".len()..]));
        };
        tag = Some(name.to_string());
        p = after;
    }

    let (host, port) = host_port(p, rules.default_port)?;
    if host.is_empty() {
        return err(format!("No host name in -l entry \"{entry}\" (use * for every address)"));
    }
    let host = (host != "*").then(|| host.to_string());
    Ok(ListenSpec { host, port, tls, protocol, tag })
}

/// `HOST[:PORT]`, `[V6][:PORT]`, or an unbracketed IPv6 address (more
/// than one `:`), which takes the default port.
fn host_port(p: &str, default_port: u16) -> Result<(&str, u16), ConfigError> {
    let port = |s: &str| -> Result<u16, ConfigError> {
        if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(n) = s.parse() {
                return Ok(n);
            }
        }
        err(format!("Invalid port number: \"{s}\""))
    };
    if let Some(rest) = p.strip_prefix('[') {
        let Some((v6, after)) = rest.split_once(']') else {
            return err(format!("Invalid IPV6 address: \"{p}\""));
        };
        return match after {
            "" => Ok((v6, default_port)),
            _ => match after.strip_prefix(':') {
                Some(s) => Ok((v6, port(s)?)),
                None => err(format!("Invalid IPV6 address: \"{p}\"")),
            },
        };
    }
    match p.split_once(':') {
        Some((h, s)) if !s.contains(':') => Ok((h, port(s)?)),
        _ => Ok((p, default_port)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PLAIN: ListenRules = ListenRules { default_port: 11211, ssl: false, auth_file: false, sasl: false };
    const SSL: ListenRules = ListenRules { ssl: true, ..PLAIN };

    fn one(s: &str, rules: ListenRules) -> ListenSpec {
        let (mut v, _) = parse_listen(s, rules).unwrap();
        assert_eq!(v.len(), 1, "{s}");
        v.remove(0)
    }

    fn error(s: &str, rules: ListenRules) -> String {
        parse_listen(s, rules).unwrap_err().0
    }

    fn spec(host: Option<&str>, port: u16) -> ListenSpec {
        ListenSpec { host: host.map(Into::into), port, tls: ListenTls::Default, protocol: None, tag: None }
    }

    #[test]
    fn hosts_and_ports() {
        assert_eq!(one("127.0.0.1", PLAIN), spec(Some("127.0.0.1"), 11211));
        assert_eq!(one("127.0.0.1:0", PLAIN), spec(Some("127.0.0.1"), 0));
        assert_eq!(one("localhost:22122", PLAIN), spec(Some("localhost"), 22122));
        assert_eq!(one("*", PLAIN), spec(None, 11211));
        assert_eq!(one("*:5", PLAIN), spec(None, 5));
        assert_eq!(one("[::1]:7", PLAIN), spec(Some("::1"), 7));
        assert_eq!(one("[::1]", PLAIN), spec(Some("::1"), 11211));
        // Unbracketed IPv6: the whole entry is the address.
        assert_eq!(one("::1", PLAIN), spec(Some("::1"), 11211));
        assert_eq!(one("fe80::1:2", PLAIN), spec(Some("fe80::1:2"), 11211));
    }

    #[test]
    fn lists_split_on_comma_and_semicolon() {
        let (v, w) = parse_listen("127.0.0.1:1,127.0.0.2:2;[::1]:3,,", PLAIN).unwrap();
        assert_eq!(v, vec![spec(Some("127.0.0.1"), 1), spec(Some("127.0.0.2"), 2), spec(Some("::1"), 3)]);
        assert!(w.is_empty());
        assert!(error(",;", PLAIN).contains("No address"));
    }

    #[test]
    fn tls_prefixes_need_ssl() {
        assert_eq!(one("notls:127.0.0.1", SSL).tls, ListenTls::None);
        assert_eq!(one("btls:127.0.0.1", SSL).tls, ListenTls::NoPeer);
        assert_eq!(one("mtls:127.0.0.1", SSL).tls, ListenTls::Peer);
        assert_eq!(one("127.0.0.1", SSL).tls, ListenTls::Default);
        assert_eq!(error("notls:127.0.0.1", PLAIN), "'notls' option is valid only when SSL is enabled");
        assert_eq!(error("btls:127.0.0.1", PLAIN), "'btls' option is valid only when SSL is enabled");
        assert_eq!(error("mtls:127.0.0.1", PLAIN), "'otls' option is valid only when SSL is enabled");
        // A host name that merely starts with the word is a host name.
        assert_eq!(one("notls.example", PLAIN).host.as_deref(), Some("notls.example"));
    }

    #[test]
    fn protocol_prefix() {
        assert_eq!(one("proto[ascii]:127.0.0.1", PLAIN).protocol, Some(ProtocolChoice::Ascii));
        assert_eq!(one("proto[binary]:127.0.0.1:9", PLAIN).protocol, Some(ProtocolChoice::Binary));
        assert_eq!(one("proto[negotiating]:*", PLAIN).protocol, Some(ProtocolChoice::Auto));
        // memcached compares only the given length.
        assert_eq!(one("proto[bin]:127.0.0.1", PLAIN).protocol, Some(ProtocolChoice::Binary));
        let s = one("notls:proto[ascii]:tag[abc]:[::1]:4", SSL);
        assert_eq!(
            (s.tls, s.protocol, s.tag.as_deref(), s.host.as_deref(), s.port),
            (ListenTls::None, Some(ProtocolChoice::Ascii), Some("abc"), Some("::1"), 4)
        );
        assert_eq!(error("proto[ascii:127.0.0.1", PLAIN), "Invalid protocol spec: \"[ascii:127.0.0.1\"");
        assert!(error("proto[gopher]:127.0.0.1", PLAIN).starts_with("Invalid protocol spec"));
        assert!(error("proto[ascii]127.0.0.1", PLAIN).starts_with("Invalid protocol spec"));
        assert_eq!(error("proto[proxy]:127.0.0.1", PLAIN), "Server not built with proxy: \"proto[proxy]:127.0.0.1\"");
        // A host called "protocols" is a host.
        assert_eq!(one("protocols:1", PLAIN).host.as_deref(), Some("protocols"));
    }

    #[test]
    fn protocol_and_authentication() {
        let auth = ListenRules { auth_file: true, ..PLAIN };
        assert_eq!(
            error("proto[binary]:127.0.0.1", auth),
            "Cannot use binary protocol when ascii authentication enabled"
        );
        let (v, w) = parse_listen("proto[negotiating]:127.0.0.1", auth).unwrap();
        assert_eq!(v[0].protocol, Some(ProtocolChoice::Ascii));
        assert_eq!(w, vec!["WARNING: negotiating ports are ascii only when ascii authentication enabled"]);
        let sasl = ListenRules { sasl: true, ..PLAIN };
        assert!(error("proto[ascii]:127.0.0.1", sasl).contains("SASL"));
        assert!(error("proto[negotiating]:127.0.0.1", sasl).contains("SASL"));
        assert_eq!(one("proto[binary]:127.0.0.1", sasl).protocol, Some(ProtocolChoice::Binary));
    }

    #[test]
    fn tags() {
        assert_eq!(one("tag[a]:127.0.0.1", PLAIN).tag.as_deref(), Some("a"));
        assert_eq!(one("tag_12345678_:127.0.0.1:1", PLAIN).tag.as_deref(), Some("12345678"));
        assert_eq!(error("tag[]:127.0.0.1", PLAIN), "Listener tags must be between 1 and 8 characters: \"\"");
        assert_eq!(
            error("tag[123456789]:127.0.0.1", PLAIN),
            "Listener tags must be between 1 and 8 characters: \"123456789\""
        );
        assert_eq!(error("tag[abc", PLAIN), "Invalid tag in socket config: \"[abc\"");
        assert_eq!(one("tagged.example", PLAIN).host.as_deref(), Some("tagged.example"));
    }

    #[test]
    fn bad_ports_and_addresses() {
        for (entry, shown) in
            [("127.0.0.1:", ""), ("127.0.0.1:x", "x"), ("127.0.0.1:70000", "70000"), ("[::1]:-1", "-1")]
        {
            assert_eq!(error(entry, PLAIN), format!("Invalid port number: \"{shown}\""), "{entry}");
        }
        assert_eq!(error("[::1", PLAIN), "Invalid IPV6 address: \"[::1\"");
        assert_eq!(error("[::1]x", PLAIN), "Invalid IPV6 address: \"[::1]x\"");
        assert!(error(":11211", PLAIN).contains("No host name"));
        assert!(error("notls:", SSL).contains("No host name"));
    }

    proptest! {
        #[test]
        fn never_panics(
            s in "(notls:|btls:|mtls:|proto\\[|tag\\[|tag_|ascii|binary|neg|proxy|\\]|:|,|;|\\[|\\*|_|[a-z0-9.]{1,4}){0,12}",
            ssl: bool,
            auth: bool,
            sasl: bool,
        ) {
            let rules = ListenRules { default_port: 11211, ssl, auth_file: auth, sasl };
            if let Ok((v, _)) = parse_listen(&s, rules) {
                prop_assert!(!v.is_empty());
                for spec in v {
                    prop_assert!(spec.host.as_deref().is_none_or(|h| !h.is_empty()));
                    prop_assert!(spec.tag.as_deref().is_none_or(|t| (1..=8).contains(&t.len())));
                }
            }
        }
    }
}
