//! A VLAN device as a link message describes it: its lower device and its tag.
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVlan, LinkAttribute, LinkInfo, LinkMessage, VlanProtocol,
};

use crate::packet::vlan::Tag;

/// A VLAN device's lower device and tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanOf {
    /// The lower device's ifindex.
    pub lower: u32,
    /// The tag it pushes (802.1Q or 802.1ad, its VLAN id).
    pub tag: Tag,
}

/// The VLAN device a link message describes (None: another kind of link).
pub(crate) fn vlan_of(l: &LinkMessage) -> Option<VlanOf> {
    let (mut lower, mut id, mut ad, mut vlan) = (None, None, false, false);
    for a in &l.attributes {
        match a {
            LinkAttribute::Link(i) => lower = Some(*i),
            LinkAttribute::LinkInfo(infos) => {
                for i in infos {
                    match i {
                        LinkInfo::Kind(InfoKind::Vlan) => vlan = true,
                        LinkInfo::Data(InfoData::Vlan(v)) => {
                            for x in v {
                                match x {
                                    InfoVlan::Id(v) => id = Some(*v),
                                    InfoVlan::Protocol(p) => ad = *p == VlanProtocol::Ieee8021Ad,
                                    _ => {}
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    let (lower, id) = (lower?, id?);
    vlan.then_some(VlanOf {
        lower,
        tag: if ad { Tag::dot1ad(id) } else { Tag::dot1q(id) },
    })
}
