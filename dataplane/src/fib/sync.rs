//! The atomics the table's lock-free protocol is written with, and the zeroed arrays of them
//! it lives in. Built normally they are `std`'s, over anonymous mappings; built with the
//! `loom` feature they are loom's, over heap arrays, so the model checker explores every
//! interleaving of the very code the pollers run (`make loom`, [`super::loom_tests`]). Under
//! Miri (`make sanitize`) the arrays are on the heap too: Miri has no `mmap` to give.
#[cfg(feature = "loom")]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64};
#[cfg(not(feature = "loom"))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64};

use super::FibError;

/// A zero-filled array of `AtomicU32` shared by the writer and the readers: every access
/// is atomic, so shared references may write.
pub(crate) struct Cells {
    #[cfg(not(any(feature = "loom", miri)))]
    map: crate::sys::Mmap,
    #[cfg(any(feature = "loom", miri))]
    cells: Box<[AtomicU32]>,
}

impl Cells {
    /// `len` zeroed cells on transparent huge pages (large tables read at random). Pages are
    /// backed only once touched; `sparse`: a reservation mostly never touched (the extension
    /// groups), mapped without reserving swap for it (`MAP_NORESERVE`).
    pub(crate) fn new(len: usize, sparse: bool, what: &'static str) -> Result<Cells, FibError> {
        #[cfg(not(any(feature = "loom", miri)))]
        {
            let bytes = len.max(1) * 4;
            let map = if sparse {
                crate::sys::Mmap::anonymous_huge_sparse(bytes)
            } else {
                crate::sys::Mmap::anonymous_huge(bytes)
            }
            .map_err(|_| FibError::Full(what))?;
            Ok(Cells { map })
        }
        #[cfg(any(feature = "loom", miri))]
        {
            let _ = (sparse, what);
            Ok(Cells {
                cells: (0..len).map(|_| AtomicU32::new(0)).collect(),
            })
        }
    }

    /// Starts loading cell `i` into the cache. Unchecked: a prefetch never faults, so an
    /// index past the end only wastes the hint (no slice is built for it).
    #[inline(always)]
    pub(crate) fn prefetch(&self, i: usize) {
        #[cfg(not(any(feature = "loom", miri)))]
        crate::sys::prefetch_ptr(self.map.as_ptr().as_ptr().wrapping_add(i.wrapping_mul(4)));
        #[cfg(any(feature = "loom", miri))]
        let _ = i;
    }

    /// The cells.
    #[inline(always)]
    pub(crate) fn get(&self) -> &[AtomicU32] {
        #[cfg(not(any(feature = "loom", miri)))]
        {
            self.map.as_atomic_u32s()
        }
        #[cfg(any(feature = "loom", miri))]
        {
            &self.cells
        }
    }
}
