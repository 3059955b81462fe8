//! The poller's frame memory: one UMEM area and the free list of its frames.
//!
//! The area is mapped and touched by the poller thread after it is pinned, so first touch places
//! the pages on that CPU's NUMA node. Frames are `frame_size` (power of two) apart; the kernel
//! writes packet data at a fixed headroom inside a frame, so packet data starts cache-line aligned.
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]
#![allow(unsafe_code)] // the three frame views below; their callers hold the contract

use crate::sys::{MemPolicy, Mmap, SyscallError};

/// A fixed-capacity stack of frame base addresses. `push` never allocates; the capacity is the
/// UMEM's frame count, and a frame is in exactly one place at a time, so it never overflows.
///
/// Debug builds (the tests) check that promise on every push: a frame pushed while already on
/// the list (a double free), an address that is not a frame base of this UMEM, or a push past
/// the capacity trips a `debug_assert!`. Release builds do none of that per packet; a frame
/// lost there shows in the frame accounting at stop (`PollerReport::frames`).
pub(crate) struct FreeList {
    buf: Box<[u64]>,
    len: usize,
    /// Debug builds: log2 of the frame size (frame number = address >> shift).
    #[cfg(debug_assertions)]
    shift: u32,
    /// Debug builds: which frames are on the list now.
    #[cfg(debug_assertions)]
    held: Box<[bool]>,
}

/// [`FreeList::push_run`]'s pushes.
pub(crate) struct Run<'a> {
    list: &'a mut FreeList,
    len: usize,
}

impl Run<'_> {
    /// [`FreeList::push`].
    #[inline(always)]
    pub(crate) fn push(&mut self, addr: u64) {
        #[cfg(debug_assertions)]
        {
            self.list.len = self.len;
            self.list.debug_check_push(addr);
        }
        if let Some(slot) = self.list.buf.get_mut(self.len) {
            *slot = addr;
            self.len += 1;
        }
    }
}

impl FreeList {
    /// An empty list for a UMEM of `frames` frames of `frame_size` bytes (a power of two).
    pub(crate) fn new(frames: usize, frame_size: u32) -> Self {
        debug_assert!(frame_size.is_power_of_two(), "frame size {frame_size}");
        FreeList {
            buf: vec![0; frames].into_boxed_slice(),
            len: 0,
            #[cfg(debug_assertions)]
            shift: frame_size.trailing_zeros(),
            #[cfg(debug_assertions)]
            held: vec![false; frames].into_boxed_slice(),
        }
    }

    /// Adds a frame by its base address. Over capacity nothing is stored (a double free that
    /// release builds do not otherwise detect; debug builds assert first).
    #[inline(always)]
    pub(crate) fn push(&mut self, addr: u64) {
        #[cfg(debug_assertions)]
        self.debug_check_push(addr);
        if let Some(slot) = self.buf.get_mut(self.len) {
            *slot = addr;
            self.len += 1;
        }
    }

    /// Pushes a run of frames (completions reaped), the length kept in a local and written
    /// back once: `push` stores it every time, as the compiler cannot tell that the stores
    /// to the frames' slots leave it alone. Returns `fill`'s result.
    #[inline(always)]
    pub(crate) fn push_run<R>(&mut self, fill: impl FnOnce(&mut Run<'_>) -> R) -> R {
        let mut run = Run {
            len: self.len,
            list: self,
        };
        let r = fill(&mut run);
        run.list.len = run.len;
        r
    }

    #[cfg(debug_assertions)]
    fn debug_check_push(&mut self, addr: u64) {
        let frame = addr >> self.shift;
        debug_assert!(
            frame << self.shift == addr,
            "free list: {addr:#x} is not a frame base address"
        );
        let held = usize::try_from(frame)
            .ok()
            .and_then(|f| self.held.get_mut(f));
        let Some(held) = held else {
            panic!("free list: {addr:#x} is not a frame of this UMEM (it was never handed out)");
        };
        debug_assert!(
            !*held,
            "free list: frame {addr:#x} pushed twice (double free)"
        );
        *held = true;
        debug_assert!(self.len < self.buf.len(), "free list: pushed past capacity");
    }

    /// Takes a frame.
    #[inline(always)]
    pub(crate) fn pop(&mut self) -> Option<u64> {
        self.len = self.len.checked_sub(1)?;
        let addr = self.buf.get(self.len).copied();
        #[cfg(debug_assertions)]
        if let Some(held) =
            addr.and_then(|a| self.held.get_mut(usize::try_from(a >> self.shift).ok()?))
        {
            *held = false;
        }
        addr
    }

    /// The top `n` frames (all of them when fewer), the topmost last: [`FreeList::pop`]
    /// would take them from the end. Taken off with [`FreeList::drop_top`] once it is known
    /// how many were used, so a burst hands out frames without a pop each.
    #[inline(always)]
    pub(crate) fn top(&self, n: usize) -> &[u64] {
        self.buf
            .get(self.len.saturating_sub(n)..self.len)
            .unwrap_or(&[])
    }

    /// Takes the top `n` frames off, as `n` pops would.
    #[inline(always)]
    pub(crate) fn drop_top(&mut self, n: usize) {
        let from = self.len.saturating_sub(n);
        #[cfg(debug_assertions)]
        for a in self.buf.get(from..self.len).unwrap_or(&[]) {
            if let Some(held) = usize::try_from(a >> self.shift)
                .ok()
                .and_then(|f| self.held.get_mut(f))
            {
                *held = false;
            }
        }
        self.len = from;
    }

    /// Frames held.
    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The base addresses on the list now.
    pub(crate) fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.buf.iter().take(self.len).copied()
    }
}

/// An area's frame size and length ([`Area::bounds`]).
#[derive(Clone, Copy)]
pub(crate) struct Bounds {
    frame_size: u64,
    len: u64,
}

impl Bounds {
    /// [`Area::check`] against these bounds: the offset, where `[addr, addr + len)` lies
    /// inside one frame of the area they were taken from.
    #[inline(always)]
    pub(crate) fn check(self, addr: u64, len: u32) -> Option<usize> {
        let fs = self.frame_size;
        let in_frame = (addr & (fs - 1)) + u64::from(len) <= fs;
        let end = addr.checked_add(u64::from(len))?;
        #[allow(clippy::cast_possible_truncation)] // addr < end <= map.len(), a usize
        (in_frame && end <= self.len).then_some(addr as usize)
    }

    /// The bytes before offset `off` in its frame (a frame's headroom, where `off` is its
    /// start).
    #[inline(always)]
    pub(crate) fn room_before(self, off: u64) -> u64 {
        off & (self.frame_size - 1)
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
    pub(crate) fn page_nodes(&self) -> Vec<(i32, usize)> {
        crate::sys::page_nodes(&self.map, 64).unwrap_or_default()
    }

    /// True when the area sits on 2 MiB hugetlb pages.
    pub(crate) fn on_hugepages(&self) -> bool {
        self.on_hugepages
    }

    /// The mapping (to register it as the UMEM).
    pub(crate) fn map(&self) -> &Mmap {
        &self.map
    }

    /// Frame size in bytes.
    pub(crate) fn frame_size(&self) -> u32 {
        self.frame_size
    }

    /// Number of frames.
    pub(crate) fn frames(&self) -> u32 {
        self.frames
    }

    /// A free list holding every frame's base address.
    pub(crate) fn full_free_list(&self) -> FreeList {
        let mut f = FreeList::new(self.frames as usize, self.frame_size);
        for i in (0..self.frames).rev() {
            f.push(u64::from(i) * u64::from(self.frame_size));
        }
        f
    }

    /// Checks that `[addr, addr + len)` lies inside one frame of the area; returns the offset,
    /// which is `addr` itself (a UMEM address is an offset into the area). Descriptors come
    /// from rings the kernel writes, so they are checked before any slice is made (a bad one
    /// is dropped as `invalid_descriptor`).
    #[inline(always)]
    pub(crate) fn check(&self, addr: u64, len: u32) -> Option<usize> {
        let fs = u64::from(self.frame_size);
        let in_frame = (addr & (fs - 1)) + u64::from(len) <= fs;
        let end = addr.checked_add(u64::from(len))?;
        #[allow(clippy::cast_possible_truncation)] // addr < end <= map.len(), a usize
        (in_frame && end <= self.map.len() as u64).then_some(addr as usize)
    }

    /// The frame size and length [`Area::check`] checks against, as values: a loop that
    /// writes frames keeps them in registers, where a frame written between two checks
    /// has `check` read them from the area again.
    #[inline(always)]
    pub(crate) fn bounds(&self) -> Bounds {
        Bounds {
            frame_size: u64::from(self.frame_size),
            len: self.map.len() as u64,
        }
    }

    /// Starts loading the cache line at `addr` (a received frame's first bytes). Unchecked:
    /// a prefetch never faults, so an address outside the area only wastes the hint, and
    /// the descriptor's own check comes when the frame is read.
    #[inline(always)]
    pub(crate) fn prefetch(&self, addr: u64) {
        let at = usize::try_from(addr).unwrap_or(0);
        crate::sys::prefetch_ptr(self.map.as_ptr().as_ptr().wrapping_add(at));
    }

    /// Bytes from `addr` to the end of its frame: the room a frame's contents may grow into
    /// (an ICMP error built in place of the packet it answers).
    #[inline(always)]
    pub(crate) fn room(&self, addr: u64) -> u32 {
        let fs = u64::from(self.frame_size);
        #[allow(clippy::cast_possible_truncation)] // below frame_size, a u32
        let room = (fs - (addr & (fs - 1))) as u32;
        room
    }

    /// Read-only view of the bytes `[off, off + len)` of the area (empty if out of range).
    ///
    /// # Safety
    ///
    /// The frame holding those bytes must be in the caller's hands: taken from an RX ring (or
    /// off the free list) and not yet given to a fill or TX ring. Otherwise the kernel may
    /// write the bytes while the slice is alive, a data race.
    #[inline(always)]
    pub(crate) unsafe fn frame(&self, off: usize, len: u32) -> &[u8] {
        let len = len as usize;
        if off.checked_add(len).is_none_or(|end| end > self.map.len()) {
            return &[];
        }
        // SAFETY: off + len is within the mapping (checked just above); the caller guarantees
        // the kernel does not write the frame meanwhile; the borrow is tied to `&self`, so no
        // `frame_mut` of the area can be alive at the same time.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().as_ptr().add(off), len) }
    }

    /// The bytes `[off, off + len)` of the area, writable (empty if out of range).
    ///
    /// # Safety
    ///
    /// As for [`Area::frame`]: the frame must be in the caller's hands (taken from an RX ring,
    /// or off the free list, and not yet given back), so neither the kernel nor anyone else
    /// reads or writes it meanwhile. `&mut self` keeps two views from being alive at once.
    #[inline(always)]
    pub(crate) unsafe fn frame_mut(&mut self, off: usize, len: u32) -> &mut [u8] {
        let len = len as usize;
        if off.checked_add(len).is_none_or(|end| end > self.map.len()) {
            return &mut [];
        }
        // SAFETY: off + len is within the mapping (checked just above); the caller guarantees
        // the frame is theirs alone; the returned borrow is tied to `&mut self`, so no other
        // slice of the area is alive at the same time.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_ptr().as_ptr().add(off), len) }
    }

    /// The `N` bytes at `addr`, whatever the descriptor's length (None: not all inside the
    /// area): a frame's first bytes read for a hint (a prefetch), never to decide by.
    ///
    /// # Safety
    ///
    /// As for [`Area::frame`]: the frame holding those bytes must be in the caller's hands.
    #[inline(always)]
    pub(crate) unsafe fn peek<const N: usize>(&self, addr: u64) -> Option<&[u8; N]> {
        let off = usize::try_from(addr).ok()?;
        if off.checked_add(N)? > self.map.len() {
            return None;
        }
        // SAFETY: off + N is within the mapping (checked just above), a u8 array has no
        // alignment; the caller guarantees the kernel does not write the bytes meanwhile.
        Some(unsafe { &*self.map.as_ptr().as_ptr().add(off).cast::<[u8; N]>() })
    }

    /// [`Area::frame_mut`] of a frame whose bounds [`Area::check`] has passed: no check again.
    ///
    /// # Safety
    ///
    /// As for [`Area::frame_mut`]; and `[off, off + len)` must lie within a range that
    /// [`Area::check`] passed on this area, or [`Bounds::check`] on this area's
    /// [`Area::bounds`] (the offset it returned and its length, or a part of them), so that
    /// `off + len` is within the mapping.
    #[inline(always)]
    pub(crate) unsafe fn checked_frame_mut(&mut self, off: usize, len: u32) -> &mut [u8] {
        debug_assert!(off
            .checked_add(len as usize)
            .is_some_and(|end| end <= self.map.len()));
        // SAFETY: within the mapping, as the caller guarantees; theirs alone, likewise; tied
        // to `&mut self`, so no other slice of the area is alive at the same time.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_ptr().as_ptr().add(off), len as usize) }
    }

    /// A read-only view of `src` and a writable view of `dst` at once (a fragment copied out
    /// of its packet): None when either is out of range or they overlap.
    ///
    /// # Safety
    ///
    /// As for [`Area::frame_mut`], for both frames: each must be in the caller's hands.
    #[inline]
    pub(crate) unsafe fn frame_and_frame_mut(
        &mut self,
        src: (usize, u32),
        dst: (usize, u32),
    ) -> Option<(&[u8], &mut [u8])> {
        let end = |(off, len): (usize, u32)| off.checked_add(len as usize);
        let (src_end, dst_end) = (end(src)?, end(dst)?);
        if src_end > self.map.len() || dst_end > self.map.len() {
            return None;
        }
        if src.0 < dst_end && dst.0 < src_end {
            return None;
        }
        let base = self.map.as_ptr().as_ptr();
        // SAFETY: both ranges are within the mapping and disjoint (checked above); the caller
        // guarantees both frames are theirs alone; the borrows are tied to `&mut self`, so no
        // other view of the area is alive meanwhile.
        unsafe {
            Some((
                std::slice::from_raw_parts(base.add(src.0), src.1 as usize),
                std::slice::from_raw_parts_mut(base.add(dst.0), dst.1 as usize),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_list_is_a_bounded_stack() {
        let mut f = FreeList::new(2, 2048);
        f.push(0);
        f.push(2048);
        assert_eq!(f.len(), 2);
        assert_eq!((f.pop(), f.pop(), f.pop()), (Some(2048), Some(0), None));
        f.push(2048);
        assert_eq!(f.pop(), Some(2048), "a popped frame may come back");
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "pushed twice (double free)")]
    fn double_free_trips_the_debug_check() {
        let mut f = FreeList::new(4, 2048);
        f.push(2048);
        f.push(2048);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "never handed out")]
    fn unknown_frame_trips_the_debug_check() {
        let mut f = FreeList::new(4, 2048);
        f.push(4 * 2048);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "not a frame base address")]
    fn unaligned_address_trips_the_debug_check() {
        let mut f = FreeList::new(4, 2048);
        f.push(2048 + 256);
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

    #[test]
    #[allow(unsafe_code)]
    fn two_views_only_of_two_frames_apart() {
        let mut a = Area::new(4, 2048, None, false).expect("mmap");
        // SAFETY: nothing else uses the area's frames in this test.
        unsafe {
            assert!(a.frame_and_frame_mut((0, 2048), (2048, 2048)).is_some());
            assert!(
                a.frame_and_frame_mut((0, 2049), (2048, 2048)).is_none(),
                "overlap"
            );
            assert!(
                a.frame_and_frame_mut((4096, 100), (4000, 200)).is_none(),
                "overlap"
            );
            assert!(
                a.frame_and_frame_mut((0, 10), (3 * 2048, 2049)).is_none(),
                "past the end"
            );
            let (src, dst) = a.frame_and_frame_mut((0, 4), (2048, 4)).expect("views");
            dst.copy_from_slice(src);
        }
    }
}
