//! Who holds each UMEM frame: the socket it was last given to, and how many each socket's
//! kernel side holds out of sight.
//!
//! A frame the poller hands to a socket (on its fill ring, or its TX ring) is the kernel's
//! until it comes back on that socket's RX or completion ring. In copy mode nearly all of
//! those frames stay visible on a ring. A zero-copy driver takes fill entries off the ring
//! and posts them to the NIC's receive queue: hundreds of frames in no ring at all. When such
//! a socket goes away (its interface deleted, or the poller stopping), the kernel puts them on
//! the pool's own free list and never hands them back to userspace. They are ours again, but
//! only a record of *which* frames the socket held finds them:
//!
//! - [`Owners`] tags every frame with the socket it was last given to (one store per frame
//!   given; nothing on return). A frame tagged `s` and not on the poller's free list is with
//!   socket `s`, because every other place a frame can be (another socket's rings or kernel
//!   side) re-tags it when it is given there, and the poller holds no frame across a batch
//!   boundary.
//! - [`Ledger`] counts, per socket, frames given and frames returned (one add per burst), so
//!   that the frames out of sight can be *counted* independently of the tags:
//!   `held = given - returned - on the socket's rings`. The frame accounting at stop uses the
//!   count; a reclaim checks that the tags found exactly as many.
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]

use crate::port::umem::FreeList;

/// The tag of a frame never given to a socket.
const NOBODY: u16 = u16::MAX;

/// The most sockets one poller can tag (tag `NOBODY` is reserved).
pub(crate) const MAX_SOCKETS: usize = NOBODY as usize;

/// Per-frame tags: the socket each frame was last given to.
pub(crate) struct Owners {
    tag: Box<[u16]>,
    /// log2 of the frame size: frame number = address >> shift.
    shift: u32,
}

impl Owners {
    /// Tags for `frames` frames of `frame_size` bytes (a power of two), none given yet.
    pub(crate) fn new(frames: u32, frame_size: u32) -> Owners {
        Owners {
            tag: vec![NOBODY; frames as usize].into_boxed_slice(),
            shift: frame_size.trailing_zeros(),
        }
    }

    /// Records that the frame at `addr` (any address inside it) was given to socket `socket`.
    /// An address outside the UMEM is not recorded (the rings would refuse it anyway).
    #[inline(always)]
    pub(crate) fn give(&mut self, addr: u64, socket: u16) {
        if let Some(t) = usize::try_from(addr >> self.shift)
            .ok()
            .and_then(|f| self.tag.get_mut(f))
        {
            *t = socket;
        }
    }

    /// Takes back every frame last given to `socket` that is not on `free`, onto `free`, and
    /// tags them as nobody's. Returns how many. Cold: run once the socket is gone for good
    /// (nothing in the kernel writes its frames any more).
    pub(crate) fn reclaim(&mut self, socket: u16, free: &mut FreeList) -> u64 {
        let mut on_free = vec![false; self.tag.len()];
        for a in free.iter() {
            if let Some(f) = usize::try_from(a >> self.shift)
                .ok()
                .and_then(|f| on_free.get_mut(f))
            {
                *f = true;
            }
        }
        let mut n = 0;
        for (frame, (t, is_free)) in self.tag.iter_mut().zip(on_free).enumerate() {
            if *t == socket {
                *t = NOBODY;
                if !is_free {
                    free.push((frame as u64) << self.shift);
                    n += 1;
                }
            }
        }
        n
    }
}

/// What one socket was given and gave back, as running totals that wrap as the rings'
/// own indices do.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Ledger {
    /// Frames posted to the fill ring.
    pub filled: u32,
    /// Frames read off the RX ring.
    pub received: u32,
    /// Frames put on the TX ring.
    pub sent: u32,
    /// Frames read off the completion ring.
    pub completed: u32,
}

impl Ledger {
    /// Where this socket's frames are, given what its four rings show now (each read once).
    pub(crate) fn frames(&self, fill: u32, rx: u32, tx: u32, completion: u32) -> SocketFrames {
        let rx_side = self.filled.wrapping_sub(self.received);
        let tx_side = self.sent.wrapping_sub(self.completed);
        SocketFrames {
            fill,
            rx,
            tx,
            completion,
            // Whatever the rings do not show. Read concurrently with a live kernel, a frame
            // moving between two rings may be seen on both or neither; the sum of the five
            // stays `given - returned` either way.
            held: rx_side
                .wrapping_sub(fill)
                .wrapping_sub(rx)
                .wrapping_add(tx_side.wrapping_sub(tx).wrapping_sub(completion)),
        }
    }
}

/// Where one socket's frames are: on each of its rings, or held by the kernel out of sight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SocketFrames {
    /// Posted to the fill ring, not yet taken by the kernel.
    pub fill: u32,
    /// On the RX ring, not yet read.
    pub rx: u32,
    /// On the TX ring, not yet taken by the kernel.
    pub tx: u32,
    /// On the completion ring, not yet read.
    pub completion: u32,
    /// Taken by the kernel and not handed back on any ring: a zero-copy driver's posted
    /// receive buffers, frames in flight, the pool's own cache.
    pub held: u32,
}

impl SocketFrames {
    /// All frames the socket has.
    pub fn total(&self) -> u64 {
        u64::from(self.fill)
            + u64::from(self.rx)
            + u64::from(self.tx)
            + u64::from(self.completion)
            + u64::from(self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_not_on_any_ring_are_counted_as_held() {
        let l = Ledger {
            filled: 100,
            received: 60,
            sent: 50,
            completed: 45,
        };
        // 40 still with the RX side: 10 on the fill ring, 5 on the RX ring, 25 posted.
        // 5 with the TX side: 2 on the TX ring, 1 on the completion ring, 2 in flight.
        let f = l.frames(10, 5, 2, 1);
        assert_eq!(f.held, 27);
        assert_eq!(f.total(), 45);
    }

    #[test]
    fn the_count_survives_the_rings_indices_wrapping() {
        let l = Ledger {
            filled: 3,
            received: u32::MAX - 4,
            sent: 1,
            completed: u32::MAX,
        };
        // 8 with the RX side (3 on rings), 2 with the TX side.
        let f = l.frames(2, 1, 0, 0);
        assert_eq!(f.held, 5 + 2);
    }

    #[test]
    fn reclaim_takes_a_sockets_frames_that_are_not_free() {
        let mut o = Owners::new(8, 2048);
        for f in 0..4u64 {
            o.give(f * 2048 + 256, 1);
        }
        o.give(4 * 2048, 2);
        // Frame 2 was given to socket 2 since; frame 3 came back and is on the free list.
        o.give(2 * 2048, 2);
        let mut free = FreeList::new(8, 2048);
        free.push(3 * 2048);
        free.push(7 * 2048);
        assert_eq!(o.reclaim(1, &mut free), 2);
        let mut on: Vec<u64> = free.iter().collect();
        on.sort_unstable();
        assert_eq!(on, vec![0, 2048, 3 * 2048, 7 * 2048]);
        // Tags are cleared: a second reclaim finds nothing, socket 2 keeps its own.
        assert_eq!(o.reclaim(1, &mut free), 0);
        assert_eq!(o.reclaim(2, &mut free), 2);
        assert_eq!(free.len(), 6);
    }

    #[test]
    fn an_address_outside_the_umem_is_not_recorded() {
        let mut o = Owners::new(2, 2048);
        o.give(10 * 2048, 0);
        assert_eq!(o.reclaim(0, &mut FreeList::new(2, 2048)), 0);
    }
}
