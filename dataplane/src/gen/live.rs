//! Flat out: XDP live frames, or AF_XDP TX.
//!
//! Each BPF_PROG_TEST_RUN call costs a fixed ~25 ms of set-up and tear-down (page pool, RCU;
//! measured here), so calls are long (2^18 frames). Where live frames are unavailable (the
//! program does not load, or the first run fails: kernels before 5.18) the same frames go out
//! over AF_XDP TX instead.
use std::time::Instant;

use super::xsk_tx::XskSender;
use super::{Limits, SendError, Template};
use crate::bpf::Gen;
use crate::sys;

/// Frames per live-frames call.
const LIVE_CHUNK: u64 = 1 << 18;
/// Frames per AF_XDP send call (the stop flag is checked between calls).
const XSK_CHUNK: u64 = 1 << 16;

/// Live frames where the kernel has them, else AF_XDP TX; `note` hears about the fallback.
pub(crate) fn flat_out(
    template: &Template,
    iface: &str,
    limits: Limits<'_>,
    mut note: impl FnMut(&str),
) -> Result<u64, SendError> {
    let ifindex = sys::if_index(iface)?;
    let start = Instant::now();
    let gen = match Gen::load(template.config()) {
        Ok(g) => g,
        Err(e) => {
            note(&format!(
                "gen: XDP live frames unavailable ({e}); using AF_XDP TX"
            ));
            return xsk_flat_out(template, iface, limits);
        }
    };
    let mut sent = 0u64;
    while start.elapsed() < limits.duration && sent < limits.count && !limits.stopped() {
        let chunk = (limits.count - sent).min(LIVE_CHUNK);
        if let Err(e) = gen.send(&template.frame, ifindex, 0, chunk as u32) {
            if sent > 0 {
                return Err(e.into());
            }
            note(&format!(
                "gen: XDP live frames unavailable ({e}); using AF_XDP TX"
            ));
            let left = Limits {
                duration: limits.duration.saturating_sub(start.elapsed()),
                ..limits
            };
            return xsk_flat_out(template, iface, left);
        }
        sent += chunk;
    }
    Ok(gen.count())
}

/// AF_XDP TX from queue 0, each frame numbered as the live-frames program numbers it;
/// counts completions.
pub(crate) fn xsk_flat_out(
    template: &Template,
    iface: &str,
    limits: Limits<'_>,
) -> Result<u64, SendError> {
    let ifindex = sys::if_index(iface)?;
    let start = Instant::now();
    let mut tx = XskSender::open(iface, ifindex, 0, template)?;
    let mut done = 0u64;
    while done < limits.count && start.elapsed() < limits.duration && !limits.stopped() {
        let chunk = (limits.count - done).min(XSK_CHUNK);
        done += tx.send(chunk, start + limits.duration);
    }
    Ok(done)
}
