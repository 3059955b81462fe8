//! CPU hints that are not syscalls but still need `unsafe` intrinsics.

/// Hints the CPU to start loading the cache line holding `r` (no-op off x86_64).
#[inline(always)]
pub(crate) fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 never faults and has no architectural effect; SSE is part of the
    // x86_64 baseline, so the instruction always exists; `r` is a valid reference anyway.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            (r as *const T).cast::<i8>(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}
