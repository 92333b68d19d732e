//! The egress rules of the `http` capability, which the host enforces whatever the policy says:
//! the port a grant allows and the addresses a request may reach.
//!
//! Owns the policy target of a URL ([`http_target`]), what counts as a non-public address
//! ([`non_public_kind`]), the parsing of `http` grant entries, the decision for one URL
//! ([`check_destination`], a check every host runs, offline included) and the vetting of the
//! addresses a name resolved to ([`vet_resolved`], run by the network backend's resolver). It
//! never lets a grant naming an IP vouch for another port or for a name the grants do not list.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::config::Grants;

/// The policy target of a URL: `host`, or `host:port` when the port is not the scheme's
/// default (IPv6 hosts keep their brackets). `None` when the URL has no host. It is also the
/// `Host` header the request carries, and the host a signature covers.
pub fn http_target(url: &reqwest::Url) -> Option<String> {
    let host = url.host_str()?;
    Some(match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    })
}

/// Why `ip` is not a public unicast address (loopback, link-local, private, ...), or `None`
/// when it is one. IPv6 addresses that embed an IPv4 address (mapped `::ffff:a.b.c.d`,
/// compatible `::a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) are judged by it.
pub fn non_public_kind(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_kind(v4),
        IpAddr::V6(v6) => v6_kind(v6),
    }
}

fn v4_kind(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(if ip.is_unspecified() || a == 0 {
        "unspecified (0.0.0.0/8)"
    } else if ip.is_loopback() {
        "loopback (127.0.0.0/8)"
    } else if ip.is_link_local() {
        "link-local (169.254.0.0/16, where cloud metadata services live)"
    } else if ip.is_private() {
        "private (10/8, 172.16/12, 192.168/16)"
    } else if ip.is_broadcast() {
        "broadcast"
    } else if ip.is_multicast() {
        "multicast (224.0.0.0/4)"
    } else if a == 100 && (b & 0xc0) == 64 {
        "shared address space (100.64.0.0/10)"
    } else if a == 192 && b == 0 && c == 0 {
        "IETF protocol assignments (192.0.0.0/24)"
    } else if a == 198 && (b & 0xfe) == 18 {
        "benchmarking (198.18.0.0/15)"
    } else if ip.is_documentation() {
        "documentation"
    } else if a >= 240 {
        "reserved (240.0.0.0/4)"
    } else {
        return None;
    })
}

fn v6_kind(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    if let Some(v4) = embedded_v4(ip) {
        return v4_kind(v4);
    }
    Some(if ip.is_unspecified() {
        "unspecified (::)"
    } else if ip.is_loopback() {
        "loopback (::1)"
    } else if ip.is_multicast() {
        "multicast (ff00::/8)"
    } else if (s[0] & 0xffc0) == 0xfe80 {
        "link-local (fe80::/10)"
    } else if (s[0] & 0xffc0) == 0xfec0 {
        "site-local (fec0::/10)"
    } else if (s[0] & 0xfe00) == 0xfc00 {
        "unique local / private (fc00::/7)"
    } else if s[0] == 0x2001 && s[1] == 0x0db8 {
        "documentation (2001:db8::/32)"
    } else if s[0] == 0x0100 && s[1..4] == [0, 0, 0] {
        "discard (100::/64)"
    } else {
        return None;
    })
}

/// The IPv4 address an IPv6 address carries, for the forms that reach it.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = |hi: u16, lo: u16| {
        let [a, b] = hi.to_be_bytes();
        let [c, d] = lo.to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    };
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    if s[..6] == [0, 0, 0, 0, 0, 0] && !ip.is_unspecified() && !ip.is_loopback() {
        return Some(low(s[6], s[7])); // IPv4-compatible (deprecated)
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(low(s[6], s[7])); // NAT64 well-known prefix
    }
    if s[0] == 0x2002 {
        return Some(low(s[1], s[2])); // 6to4
    }
    None
}

/// An `http` grant entry: `host`, `host:port`, `[v6]`, `[v6]:port` or a bare IPv6 address.
#[derive(Debug, Clone, PartialEq, Eq)]
struct GrantEntry {
    /// Lower-case host name, or the address.
    host: GrantHost,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum GrantHost {
    Name(String),
    Ip(IpAddr),
}

impl GrantEntry {
    /// Parse one entry; `None` when it is not one (such an entry grants nothing here).
    fn parse(entry: &str) -> Option<Self> {
        let entry = entry.trim();
        let (host, port) = if let Some(rest) = entry.strip_prefix('[') {
            let (host, after) = rest.split_once(']')?;
            match after.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None if after.is_empty() => (host, None),
                None => return None,
            }
        } else {
            match entry.split_once(':') {
                Some((host, port)) if !port.contains(':') => (host, Some(port)),
                _ => (entry, None),
            }
        };
        let port = match port {
            Some(p) => Some(p.parse::<u16>().ok()?),
            None => None,
        };
        let host = match host.parse::<IpAddr>() {
            Ok(ip) => GrantHost::Ip(ip.to_canonical()),
            Err(_) if !host.is_empty() => GrantHost::Name(host.to_ascii_lowercase()),
            Err(_) => return None,
        };
        Some(Self { host, port })
    }
}

/// The egress decision for one URL, taken from the plugin's grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Destination {
    /// The non-public addresses the URL's name may resolve to: those the grants name as IPs on
    /// the URL's port, when a grant names the name itself (empty for an IP-literal URL, which
    /// is not resolved, and for a name no grant names).
    pub(crate) allowed_ips: Vec<IpAddr>,
}

/// Check a URL against the egress rules the host enforces after the policy allowed its host:
///
/// - the port: equal to the port of a grant entry naming this host, or to the scheme's default
///   when the entry has no port (or when no entry names the host: a policy that allows more
///   hosts than the grants list still reaches only default ports);
/// - an IP-literal host that is not a public address (loopback, link-local, private, ...) only
///   when a grant entry names that IP (on this port, by the rule above).
///
/// Names are vetted when they resolve (by the client's resolver): every address must be public,
/// or be named by an IP grant *on the URL's port* while a grant names the name itself. An IP
/// grant (`"10.0.0.5:8080"`) vouches for one socket address, not for every name resolving to
/// the IP: a name the grants do not list (a permissive policy) or a name on another port never
/// reaches it, so a DNS answer cannot turn an IP grant into access to other ports of that host.
pub(crate) fn check_destination(
    url: &reqwest::Url,
    grants: &Grants,
) -> Result<Destination, String> {
    let entries: Vec<GrantEntry> = grants
        .http
        .iter()
        .filter_map(|e| GrantEntry::parse(e))
        .collect();
    let default_port = match url.scheme() {
        "https" => 443,
        _ => 80,
    };
    let port = url.port_or_known_default().unwrap_or(default_port);
    let Some(raw_host) = url.host_str() else {
        return Err(format!("http: url {url} has no host"));
    };
    let bare = raw_host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(raw_host);
    let host = match bare.parse::<IpAddr>() {
        Ok(ip) => GrantHost::Ip(ip.to_canonical()),
        Err(_) => GrantHost::Name(bare.to_ascii_lowercase()),
    };
    let shown = http_target(url).unwrap_or_default();
    let naming: Vec<&GrantEntry> = entries.iter().filter(|e| e.host == host).collect();
    let allowed_port = |e: &GrantEntry| e.port.unwrap_or(default_port) == port;
    if naming.is_empty() {
        if port != default_port {
            return Err(format!(
                "http: port {port} of {shown} is not granted: no http grant names this host, so only the {} default port {default_port} may be used",
                url.scheme()
            ));
        }
    } else if !naming.iter().copied().any(allowed_port) {
        let granted: Vec<String> = naming
            .iter()
            .map(|e| match e.port {
                Some(p) => p.to_string(),
                None => format!("{default_port} (the {} default)", url.scheme()),
            })
            .collect();
        return Err(format!(
            "http: port {port} of {shown} is not granted (granted port: {}); a grant without a port allows only the scheme's default port",
            granted.join(", ")
        ));
    }
    // Here a grant naming the host (if any) allows the port.
    let allowed_ips: Vec<IpAddr> = match host {
        GrantHost::Ip(ip) => {
            if let Some(kind) = non_public_kind(ip) {
                if naming.is_empty() {
                    return Err(refused(&shown, ip, kind));
                }
            }
            Vec::new()
        }
        GrantHost::Name(_) if naming.is_empty() => Vec::new(),
        GrantHost::Name(_) => {
            let mut ips: Vec<IpAddr> = entries
                .iter()
                .filter(|e| allowed_port(e))
                .filter_map(|e| match e.host {
                    GrantHost::Ip(ip) if non_public_kind(ip).is_some() => Some(ip),
                    _ => None,
                })
                .collect();
            ips.sort();
            ips.dedup();
            ips
        }
    };
    Ok(Destination { allowed_ips })
}

/// The error of a refused address.
fn refused(host: &str, ip: IpAddr, kind: &str) -> String {
    format!(
        "http: {host} is {ip}, a {kind} address; a plugin reaches non-public addresses only when its http grants name that IP explicitly"
    )
}

/// Check every address a name resolved to: all must be public, or in `allowed` (the IPs the
/// grants name on the request's port, see [`Destination::allowed_ips`]). One bad address refuses
/// the name (a resolver answer that mixes in an internal address is an attack).
pub(crate) fn vet_resolved(
    name: &str,
    addrs: &[SocketAddr],
    allowed: &[IpAddr],
) -> Result<(), String> {
    if addrs.is_empty() {
        return Err(format!("http: {name} resolved to no address"));
    }
    for addr in addrs {
        let ip = addr.ip().to_canonical();
        if let Some(kind) = non_public_kind(ip) {
            if !allowed.contains(&ip) {
                let ip_entry = match ip {
                    IpAddr::V4(v4) => v4.to_string(),
                    IpAddr::V6(v6) => format!("[{v6}]"),
                };
                return Err(format!(
                    "http: {name} resolves to {ip}, a {kind} address; a plugin reaches a non-public address through a name only when its http grants name both the name and that IP explicitly with the request's port (\"{name}:PORT\" and \"{ip_entry}:PORT\"; this refuses DNS rebinding)"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(u: &str) -> reqwest::Url {
        reqwest::Url::parse(u).unwrap()
    }

    fn grants(http: &[&str]) -> Grants {
        Grants {
            http: http.iter().map(|s| s.to_string()).collect(),
            ..Grants::default()
        }
    }

    #[test]
    fn http_targets() {
        let t = |u: &str| http_target(&url(u));
        assert_eq!(
            t("https://API.example.com/x?y=1").as_deref(),
            Some("api.example.com")
        );
        assert_eq!(
            t("https://api.example.com:443/").as_deref(),
            Some("api.example.com")
        );
        assert_eq!(
            t("http://localhost:8080/hook").as_deref(),
            Some("localhost:8080")
        );
        assert_eq!(t("http://[::1]:9000/").as_deref(), Some("[::1]:9000"));
        assert_eq!(
            t("http://user:pw@evil.example:81@good.example/").as_deref(),
            Some("good.example")
        );
        assert_eq!(t("mailto:a@b.c"), None);
    }

    #[test]
    fn non_public_addresses_are_classified() {
        let kind = |s: &str| non_public_kind(s.parse().unwrap());
        for internal in [
            "127.0.0.1",
            "127.1.2.3",
            "0.0.0.0",
            "0.1.2.3",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.100.100.200",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "::",
            "::1",
            "fe80::1",
            "fc00::1",
            "fd00:ec2::254",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:a9fe:a9fe::1",
        ] {
            assert!(
                kind(internal).is_some(),
                "{internal} must not count as public"
            );
        }
        for public in [
            "93.184.216.34",
            "8.8.8.8",
            "172.32.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert_eq!(kind(public), None, "{public} is public");
        }
        assert!(kind("169.254.169.254").unwrap().contains("link-local"));
        assert!(kind("::1").unwrap().contains("loopback"));
    }

    #[test]
    fn the_port_must_match_the_grant() {
        let g = grants(&[
            "api.example.com",
            "hooks.example.com:8443",
            "93.184.216.34:81",
        ]);
        assert!(check_destination(&url("https://api.example.com/x"), &g).is_ok());
        assert!(check_destination(&url("http://api.example.com/x"), &g).is_ok());
        let err = check_destination(&url("https://api.example.com:8443/x"), &g).unwrap_err();
        assert!(
            err.contains("port 8443") && err.contains("not granted"),
            "{err}"
        );
        // 443 is not the default of http: a grant without a port allows port 80 there.
        assert!(check_destination(&url("http://api.example.com:443/x"), &g).is_err());
        assert!(check_destination(&url("https://hooks.example.com:8443/"), &g).is_ok());
        assert!(check_destination(&url("https://hooks.example.com/"), &g).is_err());
        assert!(check_destination(&url("http://93.184.216.34:81/"), &g).is_ok());
        assert!(check_destination(&url("http://93.184.216.34/"), &g).is_err());
        // A host no grant names (a permissive policy): default ports only.
        assert!(check_destination(&url("https://other.example/"), &g).is_ok());
        assert!(check_destination(&url("https://other.example:444/"), &g).is_err());
    }

    #[test]
    fn non_public_ip_literals_need_a_grant_naming_the_ip() {
        let none = grants(&["localhost:8080", "metadata.google.internal"]);
        for u in [
            "http://127.0.0.1:8080/",
            "http://169.254.169.254/latest/meta-data/",
            "http://[::1]:8080/",
            "http://[::ffff:127.0.0.1]:8080/",
            "http://0.0.0.0:8080/",
            "http://10.1.2.3/",
        ] {
            let err = check_destination(&url(u), &none).unwrap_err();
            assert!(
                err.contains("name that IP explicitly") || err.contains("port"),
                "{u}: {err}"
            );
        }
        let err = check_destination(
            &url("http://169.254.169.254/"),
            &grants(&["169.254.169.254.nip.io"]),
        )
        .unwrap_err();
        assert!(err.contains("link-local"), "{err}");
        let ip = grants(&["127.0.0.1:8080", "[::1]:9000"]);
        let d = check_destination(&url("http://127.0.0.1:8080/"), &ip).unwrap();
        assert!(d.allowed_ips.is_empty(), "an IP literal is not resolved");
        assert!(check_destination(&url("http://[::1]:9000/"), &ip).is_ok());
        assert!(check_destination(&url("http://127.0.0.2:8080/"), &ip).is_err());
    }

    #[test]
    fn an_ip_grant_lets_a_name_resolve_to_it_only_on_its_port_and_only_for_a_granted_name() {
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let g = grants(&[
            "127.0.0.1:8080",
            "10.0.0.5",
            "localhost:8080",
            "localhost:9090",
            "internal.example",
            "internal.example:8443",
        ]);
        let allowed = |u: &str| check_destination(&url(u), &g).unwrap().allowed_ips;
        assert_eq!(allowed("http://localhost:8080/"), vec![loopback]);
        // The name is granted on 9090, but no IP grant names port 9090: only public addresses.
        assert!(allowed("http://localhost:9090/").is_empty());
        // An IP grant without a port vouches for the scheme's default port only.
        let internal = vec!["10.0.0.5".parse::<IpAddr>().unwrap()];
        assert_eq!(allowed("http://internal.example/"), internal);
        assert_eq!(allowed("https://internal.example/"), internal);
        assert!(allowed("https://internal.example:8443/").is_empty());
        // A name no grant names (a permissive policy lets it through): public addresses only.
        let ip_only = grants(&["127.0.0.1:80"]);
        let d = check_destination(&url("http://rebinds.example/"), &ip_only).unwrap();
        assert!(d.allowed_ips.is_empty(), "{d:?}");
        let err = vet_resolved(
            "localhost",
            &["127.0.0.1:0".parse().unwrap()],
            &d.allowed_ips,
        )
        .unwrap_err();
        assert!(err.contains("\"127.0.0.1:PORT\""), "{err}");
    }

    #[test]
    fn resolved_names_are_vetted_address_by_address() {
        let a = |s: &str| -> SocketAddr { format!("{s}:0").parse().unwrap() };
        assert!(vet_resolved("example.com", &[a("93.184.216.34")], &[]).is_ok());
        let err = vet_resolved("localhost", &[a("127.0.0.1")], &[]).unwrap_err();
        assert!(
            err.contains("loopback") && err.contains("rebinding"),
            "{err}"
        );
        let mixed = [a("93.184.216.34"), a("169.254.169.254")];
        assert!(vet_resolved("evil.example", &mixed, &[]).is_err());
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(vet_resolved("localhost", &[a("127.0.0.1")], &[local]).is_ok());
        assert!(vet_resolved("nothing.example", &[], &[]).is_err());
    }

    #[test]
    fn grant_entries_parse() {
        let p = |s: &str| GrantEntry::parse(s);
        assert_eq!(
            p("API.example.com:8080"),
            Some(GrantEntry {
                host: GrantHost::Name("api.example.com".into()),
                port: Some(8080)
            })
        );
        assert_eq!(
            p("[::1]"),
            Some(GrantEntry {
                host: GrantHost::Ip("::1".parse().unwrap()),
                port: None
            })
        );
        assert_eq!(p("::1").map(|e| e.port), Some(None));
        assert_eq!(p("host:99999"), None);
        assert_eq!(p(""), None);
    }
}
