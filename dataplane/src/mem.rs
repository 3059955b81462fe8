//! The poller's frame memory: one UMEM area and the free list of its frames.
//!
//! The area is mapped and touched by the poller thread after it is pinned, so first touch places
//! the pages on that CPU's NUMA node. Frames are `frame_size` (power of two) apart; the kernel
//! writes packet data at a fixed headroom inside a frame, so packet data starts cache-line aligned.
use crate::sys::{MemPolicy, Mmap, SyscallError};

/// A fixed-capacity stack of frame addresses. `push` never allocates; the capacity is the
/// UMEM's frame count, and a frame is in exactly one place at a time, so it never overflows.
pub struct FreeList {
    buf: Box<[u64]>,
    len: usize,
}

impl FreeList {
    /// An empty list able to hold `capacity` frames.
    pub fn with_capacity(capacity: usize) -> Self {
        FreeList {
            buf: vec![0; capacity].into_boxed_slice(),
            len: 0,
        }
    }

    /// Adds a frame; false (and nothing stored) if full, which means a frame was double-freed.
    #[inline(always)]
    pub fn push(&mut self, addr: u64) -> bool {
        match self.buf.get_mut(self.len) {
            Some(slot) => {
                *slot = addr;
                self.len += 1;
                true
            }
            None => false,
        }
    }

    /// Takes a frame.
    #[inline(always)]
    pub fn pop(&mut self) -> Option<u64> {
        self.len = self.len.checked_sub(1)?;
        self.buf.get(self.len).copied()
    }

    /// Frames held.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no frame is held.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The UMEM area: `frames` frames of `frame_size` bytes.
pub struct Area {
    map: Mmap,
    frame_size: u32,
    frames: u32,
    on_hugepages: bool,
}

impl Area {
    /// Maps the area, applies `policy` (before any page exists), and touches every page on
    /// the calling thread (first touch: with no policy, pages land on the thread's node).
    ///
    /// With `hugepages`, the area goes on reserved 2 MiB pages if the kernel has them, else on
    /// 4 KiB pages ([`Area::on_hugepages`] tells which).
    pub fn new(
        frames: u32,
        frame_size: u32,
        policy: Option<(MemPolicy, &[usize])>,
        hugepages: bool,
    ) -> Result<Area, SyscallError> {
        let len = frames as usize * frame_size as usize;
        let huge = if hugepages {
            Mmap::anonymous_hugetlb(len).ok()
        } else {
            None
        };
        let on_hugepages = huge.is_some();
        let mut map = match huge {
            Some(m) => m,
            None => Mmap::anonymous(len)?,
        };
        if let Some((p, nodes)) = policy {
            crate::sys::mbind(&map, p, nodes)?;
        }
        map.touch_pages();
        Ok(Area {
            map,
            frame_size,
            frames,
            on_hugepages,
        })
    }

    /// Where the area's pages are: (NUMA node, sampled pages); a negative node is an errno.
    pub fn page_nodes(&self) -> Vec<(i32, usize)> {
        crate::sys::page_nodes(&self.map, 64).unwrap_or_default()
    }

    /// True when the area sits on 2 MiB hugetlb pages.
    pub fn on_hugepages(&self) -> bool {
        self.on_hugepages
    }

    /// The mapping (to register it as the UMEM).
    pub fn map(&self) -> &Mmap {
        &self.map
    }

    /// Frame size in bytes.
    pub fn frame_size(&self) -> u32 {
        self.frame_size
    }

    /// Number of frames.
    pub fn frames(&self) -> u32 {
        self.frames
    }

    /// A free list holding every frame's base address.
    pub fn full_free_list(&self) -> FreeList {
        let mut f = FreeList::with_capacity(self.frames as usize);
        for i in (0..self.frames).rev() {
            f.push(u64::from(i) * u64::from(self.frame_size));
        }
        f
    }

    /// Checks that `[addr, addr + len)` lies inside one frame of the area; returns the offset.
    /// Descriptors come from rings the kernel writes, so they are checked before any slice is
    /// made (a bad one is dropped as `invalid_descriptor`).
    #[inline(always)]
    pub fn check(&self, addr: u64, len: u32) -> Option<usize> {
        let fs = u64::from(self.frame_size);
        let in_frame = (addr & (fs - 1)) + u64::from(len) <= fs;
        let end = addr.checked_add(u64::from(len))?;
        (in_frame && end <= self.map.len() as u64).then_some(addr as usize)
    }

    /// Read-only view of one received frame (same contract as [`Area::frame_mut`]).
    #[inline(always)]
    pub fn frame(&self, off: usize, len: u32) -> &[u8] {
        let len = len as usize;
        if off.checked_add(len).is_none_or(|end| end > self.map.len()) {
            return &[];
        }
        #[allow(unsafe_code)]
        // SAFETY: off + len is within the mapping (checked just above); the frame is in the
        // caller's hands, so the kernel does not write it; the borrow is tied to `&self`, so no
        // `frame_mut` of the area can be alive at the same time.
        unsafe {
            std::slice::from_raw_parts(self.map.as_ptr().as_ptr().add(off), len)
        }
    }

    /// The bytes of one received frame.
    ///
    /// `off`/`len` must have passed [`Area::check`], and the frame must be in the caller's hands
    /// (taken from an RX ring and not yet given back): then neither the kernel nor anyone else
    /// touches it, and `&mut self` keeps two frames from being borrowed at once.
    #[inline(always)]
    pub fn frame_mut(&mut self, off: usize, len: u32) -> &mut [u8] {
        let len = len as usize;
        if off.checked_add(len).is_none_or(|end| end > self.map.len()) {
            return &mut [];
        }
        #[allow(unsafe_code)]
        // SAFETY: off + len is within the mapping (checked just above); the frame was handed to
        // us by the RX ring, so the kernel no longer writes it; the returned borrow is tied to
        // `&mut self`, so no other slice of the area is alive at the same time.
        unsafe {
            std::slice::from_raw_parts_mut(self.map.as_ptr().as_ptr().add(off), len)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_list_is_bounded() {
        let mut f = FreeList::with_capacity(2);
        assert!(f.push(1) && f.push(2));
        assert!(!f.push(3), "over capacity is refused, not grown");
        assert_eq!((f.pop(), f.pop(), f.pop()), (Some(2), Some(1), None));
    }

    #[test]
    fn descriptor_checks() {
        let a = Area::new(4, 2048, None, false).expect("mmap");
        assert!(
            a.page_nodes().iter().all(|(n, _)| *n >= 0),
            "touched pages are present"
        );
        assert_eq!(a.check(256, 64), Some(256));
        assert_eq!(a.check(2048 + 2000, 48), Some(4048));
        assert_eq!(a.check(2048 + 2000, 49), None, "crosses a frame boundary");
        assert_eq!(a.check(4 * 2048, 1), None, "past the area");
        assert_eq!(a.check(u64::MAX - 1, 10), None, "overflow");
        assert_eq!(a.full_free_list().len(), 4);
    }
}
