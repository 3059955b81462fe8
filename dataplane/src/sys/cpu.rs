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

/// A cycle count for measuring busy time: the time-stamp counter on x86_64 (invariant and
/// shared by all cores on the CPUs this runs on; one instruction, no syscall), elsewhere
/// nanoseconds from a process-wide start. Only differences of two reads mean anything,
/// and only against another difference of the same clock.
#[inline(always)]
pub fn cycles() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: RDTSC reads a counter; it has no memory effects and exists on every x86_64.
    #[allow(unused_unsafe)]
    unsafe {
        std::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        START
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_nanos() as u64
    }
}

/// Hints the CPU to start loading the cache line at `p`, any address: PREFETCHT0 never faults,
/// so an address outside every mapping costs a wasted hint and nothing else (no-op off
/// x86_64).
#[inline(always)]
pub(crate) fn prefetch_ptr(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 never faults, whatever the address, and has no architectural
    // effect; SSE is part of the x86_64 baseline, so the instruction always exists.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
