//! The generator's frames: a template the XDP program copies over every live frame, and what
//! it changes per flow (the UDP source port, with the UDP checksum patched for IPv6).
use std::net::IpAddr;

use crate::bpf::GenConfig;
use crate::packet::build::{udp_v4, udp_v6, FrameSpec};
use crate::packet::checksum_update;
use crate::testbed;

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenSpec {
    /// Frame size on the wire, FCS included (64..=9018: up to a 9000-byte MTU).
    pub size: usize,
    /// Distinct flows (UDP source ports), 1..=65000.
    pub flows: u32,
    /// IPv6 instead of IPv4.
    pub ipv6: bool,
    /// Source address (default: the testbed generator's).
    pub src: Option<IpAddr>,
    /// Destination address (default: the testbed sink's).
    pub dst: Option<IpAddr>,
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source MAC.
    pub src_mac: [u8; 6],
}

/// A generator setting that cannot work.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GenError {
    /// Size out of range.
    #[error("frame size {0} must be 64..={MAX_FRAME} (IPv6: 66..={MAX_FRAME}; over 1518 is a jumbo frame, for links of MTU 9000)")]
    Size(usize),
    /// Flow count out of range.
    #[error("flows {0} must be 1..=65000")]
    Flows(u32),
    /// The flows' source ports would pass 65535.
    #[error("first source port {base} with {flows} flows passes port 65535")]
    Sport {
        /// First port.
        base: u16,
        /// Flows.
        flows: u32,
    },
    /// Address of the wrong family.
    #[error("{what} {addr} is not an IPv{family} address")]
    Family {
        /// src or dst.
        what: &'static str,
        /// The address.
        addr: IpAddr,
        /// Expected family.
        family: u8,
    },
}

/// First UDP source port; flow `k` uses `SPORT_BASE + k`.
pub(crate) const SPORT_BASE: u16 = 10_000;

/// The template and where the per-flow field sits.
#[derive(Debug, Clone)]
pub struct Template {
    /// The whole frame (flow 0).
    pub frame: Vec<u8>,
    /// Number of flows.
    pub flows: u32,
    /// Offset of the UDP header.
    pub l4_off: usize,
    /// Header bytes the program rewrites on every run.
    pub hdr_len: usize,
    /// Flow 0's UDP source port (flow `k` uses this + k).
    sport_base: u16,
}

/// Largest frame the generator builds: a 9000-byte IP packet, its Ethernet header and FCS.
pub const MAX_FRAME: usize = 9018;

impl Template {
    /// Builds the template for `spec`.
    pub fn new(spec: &GenSpec) -> Result<Template, GenError> {
        let min = if spec.ipv6 { 66 } else { 64 };
        if !(min..=MAX_FRAME).contains(&spec.size) {
            return Err(GenError::Size(spec.size));
        }
        if !(1..=65_000).contains(&spec.flows) {
            return Err(GenError::Flows(spec.flows));
        }
        for (what, a) in [("src", spec.src), ("dst", spec.dst)] {
            if let Some(addr) = a.filter(|a| a.is_ipv6() != spec.ipv6) {
                return Err(GenError::Family {
                    what,
                    addr,
                    family: if spec.ipv6 { 6 } else { 4 },
                });
            }
        }
        let mut f = FrameSpec {
            dst_mac: spec.dst_mac,
            src_mac: spec.src_mac,
            sport: SPORT_BASE,
            ..FrameSpec::default()
        };
        let frame = if spec.ipv6 {
            f.src6 = match spec.src {
                Some(IpAddr::V6(a)) => a,
                _ => testbed::GEN_V6.parse().expect("constant address"),
            };
            f.dst6 = match spec.dst {
                Some(IpAddr::V6(a)) => a,
                _ => testbed::SINK_V6.parse().expect("constant address"),
            };
            f.payload_len = FrameSpec::v6_payload_for_wire_size(spec.size);
            udp_v6(&f)
        } else {
            f.src4 = match spec.src {
                Some(IpAddr::V4(a)) => a,
                _ => testbed::GEN_V4.parse().expect("constant address"),
            };
            f.dst4 = match spec.dst {
                Some(IpAddr::V4(a)) => a,
                _ => testbed::SINK_V4.parse().expect("constant address"),
            };
            f.payload_len = FrameSpec::v4_payload_for_wire_size(spec.size);
            udp_v4(&f)
        };
        let (hdr_len, l4_off) = if spec.ipv6 { (62, 54) } else { (56, 34) };
        Ok(Template {
            frame,
            flows: spec.flows,
            l4_off,
            hdr_len,
            sport_base: SPORT_BASE,
        })
    }

    /// Makes `base` flow 0's UDP source port (flow `k`: `base + k`; the default is 10000):
    /// the frame's port and UDP checksum follow. A test can pick the flows an RSS hash puts
    /// on a given queue.
    pub fn first_sport(&mut self, base: u16) -> Result<(), GenError> {
        if u32::from(base) + self.flows > 65_536 {
            return Err(GenError::Sport {
                base,
                flows: self.flows,
            });
        }
        let old = self.sport_base;
        self.frame[self.l4_off..self.l4_off + 2].copy_from_slice(&base.to_be_bytes());
        let c = self.udp_csum();
        if c != 0 {
            let new = match checksum_update(c, old, base) {
                0 => 0xffff,
                v => v,
            };
            self.frame[self.l4_off + 6..self.l4_off + 8].copy_from_slice(&new.to_be_bytes());
        }
        self.sport_base = base;
        Ok(())
    }

    /// Clears IPv4's don't-fragment bit (the header checksum follows), so a router may
    /// fragment the frames; IPv6 has no such bit (false: nothing to clear).
    pub fn clear_df(&mut self) -> bool {
        use crate::packet::field::{eth, ipv4};
        if self.l4_off != eth::HLEN + ipv4::HLEN {
            return false;
        }
        let flags = eth::HLEN + ipv4::FLAGS_FRAG;
        let sum = eth::HLEN + ipv4::CHECKSUM;
        self.frame[flags] &= !0x40;
        self.frame[sum..sum + 2].fill(0);
        let c = crate::packet::checksum(&self.frame[eth::HLEN..eth::HLEN + ipv4::HLEN]);
        self.frame[sum..sum + 2].copy_from_slice(&c.to_be_bytes());
        true
    }

    fn udp_csum(&self) -> u16 {
        u16::from_be_bytes([self.frame[self.l4_off + 6], self.frame[self.l4_off + 7]])
    }

    /// The BPF program's load-time configuration.
    pub(crate) fn config(&self) -> GenConfig {
        let mut hdr = [0u8; 64];
        hdr[..self.hdr_len].copy_from_slice(&self.frame[..self.hdr_len]);
        GenConfig {
            hdr_len: self.hdr_len as u32,
            flows: self.flows,
            sport_base: self.sport_base,
            l4_off: self.l4_off as u16,
            udp_csum: self.udp_csum(),
            ip_id: self.ip_id().unwrap_or(0),
            hdr,
        }
    }

    /// IPv4: the template's IP ID (each flow's frames carry it plus their number in the
    /// flow); None for IPv6.
    fn ip_id(&self) -> Option<u16> {
        use crate::packet::field::{eth, ipv4};
        (self.l4_off == eth::HLEN + ipv4::HLEN).then(|| {
            let at = eth::HLEN + ipv4::IDENT;
            u16::from_be_bytes([self.frame[at], self.frame[at + 1]])
        })
    }

    /// The frame the program sends as its `n`-th (what a receiver should see), computed the
    /// way `bpf/gen.bpf.c` computes it.
    pub fn expected(&self, n: u64) -> Vec<u8> {
        let mut f = Vec::new();
        self.write(n, &mut f);
        f
    }

    /// Writes the `n`-th frame into `f` (reusing its allocation): flow `n % flows` (its UDP
    /// source port) and, for IPv4, its number in the flow `n / flows` in the IP ID, which
    /// the sink's reordering count reads.
    pub(crate) fn write(&self, n: u64, f: &mut Vec<u8>) {
        f.resize(self.frame.len(), 0);
        self.write_into(n, f);
    }

    /// [`Template::write`] into `f`, exactly as long as the template's frame (nothing
    /// written otherwise).
    pub(crate) fn write_into(&self, n: u64, f: &mut [u8]) {
        use crate::packet::field::{eth, ipv4};
        if f.len() != self.frame.len() {
            return;
        }
        f.copy_from_slice(&self.frame);
        let flows = u64::from(self.flows);
        if let Some(base) = self.ip_id() {
            let id = base.wrapping_add((n / flows) as u16);
            let at = eth::HLEN + ipv4::IDENT;
            let sum = eth::HLEN + ipv4::CHECKSUM;
            let c = u16::from_be_bytes([f[sum], f[sum + 1]]);
            f[at..at + 2].copy_from_slice(&id.to_be_bytes());
            f[sum..sum + 2].copy_from_slice(&checksum_update(c, base, id).to_be_bytes());
        }
        let sport = self.sport_base.wrapping_add((n % flows) as u16);
        f[self.l4_off..self.l4_off + 2].copy_from_slice(&sport.to_be_bytes());
        let c = self.udp_csum();
        if c != 0 {
            let new = match checksum_update(c, self.sport_base, sport) {
                0 => 0xffff,
                v => v,
            };
            f[self.l4_off + 6..self.l4_off + 8].copy_from_slice(&new.to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::build::udp6_checksum;
    use crate::packet::{checksum, parse_l3, L3};

    fn spec(ipv6: bool, size: usize) -> GenSpec {
        GenSpec {
            size,
            flows: 7,
            ipv6,
            src: None,
            dst: None,
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_mac: [2, 0, 0, 0, 0, 1],
        }
    }

    #[test]
    fn a_first_source_port_moves_every_flow_and_keeps_checksums_valid() {
        let mut t = Template::new(&GenSpec {
            flows: 3,
            ..spec(true, 512)
        })
        .expect("valid");
        t.first_sport(40_000).expect("fits");
        for n in 0..6 {
            let f = t.expected(n);
            let sport = u16::from_be_bytes([f[54], f[55]]);
            assert_eq!(sport, 40_000 + (n % 3) as u16);
            let stored = u16::from_be_bytes([f[60], f[61]]);
            assert_eq!(stored, udp6_checksum(&f[14..]), "frame {n}");
        }
        assert_eq!(
            t.first_sport(65_534).unwrap_err(),
            GenError::Sport {
                base: 65_534,
                flows: 3
            }
        );
    }

    #[test]
    fn clearing_df_keeps_the_header_checksum_valid() {
        let mut t = Template::new(&spec(false, 1400)).expect("valid");
        assert_eq!(t.frame[20] & 0x40, 0x40, "DF set by default");
        assert!(t.clear_df());
        assert_eq!(t.frame[20] & 0x40, 0);
        assert_eq!(checksum(&t.frame[14..34]), 0);
        assert!(!Template::new(&spec(true, 512)).expect("valid").clear_df());
    }

    #[test]
    fn frames_parse_back_with_valid_checksums_and_flows() {
        for (ipv6, size) in [
            (false, 64),
            (false, 1518),
            (true, 66),
            (true, 512),
            (false, 9018),
        ] {
            let t = Template::new(&spec(ipv6, size)).expect("valid");
            assert_eq!(t.frame.len() + 4, size, "wire size includes the FCS");
            let mut ports = std::collections::BTreeSet::new();
            for n in 0..21 {
                let f = t.expected(n);
                match parse_l3(&f).expect("valid frame") {
                    L3::V4 { dst, .. } => {
                        assert_eq!(
                            dst,
                            u32::from(testbed::SINK_V4.parse::<std::net::Ipv4Addr>().unwrap())
                        );
                        assert_eq!(checksum(&f[14..34]), 0);
                        // The frame's number in its flow, in the IP ID (spec: 4 flows).
                        let base = t.ip_id().expect("IPv4");
                        let id = u16::from_be_bytes([f[18], f[19]]);
                        assert_eq!(id, base.wrapping_add((n / u64::from(t.flows)) as u16));
                    }
                    L3::V6 { dst, .. } => {
                        assert_eq!(
                            dst,
                            u128::from(testbed::SINK_V6.parse::<std::net::Ipv6Addr>().unwrap())
                        );
                        let stored = u16::from_be_bytes([f[60], f[61]]);
                        assert_eq!(stored, udp6_checksum(&f[14..]), "flow {n}: UDP checksum");
                    }
                }
                ports.insert(u16::from_be_bytes([f[t.l4_off], f[t.l4_off + 1]]));
            }
            assert_eq!(ports.len(), 7, "one source port per flow");
        }
    }

    #[test]
    fn bad_specs_are_refused() {
        assert_eq!(
            Template::new(&spec(false, 63)).unwrap_err(),
            GenError::Size(63)
        );
        assert_eq!(
            Template::new(&spec(true, 64)).unwrap_err(),
            GenError::Size(64)
        );
        let mut s = spec(false, 64);
        s.flows = 0;
        assert_eq!(Template::new(&s).unwrap_err(), GenError::Flows(0));
        s.flows = 1;
        s.dst = Some("2001:db8::1".parse().unwrap());
        assert!(matches!(
            Template::new(&s).unwrap_err(),
            GenError::Family { what: "dst", .. }
        ));
    }

    #[test]
    fn config_carries_the_template() {
        let t = Template::new(&spec(true, 128)).expect("valid");
        let c = t.config();
        assert_eq!(c.hdr_len, 62);
        assert_eq!(&c.hdr[..62], &t.frame[..62]);
        assert_eq!(c.l4_off, 54);
        assert_ne!(c.udp_csum, 0);
    }
}
