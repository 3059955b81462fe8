//! The XDP programs in `bpf/`: loading (libbpf-rs skeletons), attaching through a bpf_link,
//! and reading their per-CPU counters.
//!
//! Attaching through a link means the program is detached when the link descriptor is closed —
//! on drop, and by the kernel if the process dies — and never detaches a program someone else
//! attached (a netlink detach would remove whatever is there).

use std::mem::MaybeUninit;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, OpenObject};

use crate::sys;

mod skel;
pub mod toeplitz;

pub use skel::gen::types::dp_gen_cfg as GenConfig;

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

/// A BPF step failed.
#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    /// libbpf refused to open/load, or a map operation failed.
    #[error("{what}")]
    Libbpf {
        /// What was being done.
        what: String,
        /// Cause.
        #[source]
        source: libbpf_rs::Error,
    },
    /// The driver refused the program at the interface's MTU (ERANGE, or EINVAL where the
    /// MTU is over what the driver's XDP takes).
    #[error(
        "attaching XDP ({mode}) to {ifname}: the driver refuses XDP at its MTU of {mtu} bytes \
         ({source}); the steering program handles multi-buffer packets (xdp.frags), so this \
         driver has no XDP multi-buffer at this MTU: lower {ifname}'s MTU (one page holds \
         about 3,500 bytes) or use xdp_mode = \"generic\""
    )]
    AttachMtu {
        /// Interface.
        ifname: String,
        /// native/generic.
        mode: &'static str,
        /// The interface's MTU then.
        mtu: u32,
        /// Cause.
        source: sys::SyscallError,
    },
    /// Attaching failed.
    #[error("attaching XDP ({mode}) to {ifname}")]
    Attach {
        /// Interface.
        ifname: String,
        /// native/generic.
        mode: &'static str,
        /// Cause.
        #[source]
        source: sys::SyscallError,
    },
}

fn lb(what: impl Into<String>) -> impl FnOnce(libbpf_rs::Error) -> BpfError {
    let what = what.into();
    move |source| BpfError::Libbpf { what, source }
}

/// Storage for an opened object. Skeletons borrow it for their lifetime; one small allocation
/// per loaded program is leaked to give it `'static` (the object itself is closed on drop).
fn object_storage() -> &'static mut MaybeUninit<OpenObject> {
    Box::leak(Box::new(MaybeUninit::uninit()))
}

fn sum_percpu_u64(values: Option<Vec<Vec<u8>>>) -> u64 {
    values
        .unwrap_or_default()
        .iter()
        .map(|v| {
            v.get(..8)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_ne_bytes)
        })
        .sum()
}

fn attach(prog_fd: i32, ifname: &str, generic: bool) -> Result<OwnedFd, BpfError> {
    let ifindex = sys::if_index(ifname).map_err(|source| BpfError::Attach {
        ifname: ifname.into(),
        mode: mode_name(generic),
        source,
    })?;
    sys::xdp_link_create(prog_fd, ifindex, generic).map_err(|source| {
        let mtu = sys::interface_mtu(ifname).unwrap_or(0);
        // veth says ERANGE for a peer MTU over what its XDP takes; virtio_net says EINVAL
        // ("MTU too large to enable XDP") beyond a page without mergeable buffers.
        let mtu_refused = source.errno() == Some(libc::ERANGE)
            || (source.errno() == Some(libc::EINVAL) && mtu > 3500);
        if mtu_refused {
            BpfError::AttachMtu {
                ifname: ifname.into(),
                mode: mode_name(generic),
                mtu,
                source,
            }
        } else {
            BpfError::Attach {
                ifname: ifname.into(),
                mode: mode_name(generic),
                source,
            }
        }
    })
}

fn mode_name(generic: bool) -> &'static str {
    if generic {
        "generic"
    } else {
        "native"
    }
}

/// How an interface's XDP program is attached, as the kernel reports it (`bpf_xdp_query`,
/// the netlink IFLA_XDP attributes): read back, never inferred from what was asked for.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Attached {
    /// Interface.
    pub ifname: String,
    /// `native` (in the driver), `generic` (skb), `offload`, `multi`, or `none`.
    pub mode: &'static str,
    /// The attached program's id (in its mode).
    pub prog_id: u32,
    /// True when that is this steering program.
    pub ours: bool,
    /// The driver offers AF_XDP zero-copy (the `xsk-zerocopy` XDP feature).
    pub xsk_zerocopy: bool,
    /// Most buffers per packet a zero-copy socket may take (1: no multi-buffer).
    pub zc_max_segs: u32,
}

/// `XDP_ATTACHED_*` (linux/if_link.h) by value.
fn attach_mode_name(mode: u8) -> &'static str {
    match mode {
        0 => "none",
        1 => "native",
        2 => "generic",
        3 => "offload",
        _ => "multi",
    }
}

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

/// The in-kernel XDP forwarder (bpf_fib_lookup + bpf_redirect), attached to each interface.
pub struct XdpFwd {
    skel: skel::xdp_fwd::XdpFwdSkel<'static>,
    /// Held, never read: dropping them detaches the program.
    _links: Vec<OwnedFd>,
}

impl XdpFwd {
    /// Loads the program and attaches it to every interface in `ifnames`.
    pub fn attach(ifnames: &[String], generic: bool) -> Result<XdpFwd, BpfError> {
        let open = skel::xdp_fwd::XdpFwdSkelBuilder::default()
            .open(object_storage())
            .map_err(lb("opening xdp_fwd.bpf.o"))?;
        let skel = open
            .load()
            .map_err(lb("loading xdp_fwd.bpf.o (verifier)"))?;
        let fd = skel.progs.xdp_fib_fwd.as_fd().as_raw_fd();
        let links = ifnames
            .iter()
            .map(|i| attach(fd, i, generic))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(XdpFwd {
            skel,
            _links: links,
        })
    }

    /// (redirected, passed to the stack), summed over CPUs.
    pub fn counts(&self) -> (u64, u64) {
        let m = &self.skel.maps.fwd_stats;
        let get = |i: u32| {
            sum_percpu_u64(
                m.lookup_percpu(&i.to_ne_bytes(), MapFlags::ANY)
                    .ok()
                    .flatten(),
            )
        };
        (get(0), get(1))
    }
}

/// The live-frames generator program.
pub(crate) struct Gen {
    skel: skel::gen::GenSkel<'static>,
}

/// BPF_F_TEST_XDP_LIVE_FRAMES (linux/bpf.h).
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;

impl Gen {
    /// Loads the generator with its header template.
    pub(crate) fn load(cfg: GenConfig) -> Result<Gen, BpfError> {
        let mut open = skel::gen::GenSkelBuilder::default()
            .open(object_storage())
            .map_err(lb("opening gen.bpf.o"))?;
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.cfg = cfg;
        }
        let skel = open.load().map_err(lb("loading gen.bpf.o (verifier)"))?;
        Ok(Gen { skel })
    }

    /// Sends `frame` `repeat` times out of `ifindex` (in the caller's netns) as live frames,
    /// from the calling CPU. Returns the kernel's average time per frame.
    pub(crate) fn send(
        &self,
        frame: &[u8],
        ifindex: u32,
        queue: u32,
        repeat: u32,
    ) -> Result<std::time::Duration, BpfError> {
        let mut ctx = skel::gen::types::xdp_md {
            data: 0,
            data_end: frame.len() as u32,
            ingress_ifindex: ifindex,
            rx_queue_index: queue,
            ..Default::default()
        };
        #[allow(unsafe_code)]
        // SAFETY: xdp_md is a plain repr(C) struct of u32 fields without padding, so viewing it
        // as bytes is sound; the slice does not outlive `ctx`.
        let ctx_bytes = unsafe {
            std::slice::from_raw_parts_mut(
                (&mut ctx as *mut skel::gen::types::xdp_md).cast::<u8>(),
                std::mem::size_of_val(&ctx),
            )
        };
        let input = libbpf_rs::ProgramInput {
            context_in: Some(ctx_bytes),
            data_in: Some(frame),
            flags: BPF_F_TEST_XDP_LIVE_FRAMES,
            repeat,
            ..Default::default()
        };
        let out = self
            .skel
            .progs
            .xdp_gen
            .test_run(input)
            .map_err(lb("BPF_PROG_TEST_RUN (live frames)"))?;
        Ok(out.duration)
    }

    /// Frames the program has handled, summed over CPUs.
    pub(crate) fn count(&self) -> u64 {
        sum_percpu_u64(
            self.skel
                .maps
                .gen_count
                .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
                .ok()
                .flatten(),
        )
    }
}
