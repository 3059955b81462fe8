//! The XDP programs in `bpf/`: loading (libbpf-rs skeletons), attaching through a bpf_link,
//! and reading their per-CPU counters; one loader file per program ([`steer`], [`sink`],
//! [`xdp_fwd`], [`gen`]), what they share here.
//!
//! Attaching through a link means the program is detached when the link descriptor is closed —
//! on drop, and by the kernel if the process dies — and never detaches a program someone else
//! attached (a netlink detach would remove whatever is there).

use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;

use libbpf_rs::OpenObject;

use crate::sys;

mod gen;
mod sink;
mod skel;
mod steer;
pub mod toeplitz;
mod xdp_fwd;

pub(crate) use gen::Gen;
pub use sink::{Sink, SinkCounts};
pub use skel::gen::types::dp_gen_cfg as GenConfig;
pub use steer::{
    RssCounting, SoftMode, SoftRss, Steer, MAX_RSS_BUCKETS, RSS_CLASSES, STEER_STAT_NAMES,
};
pub use xdp_fwd::XdpFwd;

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
