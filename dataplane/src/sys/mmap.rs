//! Memory: anonymous and huge-page mappings, NUMA policy (mbind) and where pages landed
//! (move_pages).
// Under loom the table's cells are a Box, not a mapping: the huge-page constructors go unused.
#![cfg_attr(feature = "loom", allow(dead_code))]
use std::ptr::NonNull;

use super::SyscallError;

/// An anonymous, page-aligned, private mapping, unmapped on drop.
pub(crate) struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; moving the owner between threads is
// fine, and access is governed by the borrow rules of the methods below.
unsafe impl Send for Mmap {}
// SAFETY: through `&Mmap` the memory is reached only atomically (`as_atomic_u32s`) or through
// raw pointers (`as_ptr`, `as_raw_slice`: the UMEM shared with the kernel), whose users are
// unsafe code with its own argument; no plain `&` or `&mut` to the memory is made from `&self`,
// so sharing the owner between threads creates no data race by itself.
unsafe impl Sync for Mmap {}

impl Mmap {
    /// Maps `len` bytes of zeroed anonymous memory.
    pub(crate) fn anonymous(len: usize) -> Result<Mmap, SyscallError> {
        Self::map_private(len, 0, "mmap")
    }

    /// A private anonymous read-write mapping with `extra_flags`.
    fn map_private(
        len: usize,
        extra_flags: libc::c_int,
        call: &'static str,
    ) -> Result<Mmap, SyscallError> {
        // SAFETY: a fresh anonymous mapping aliases nothing; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra_flags,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(SyscallError::last(call));
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| SyscallError::last(call))?;
        Ok(Mmap { ptr, len })
    }

    /// Maps `len` bytes (rounded up to 2 MiB) on reserved 2 MiB hugetlb pages
    /// (MAP_HUGETLB). Fails (ENOMEM) when too few are reserved (`vm.nr_hugepages`).
    pub(crate) fn anonymous_hugetlb(len: usize) -> Result<Mmap, SyscallError> {
        const HUGE: usize = 2 << 20;
        const MAP_HUGE_2MB: libc::c_int = 21 << libc::MAP_HUGE_SHIFT;
        let len = len.max(1).div_ceil(HUGE) * HUGE;
        Self::map_private(len, libc::MAP_HUGETLB | MAP_HUGE_2MB, "mmap(MAP_HUGETLB)")
    }

    /// Maps `len` bytes aligned to 2 MiB and asks for transparent huge pages (MADV_HUGEPAGE),
    /// for large tables read at random (one TLB entry per 2 MiB instead of per 4 KiB). Falls
    /// back to small pages silently where THP is off; the memory is valid either way.
    pub(crate) fn anonymous_huge(len: usize) -> Result<Mmap, SyscallError> {
        Self::huge_with(len, 0)
    }

    /// [`Mmap::anonymous_huge`] with `MAP_NORESERVE`: a large reservation of which only what
    /// is written gets backed (the forwarding table's extension groups), not counted against
    /// the commit limit when mapped, so a small machine can map it too. Running out of memory
    /// then shows when a page is first written, not here.
    pub(crate) fn anonymous_huge_sparse(len: usize) -> Result<Mmap, SyscallError> {
        Self::huge_with(len, libc::MAP_NORESERVE)
    }

    fn huge_with(len: usize, flags: libc::c_int) -> Result<Mmap, SyscallError> {
        const HUGE: usize = 2 << 20;
        let len = len.max(1).div_ceil(HUGE) * HUGE;
        let raw = Self::map_private(len + HUGE, flags, "mmap")?;
        let base = raw.ptr.as_ptr() as usize;
        let aligned = base.div_ceil(HUGE) * HUGE;
        let (head, tail) = (aligned - base, raw.len - (aligned - base) - len);
        std::mem::forget(raw);
        // SAFETY: head and tail are the unused, page-aligned ends of the mapping made above,
        // which nothing references; the middle `len` bytes stay mapped and become the result.
        unsafe {
            if head > 0 {
                libc::munmap(base as *mut libc::c_void, head);
            }
            if tail > 0 {
                libc::munmap((aligned + len) as *mut libc::c_void, tail);
            }
            libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
        }
        let ptr = NonNull::new(aligned as *mut u8).ok_or_else(|| SyscallError::last("mmap"))?;
        Ok(Mmap { ptr, len })
    }

    /// The mapping as zero-initialised `AtomicU32`s: tables one thread updates in place while
    /// others read them.
    pub(crate) fn as_atomic_u32s(&self) -> &[std::sync::atomic::AtomicU32] {
        // SAFETY: the mapping is page-aligned (so 4-byte aligned), `len / 4` cells fit inside
        // it, zeroed memory is a valid AtomicU32, `&self` keeps it mapped, and every access
        // through the result is atomic, so shared references may write.
        unsafe {
            std::slice::from_raw_parts(
                self.ptr.as_ptr().cast::<std::sync::atomic::AtomicU32>(),
                self.len / 4,
            )
        }
    }

    /// Base address.
    pub(crate) fn as_ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The whole mapping as a raw slice pointer (for registering it as a UMEM).
    pub(crate) fn as_raw_slice(&self) -> NonNull<[u8]> {
        NonNull::slice_from_raw_parts(self.ptr, self.len)
    }

    /// Writes one byte per page so every page is faulted in by the calling thread (first touch
    /// places it on that thread's NUMA node).
    pub(crate) fn touch_pages(&mut self) {
        let page = 4096;
        let mut off = 0;
        while off < self.len {
            // SAFETY: off < len, inside our own writable mapping, and `&mut self` excludes other
            // users of this memory.
            unsafe { self.ptr.as_ptr().add(off).write_volatile(0) };
            off += page;
        }
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: ptr/len came from a successful mmap and are unmapped exactly once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// The NUMA node of each sampled page of `[ptr, ptr + len)` (move_pages with no target: a
/// query), as (node, pages) counts. Negative nodes are errnos (e.g. -14 EFAULT: not present).
pub(crate) fn page_nodes(map: &Mmap, samples: usize) -> Result<Vec<(i32, usize)>, SyscallError> {
    let page = 4096usize;
    let pages = (map.len() / page).max(1);
    let step = (pages / samples.max(1)).max(1);
    let mut addrs: Vec<*mut libc::c_void> = (0..pages)
        .step_by(step)
        // SAFETY: i * page < len: an address inside our mapping, only passed to the kernel.
        .map(|i| unsafe { map.as_ptr().as_ptr().add(i * page) }.cast())
        .collect();
    let mut status = vec![0i32; addrs.len()];
    // SAFETY: `addrs` and `status` are valid arrays of `addrs.len()` entries; a null nodes
    // array makes move_pages only report where each page is.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0,
            addrs.len() as libc::c_ulong,
            addrs.as_mut_ptr(),
            std::ptr::null::<i32>(),
            status.as_mut_ptr(),
            0,
        )
    };
    if rc < 0 {
        return Err(SyscallError::last("move_pages"));
    }
    let mut counts: std::collections::BTreeMap<i32, usize> = std::collections::BTreeMap::new();
    for s in status {
        *counts.entry(s).or_default() += 1;
    }
    Ok(counts.into_iter().collect())
}

/// mbind policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemPolicy {
    /// MPOL_BIND to one node.
    Bind(usize),
    /// MPOL_INTERLEAVE over these nodes.
    Interleave,
}

/// Binds a mapping's pages (before first touch) to a node, or interleaves them over `nodes`.
pub(crate) fn mbind(map: &Mmap, policy: MemPolicy, nodes: &[usize]) -> Result<(), SyscallError> {
    const MPOL_BIND: libc::c_int = 2;
    const MPOL_INTERLEAVE: libc::c_int = 3;
    let mut mask = [0u64; 16];
    let (mode, set): (libc::c_int, Vec<usize>) = match policy {
        MemPolicy::Bind(n) => (MPOL_BIND, vec![n]),
        MemPolicy::Interleave => (MPOL_INTERLEAVE, nodes.to_vec()),
    };
    for n in set.into_iter().filter(|n| *n < 1024) {
        mask[n / 64] |= 1 << (n % 64);
    }
    // SAFETY: the range is our own mapping; `mask` is a valid node mask of 1024 bits.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            map.as_ptr().as_ptr(),
            map.len() as libc::c_ulong,
            mode,
            mask.as_ptr(),
            1024 as libc::c_ulong,
            0 as libc::c_uint,
        )
    };
    if rc != 0 {
        return Err(SyscallError::last("mbind"));
    }
    Ok(())
}
