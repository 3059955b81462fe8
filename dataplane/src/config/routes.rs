//! Routes as the config gives them: `[[routes]]` sections and the lines of a `routes_file`
//! (`PREFIX [via ADDR]... dev IFACE`), each checked for family, path count and port.
use std::net::IpAddr;
use std::path::Path;

use super::{invalid, port, ConfigError, OneOrMany, PortOf, RouteSection};
use super::{ROUTES_FILE_MAX_BYTES, ROUTES_FILE_MAX_LINES};
use crate::types::{Route, MAX_PATHS};

/// Parses one `PREFIX [via ADDR] dev IFACE` line of a routes file.
fn parse_route_line(line: &str) -> Result<(IpAddr, u8, Vec<IpAddr>, &str), String> {
    let mut words = line.split_whitespace();
    let prefix = words.next().ok_or("empty line")?;
    let (addr, len) =
        parse_prefix(prefix).ok_or_else(|| format!("`{prefix}` is not an address/length"))?;
    let (mut via, mut dev) = (Vec::new(), None);
    while let Some(w) = words.next() {
        let v = words.next().ok_or_else(|| format!("`{w}` needs a value"))?;
        match w {
            "via" => {
                let a: IpAddr = v
                    .parse()
                    .map_err(|_| format!("via `{v}` is not an IP address"))?;
                if a.is_ipv4() != addr.is_ipv4() {
                    return Err(format!("via `{v}` is not the prefix's address family"));
                }
                via.push(a);
            }
            "dev" => dev = Some(v),
            other => return Err(format!("unknown word `{other}` (expected via or dev)")),
        }
    }
    Ok((addr, len, via, dev.ok_or("missing `dev IFACE`")?))
}

/// Parses `addr/len`, `addr` (host route) or `default` (both families: use `0.0.0.0/0` or `::/0`).
pub(crate) fn parse_prefix(s: &str) -> Option<(IpAddr, u8)> {
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a.parse::<IpAddr>().ok()?, Some(l.parse::<u8>().ok()?)),
        None => (s.parse::<IpAddr>().ok()?, None),
    };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = len.unwrap_or(max);
    (len <= max).then_some((addr, len))
}
/// `[[routes]]`: prefix (never the word `default`), next hops of the prefix's family (at most
/// [`MAX_PATHS`]), and the port.
pub(super) fn routes_from_sections(
    list: &[RouteSection],
    port_of: &PortOf<'_>,
) -> Result<Vec<Route>, ConfigError> {
    let mut routes = Vec::with_capacity(list.len());
    for (i, r) in list.iter().enumerate() {
        let key = format!("routes[{i}]");
        if r.prefix == "default" {
            return Err(invalid(
                format!("{key}.prefix"),
                &r.prefix,
                "write 0.0.0.0/0 or ::/0",
            ));
        }
        let (prefix, len) = parse_prefix(&r.prefix)
            .ok_or_else(|| invalid(format!("{key}.prefix"), &r.prefix, "not an address/length"))?;
        let mut via = Vec::new();
        for v in r.via.as_ref().map(OneOrMany::items).unwrap_or_default() {
            let a: IpAddr = v
                .parse()
                .map_err(|_| invalid(format!("{key}.via"), v, "not an IP address"))?;
            if a.is_ipv4() != prefix.is_ipv4() {
                return Err(invalid(
                    format!("{key}.via"),
                    v,
                    "address family differs from the prefix",
                ));
            }
            via.push(a);
        }
        if via.len() > MAX_PATHS {
            return Err(invalid(
                format!("{key}.via"),
                via.len(),
                format!("at most {} next hops", MAX_PATHS),
            ));
        }
        routes.push(Route {
            prefix,
            len,
            via,
            port: port(port_of, format!("{key}.dev"), &r.dev)?,
        });
    }
    Ok(routes)
}

/// A `routes_file`: bounded in bytes and lines before it is parsed; `#` starts a comment; an
/// error names the file and line.
pub(super) fn routes_from_file(
    path: &Path,
    port_of: &PortOf<'_>,
) -> Result<Vec<Route>, ConfigError> {
    let unreadable = |e: std::io::Error| {
        invalid(
            "dataplane.routes_file",
            path.display(),
            format!("cannot read: {e}"),
        )
    };
    let size = std::fs::metadata(path)
        .map(|m| m.len())
        .map_err(unreadable)?;
    if size > ROUTES_FILE_MAX_BYTES {
        return Err(invalid(
            "dataplane.routes_file",
            path.display(),
            format!("{size} bytes: more than the {ROUTES_FILE_MAX_BYTES} a routes file may have"),
        ));
    }
    let text = std::fs::read_to_string(path).map_err(unreadable)?;
    if text.lines().count() > ROUTES_FILE_MAX_LINES {
        return Err(invalid(
            "dataplane.routes_file",
            path.display(),
            format!("more than {ROUTES_FILE_MAX_LINES} lines"),
        ));
    }
    let mut routes = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let key = format!("{}:{}", path.display(), n + 1);
        let (prefix, len, via, dev) =
            parse_route_line(line).map_err(|why| invalid(key.clone(), line, why))?;
        routes.push(Route {
            prefix,
            len,
            via,
            port: port(port_of, format!("{key} dev"), dev)?,
        });
    }
    Ok(routes)
}
