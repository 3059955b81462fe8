//! The sink program (`bpf/sink.bpf.c`): counts and drops what arrives on an interface.
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags};

use super::{attach, lb, object_storage, skel, BpfError};

/// The counting sink.
pub struct Sink {
    skel: skel::sink::SinkSkel<'static>,
    _link: OwnedFd,
}

impl Sink {
    /// Loads and attaches to `ifname`; UDP frames to `match_dport` (if non-zero) are also
    /// counted as matched.
    pub fn attach(ifname: &str, generic: bool, match_dport: u16) -> Result<Sink, BpfError> {
        let mut open = skel::sink::SinkSkelBuilder::default()
            .open(object_storage())
            .map_err(lb("opening sink.bpf.o"))?;
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.match_dport = match_dport;
        }
        let skel = open.load().map_err(lb("loading sink.bpf.o"))?;
        let link = attach(skel.progs.xdp_sink.as_fd().as_raw_fd(), ifname, generic)?;
        Ok(Sink { skel, _link: link })
    }

    /// Counts so far, summed over CPUs.
    pub fn counts(&self) -> SinkCounts {
        let v = self
            .skel
            .maps
            .sink_stats
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
            .ok()
            .flatten();
        v.unwrap_or_default()
            .iter()
            .fold(SinkCounts::default(), |c, rec| {
                let word = |o: usize| {
                    rec.get(o..o + 8)
                        .and_then(|s| s.try_into().ok())
                        .map_or(0, u64::from_ne_bytes)
                };
                SinkCounts {
                    packets: c.packets + word(0),
                    bytes: c.bytes + word(8),
                    matched: c.matched + word(16),
                    reordered: c.reordered + word(24),
                }
            })
    }
}

/// What the sink has seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SinkCounts {
    /// Every frame.
    pub packets: u64,
    /// Their bytes (without FCS).
    pub bytes: u64,
    /// UDP frames to the match port.
    pub matched: u64,
    /// Matched IPv4 frames behind a higher number of their flow (the generator numbers each
    /// flow's frames in the IP ID): RFC 4737's reordered packets.
    pub reordered: u64,
}

impl SinkCounts {
    /// `self - earlier`.
    pub fn since(&self, earlier: &SinkCounts) -> SinkCounts {
        SinkCounts {
            packets: self.packets.wrapping_sub(earlier.packets),
            bytes: self.bytes.wrapping_sub(earlier.bytes),
            matched: self.matched.wrapping_sub(earlier.matched),
            reordered: self.reordered.wrapping_sub(earlier.reordered),
        }
    }
}
