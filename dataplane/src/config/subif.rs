//! `[[subinterfaces]]`: 802.1Q and 802.1ad (QinQ) sub-interfaces declared in the config, for
//! a kernel without 802.1Q devices or a box whose VLANs the dataplane alone serves. Each
//! one is an interface of its own to routes and neighbours (its `name` as their `dev`),
//! numbered after the ports, carried by its parent port with its tags.
use std::net::IpAddr;

use serde::Deserialize;

use super::routes::parse_prefix;
use super::{invalid, port, ConfigError, PortOf};
use crate::packet::vlan::{Tag, TagStack};
use crate::types::{PortId, MAX_PORTS};

/// `[[subinterfaces]]` entry as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SubInterfaceSection {
    /// Its name (the `dev` of routes and neighbours through it), e.g. `eth1.100`.
    pub name: String,
    /// The port that carries it (one of `[[interfaces]]`).
    pub parent: String,
    /// The VLAN id of its (outer) tag, 1..=4094.
    pub vlan: u16,
    /// QinQ: the VLAN id of the inner (customer, 802.1Q) tag under `vlan`.
    pub inner_vlan: Option<u16>,
    /// The outer tag's protocol: `802.1Q` (the default with one tag) or `802.1ad` (the
    /// default with two).
    pub protocol: Option<String>,
    /// Its MTU (default: the parent's). At most the parent's: the tags travel outside it.
    pub mtu: Option<u32>,
    /// Its own addresses, `ADDR/LEN`: traffic to them goes to the kernel, ICMP errors it
    /// sends come from the first of each family.
    #[serde(default)]
    pub addresses: Vec<String>,
}

/// A validated sub-interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubInterface {
    /// Its name.
    pub name: String,
    /// The port that carries it.
    pub parent: PortId,
    /// Its tags, outermost first.
    pub tags: TagStack,
    /// Its MTU (None: the parent's).
    pub mtu: Option<u32>,
    /// Its addresses with their prefix lengths.
    pub addresses: Vec<(IpAddr, u8)>,
    /// The kernel's VLAN device it is (None: declared in the config).
    pub ifindex: Option<u32>,
}

impl SubInterface {
    /// Its tags as an operator reads them, outermost first: "802.1ad 100 over 802.1Q 200".
    pub fn tags_text(&self) -> String {
        self.tags
            .tags()
            .iter()
            .map(|t| {
                let kind = if t.tpid == crate::packet::ETH_P_8021AD {
                    "802.1ad"
                } else {
                    "802.1Q"
                };
                format!("{kind} {}", t.vid())
            })
            .collect::<Vec<_>>()
            .join(" over ")
    }
}

/// A VLAN id a tag of a sub-interface may carry (0 is a priority tag, 4095 reserved).
fn vid(key: String, v: u16) -> Result<u16, ConfigError> {
    if (1..=4094).contains(&v) {
        Ok(v)
    } else {
        Err(invalid(
            key,
            v,
            "a VLAN id is 1..=4094 (0: priority tag, 4095: reserved)",
        ))
    }
}

/// Checks every entry and numbers them after the ports (`port_of` gains their names).
pub(super) fn subinterfaces<'a>(
    list: &'a [SubInterfaceSection],
    port_of: &mut PortOf<'a>,
    ports: usize,
) -> Result<Vec<SubInterface>, ConfigError> {
    if ports + list.len() > MAX_PORTS {
        return Err(invalid(
            "subinterfaces",
            list.len(),
            format!("at most {MAX_PORTS} interfaces and sub-interfaces in all"),
        ));
    }
    let mut out: Vec<SubInterface> = Vec::with_capacity(list.len());
    for (i, s) in list.iter().enumerate() {
        let key = format!("subinterfaces[{i}]");
        let parent = port(port_of, format!("{key}.parent"), &s.parent)?;
        if usize::from(parent) >= ports {
            return Err(invalid(
                format!("{key}.parent"),
                &s.parent,
                "a sub-interface's parent is one of [[interfaces]], not another sub-interface",
            ));
        }
        let outer = vid(format!("{key}.vlan"), s.vlan)?;
        let inner = s
            .inner_vlan
            .map(|v| vid(format!("{key}.inner_vlan"), v))
            .transpose()?;
        let dot1ad = match (s.protocol.as_deref(), inner) {
            (None, None) => false,
            (None, Some(_)) => true,
            (Some(p), _) if p.eq_ignore_ascii_case("802.1q") => false,
            (Some(p), _) if p.eq_ignore_ascii_case("802.1ad") => true,
            (Some(p), _) => {
                return Err(invalid(
                    format!("{key}.protocol"),
                    p,
                    "must be \"802.1Q\" or \"802.1ad\"",
                ))
            }
        };
        let outer = if dot1ad {
            Tag::dot1ad(outer)
        } else {
            Tag::dot1q(outer)
        };
        let tags = match inner {
            None => TagStack::one(outer),
            Some(v) => TagStack::two(outer, Tag::dot1q(v)),
        };
        if let Some(m) = s.mtu {
            if !(68..=65_535).contains(&m) {
                return Err(invalid(format!("{key}.mtu"), m, "must be 68..=65535"));
            }
        }
        let addresses = s
            .addresses
            .iter()
            .map(|a| {
                parse_prefix(a).ok_or_else(|| {
                    invalid(format!("{key}.addresses"), a, "not an address ADDR/LEN")
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(twin) = out.iter().find(|o| o.parent == parent && o.tags == tags) {
            return Err(invalid(
                format!("{key}.vlan"),
                s.vlan,
                format!("{} has the same tags on the same port", twin.name),
            ));
        }
        if s.name.is_empty() || s.name.len() > 15 || s.name.contains(['/', ' ']) {
            return Err(invalid(
                format!("{key}.name"),
                &s.name,
                "not a valid interface name",
            ));
        }
        #[allow(clippy::cast_possible_truncation)] // below MAX_PORTS, checked above
        let id = (ports + i) as u16;
        if port_of.insert(&s.name, id).is_some() {
            return Err(invalid(
                format!("{key}.name"),
                &s.name,
                "already the name of an interface or sub-interface",
            ));
        }
        out.push(SubInterface {
            name: s.name.clone(),
            parent,
            tags,
            mtu: s.mtu,
            addresses,
            ifindex: None,
        });
    }
    Ok(out)
}
