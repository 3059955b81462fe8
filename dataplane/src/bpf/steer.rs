//! The steering program (`bpf/steer.bpf.c`, `xdp_steer` and the device-bound
//! `xdp_steer_rss`): which frames go to the sockets, and the RSS bucket counts.
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags};

use crate::sys;

use super::{
    attach, attach_mode_name, lb, object_storage, skel, sum_percpu_u64, toeplitz, Attached,
    BpfError,
};

/// Names of the steering program's counters, in `enum dp_steer_stat` order (bpf/dataplane.h).
pub const STEER_STAT_NAMES: [&str; 12] = [
    "redirected",
    "pass_not_ip",
    "pass_local",
    "pass_control",
    "pass_no_socket",
    "pass_other_host",
    "pass_vlan",
    "pass_options",
    "drop_multicast_source",
    "pass_foreign",
    "rss_no_hash",
    "rss_soft_hash",
];

/// Largest RSS indirection table whose buckets the steering program counts
/// (`DP_MAX_RSS_BUCKETS`).
pub const MAX_RSS_BUCKETS: u32 = 2048;

/// `NETDEV_XDP_ACT_XSK_ZEROCOPY` (linux/netdev.h).
const XDP_ACT_XSK_ZEROCOPY: u64 = 1 << 3;

/// `BPF_F_XDP_DEV_BOUND_ONLY` (linux/bpf.h): the program uses the device's metadata kfuncs
/// and attaches to that device only.
const XDP_DEV_BOUND_ONLY: u32 = 1 << 6;

/// Counting RSS buckets: which device's hash to read, and its indirection table's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RssCounting {
    /// The port's interface index (the program is bound to that device).
    pub ifindex: u32,
    /// Entries in the port's indirection table (1..=[`MAX_RSS_BUCKETS`]).
    pub table_size: u32,
    /// The device's Toeplitz key and hashed fields, for frames the device hands up without
    /// a hash: the program then computes it (`rss_soft_hash`). None: such frames are
    /// counted as `rss_no_hash`.
    pub soft: Option<SoftRss>,
}

/// What the steering program needs to compute a device's RSS hash itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SoftRss {
    /// The device's key (its first [`toeplitz::KEY_LEN`] bytes: all that hashing
    /// [`toeplitz::MAX_INPUT`] bytes reads).
    pub key: [u8; toeplitz::KEY_LEN],
    /// What the device hashes per class of frame, in [`RSS_CLASSES`]' order.
    pub modes: [SoftMode; RSS_CLASSES],
}

/// Classes of frame as a device's RSS tells them apart (`ethtool -n IF rx-flow-hash
/// tcp4` and the like), in the steering program's `enum rss_class` order: TCP/IPv4,
/// UDP/IPv4, other IPv4 (and IPv4 fragments), TCP/IPv6, UDP/IPv6, other IPv6.
pub const RSS_CLASSES: usize = 6;

/// What a device hashes for one class of frame, as the steering program can follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SoftMode {
    /// Not computed by the program: the device hashes nothing for the class (its frames
    /// go to the default queue), or fields the program does not follow (one address, one
    /// port); such frames are counted as `rss_no_hash`.
    None = 0,
    /// Source and destination addresses.
    Addresses = 1,
    /// Addresses, then source and destination ports.
    AddressesAndPorts = 2,
}

/// The steering program of one interface, with its own XSKMAP.
pub struct Steer {
    skel: skel::steer::SteerSkel<'static>,
    link: Option<OwnedFd>,
    ifname: String,
    /// Set when the loaded program is `xdp_steer_rss`.
    rss: Option<RssCounting>,
}

impl Steer {
    /// Opens and loads (not attached yet); frames to `port_mac` are the port's own.
    pub fn load(ifname: &str, port_mac: [u8; 6]) -> Result<Steer, BpfError> {
        Steer::load_with(ifname, port_mac, None)
    }

    /// Loads `xdp_steer`, or with `rss` the device-bound `xdp_steer_rss`, which also counts
    /// redirected packets per bucket of the NIC's indirection table, by the NIC's hash. A
    /// device-bound program attaches natively only (never generic).
    pub fn load_with(
        ifname: &str,
        port_mac: [u8; 6],
        rss: Option<RssCounting>,
    ) -> Result<Steer, BpfError> {
        let mut open = skel::steer::SteerSkelBuilder::default()
            .open(object_storage())
            .map_err(lb("opening steer.bpf.o"))?;
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.port_mac = port_mac;
            ro.rss_table_size = rss.map_or(1, |r| r.table_size.clamp(1, MAX_RSS_BUCKETS));
            if let Some(soft) = rss.and_then(|r| r.soft) {
                ro.rss_soft = 1;
                ro.rss_soft_mode = soft.modes.map(|m| m as u8);
                ro.rss_soft_table = *toeplitz::tables(&soft.key);
            }
        }
        match rss {
            Some(r) => {
                open.progs.xdp_steer.set_autoload(false);
                open.progs.xdp_steer_rss.set_ifindex(r.ifindex);
                open.progs.xdp_steer_rss.set_flags(XDP_DEV_BOUND_ONLY);
            }
            None => open.progs.xdp_steer_rss.set_autoload(false),
        }
        let skel = open.load().map_err(lb(if rss.is_some() {
            format!("loading steer.bpf.o (verifier), xdp_steer_rss bound to {ifname}")
        } else {
            "loading steer.bpf.o (verifier)".to_string()
        }))?;
        Ok(Steer {
            skel,
            link: None,
            ifname: ifname.into(),
            rss,
        })
    }

    /// The loaded program's fd.
    fn prog_fd(&self) -> BorrowedFd<'_> {
        if self.rss.is_some() {
            self.skel.progs.xdp_steer_rss.as_fd()
        } else {
            self.skel.progs.xdp_steer.as_fd()
        }
    }

    /// Whether this program counts RSS buckets, and over which table size.
    pub fn rss_counting(&self) -> Option<RssCounting> {
        self.rss
    }

    /// Packets redirected per RSS bucket since load, summed over CPUs (empty when the
    /// program does not count buckets). Read into `out`, reused between calls.
    pub fn rss_buckets(&self, out: &mut Vec<u64>) {
        out.clear();
        let Some(r) = self.rss else { return };
        let m = &self.skel.maps.rss_buckets;
        out.extend((0..r.table_size.min(MAX_RSS_BUCKETS)).map(|b| {
            sum_percpu_u64(
                m.lookup_percpu(&b.to_ne_bytes(), MapFlags::ANY)
                    .ok()
                    .flatten(),
            )
        }));
    }

    /// Marks an address as the box's own: frames to it are passed to the kernel.
    pub(crate) fn add_local(&mut self, addr: IpAddr) -> Result<(), BpfError> {
        let one = [1u8];
        match addr {
            IpAddr::V4(a) => self
                .skel
                .maps
                .local_v4
                .update(&a.octets(), &one, MapFlags::ANY),
            IpAddr::V6(a) => self
                .skel
                .maps
                .local_v6
                .update(&a.octets(), &one, MapFlags::ANY),
        }
        .map_err(lb(format!("adding local address {addr}")))
    }

    /// Steers frames with the tag stack `key` ([`crate::packet::vlan::TagStack::key`]) as a
    /// sub-interface's: to the sockets, for the poller to pop.
    pub(crate) fn add_vlan(&mut self, key: u32) -> Result<(), BpfError> {
        let what = || format!("adding sub-interface tags {key:#x}");
        let cpus = libbpf_rs::num_possible_cpus().map_err(lb(what()))?;
        let zeros = vec![0u64.to_ne_bytes().to_vec(); cpus];
        self.skel
            .maps
            .vlans
            .update_percpu(&key.to_ne_bytes(), &zeros, MapFlags::ANY)
            .map_err(lb(what()))
    }

    /// Frames to the port's MAC that carried the tag stack `key`, summed over CPUs (0 for a
    /// stack not added).
    pub(crate) fn vlan_frames(&self, key: u32) -> u64 {
        sum_percpu_u64(
            self.skel
                .maps
                .vlans
                .lookup_percpu(&key.to_ne_bytes(), MapFlags::ANY)
                .ok()
                .flatten(),
        )
    }

    /// Forgets an address the box no longer has: frames to it are forwarded again.
    pub(crate) fn remove_local(&mut self, addr: IpAddr) -> Result<(), BpfError> {
        match addr {
            IpAddr::V4(a) => self.skel.maps.local_v4.delete(&a.octets()),
            IpAddr::V6(a) => self.skel.maps.local_v6.delete(&a.octets()),
        }
        .map_err(lb(format!("removing local address {addr}")))
    }

    /// What becomes of destinations whose longest match is `prefix/len` (canonical):
    /// `Some(true)` passed to the kernel (a route out of an interface the dataplane does not
    /// own), `Some(false)` the dataplane's (a route of its own nested in such a prefix),
    /// `None` neither any more.
    pub(crate) fn set_foreign(
        &mut self,
        prefix: IpAddr,
        len: u8,
        pass: Option<bool>,
    ) -> Result<(), BpfError> {
        let mut key = u32::from(len).to_ne_bytes().to_vec();
        let map = match prefix {
            IpAddr::V4(a) => {
                key.extend_from_slice(&a.octets());
                &self.skel.maps.foreign_v4
            }
            IpAddr::V6(a) => {
                key.extend_from_slice(&a.octets());
                &self.skel.maps.foreign_v6
            }
        };
        match pass {
            Some(p) => map.update(&key, &[u8::from(p)], MapFlags::ANY),
            None => map.delete(&key),
        }
        .map_err(lb(format!("foreign-route map: {prefix}/{len}")))
    }

    /// Turns the foreign-route lookups on (while a foreign prefix is in the maps) or off.
    pub(crate) fn set_foreign_lookups(&mut self, on: bool) -> Result<(), BpfError> {
        self.skel
            .maps
            .foreign_on
            .update(
                &0u32.to_ne_bytes(),
                &u32::from(on).to_ne_bytes(),
                MapFlags::ANY,
            )
            .map_err(lb("foreign-route switch"))
    }

    /// Steers rx queue `queue` to the AF_XDP socket `fd`.
    pub(crate) fn register_socket(&mut self, queue: u32, fd: i32) -> Result<(), BpfError> {
        self.skel
            .maps
            .xsks
            .update(
                &queue.to_ne_bytes(),
                &(fd as u32).to_ne_bytes(),
                MapFlags::ANY,
            )
            .map_err(lb(format!("XSKMAP[{queue}] of {}", self.ifname)))
    }

    /// Attaches to the interface.
    pub(crate) fn attach(&mut self, generic: bool) -> Result<(), BpfError> {
        let fd = self.prog_fd().as_raw_fd();
        self.link = Some(attach(fd, &self.ifname, generic)?);
        Ok(())
    }

    /// How the kernel says the interface's XDP program is attached now.
    pub(crate) fn attached(&self) -> Result<Attached, BpfError> {
        let fd = self.prog_fd();
        let ifindex = sys::if_index(&self.ifname).map_err(|source| BpfError::Attach {
            ifname: self.ifname.clone(),
            mode: "query",
            source,
        })?;
        let q = libbpf_rs::Xdp::new(fd)
            .query(
                i32::try_from(ifindex).unwrap_or(i32::MAX),
                libbpf_rs::XdpFlags::NONE,
            )
            .map_err(lb(format!("bpf_xdp_query on {}", self.ifname)))?;
        let ours =
            libbpf_rs::Program::id_from_fd(fd).map_err(lb("reading the steering program's id"))?;
        let prog_id = match q.attach_mode {
            1 => q.drv_prog_id,
            2 => q.skb_prog_id,
            3 => q.hw_prog_id,
            _ => q.prog_id,
        };
        Ok(Attached {
            ifname: self.ifname.clone(),
            mode: attach_mode_name(q.attach_mode),
            prog_id,
            ours: prog_id != 0 && prog_id == ours,
            xsk_zerocopy: q.feature_flags & XDP_ACT_XSK_ZEROCOPY != 0,
            zc_max_segs: q.xdp_zc_max_segs,
        })
    }

    /// Detaches (closes the link). Idempotent.
    pub(crate) fn detach(&mut self) {
        self.link = None;
    }

    /// Interface name.
    pub(crate) fn ifname(&self) -> &str {
        &self.ifname
    }

    /// Counters summed over CPUs, in [`STEER_STAT_NAMES`] order.
    pub(crate) fn stats(&self) -> [u64; STEER_STAT_NAMES.len()] {
        let m = &self.skel.maps.steer_stats;
        std::array::from_fn(|i| {
            sum_percpu_u64(
                m.lookup_percpu(&(i as u32).to_ne_bytes(), MapFlags::ANY)
                    .ok()
                    .flatten(),
            )
        })
    }

    /// Slots in the BPF counter map (must equal [`STEER_STAT_NAMES`]'s length).
    pub fn stat_slots(&self) -> u32 {
        self.skel.maps.steer_stats.max_entries()
    }
}
