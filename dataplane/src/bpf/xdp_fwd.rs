//! The in-kernel forwarder peer (`bpf/xdp_fwd.bpf.c`, bpf_fib_lookup), measured beside
//! the dataplane.
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags};

use super::{attach, lb, object_storage, skel, sum_percpu_u64, BpfError};

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
