//! Memory-bound estimates for a cell whose every packet misses the cache once, measured on
//! the machine that runs the cells: loads chasing random cycles through a buffer the size of
//! the table (on transparent huge pages, as the table is), each load's address read from
//! the one before. One chain: nothing overlaps, the time per load is a miss's latency. A
//! burst's worth of chains stepped in turn: independent misses overlap as far as the core
//! allows, the floor for a loop that overlaps a burst's lookups.
#![allow(unsafe_code)] // one madvise on memory this module allocated
use std::time::Instant;

use rand::{Rng, SeedableRng};

const LINE: usize = 64;

/// (latency, overlapped): nanoseconds per load over `bytes` of memory with one chain and
/// with `lanes` chains stepped in turn, `loads` loads each (medians of `reps` runs).
pub fn ns_per_miss(bytes: usize, loads: usize, lanes: usize, reps: usize) -> (f64, f64) {
    let lines = (bytes / LINE).clamp(2, u32::MAX as usize);
    // One u32 per cache line (the rest of the line unused), one cycle through every line.
    let stride = LINE / 4;
    let mut chain: Vec<u32> = Vec::with_capacity(lines * stride);
    advise_huge(&chain);
    chain.resize(lines * stride, 0);
    let mut order: Vec<u32> = (0..lines as u32).collect();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(64);
    for i in (1..lines).rev() {
        order.swap(i, rng.gen_range(0..i)); // Sattolo: a single cycle
    }
    for (i, &line) in order.iter().enumerate() {
        chain[line as usize * stride] = order[(i + 1) % lines];
    }
    let lanes = lanes.max(1);
    let starts: Vec<u32> = (0..lanes).map(|k| order[k * lines / lanes]).collect();
    drop(order);
    let median = |run: &dyn Fn() -> f64| {
        let mut v: Vec<f64> = (0..reps.max(1)).map(|_| run()).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let one = median(&|| {
        let mut at = starts[0];
        let t = Instant::now();
        for _ in 0..loads {
            at = chain[at as usize * stride];
        }
        std::hint::black_box(at);
        t.elapsed().as_nanos() as f64 / loads as f64
    });
    let many = median(&|| {
        let mut at = starts.clone();
        let t = Instant::now();
        for _ in 0..loads / lanes {
            for a in at.iter_mut() {
                *a = chain[*a as usize * stride];
            }
        }
        std::hint::black_box(&at);
        t.elapsed().as_nanos() as f64 / (loads / lanes * lanes) as f64
    });
    (one, many)
}

/// Asks for transparent huge pages over the whole 2 MiB pages inside `v`'s allocation,
/// before any is touched (a hint: the estimate runs either way).
fn advise_huge(v: &Vec<u32>) {
    const HUGE: usize = 2 << 20;
    let start = v.as_ptr() as usize;
    let end = start + v.capacity() * 4;
    let (from, to) = (start.next_multiple_of(HUGE), end / HUGE * HUGE);
    if to > from {
        // SAFETY: madvise only changes how the kernel backs [from, to), a range inside an
        // allocation this function's caller owns; it neither unmaps nor changes contents.
        unsafe {
            libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_HUGEPAGE);
        }
    }
}
