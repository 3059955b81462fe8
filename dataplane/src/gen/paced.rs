//! Paced sending: a send-only, qdisc-bypassing AF_PACKET socket, the frames due on the
//! schedule per sendmmsg() call. Live frames would come in 25 ms bursts; this is smooth to
//! ~10 us (~0.74 Mpps at most on the 2-vCPU development VM).
use std::time::{Duration, Instant};

use super::{Limits, SendError, Template};
use crate::sys::{self, FrameSender, SEND_BATCH_MAX};

/// Frames due by `elapsed` at `rate` frames per second, capped at `limit`.
pub(crate) fn due(elapsed: Duration, rate: u64, limit: u64) -> u64 {
    ((elapsed.as_secs_f64() * rate as f64) as u64).min(limit)
}

/// When frame number `sent` (0-based) falls due, from the start.
pub(crate) fn next_due(sent: u64, rate: u64) -> Duration {
    Duration::from_secs_f64((sent + 1) as f64 / rate.max(1) as f64)
}

/// Sends at `rate` frames per second (cycling through the flows) until a limit.
pub(crate) fn send(
    template: &Template,
    iface: &str,
    rate: u64,
    limits: Limits<'_>,
) -> Result<u64, SendError> {
    // One buffer per frame of a batch, reused: each frame is written with its own number in
    // its flow (the IPv4 ID the sink's reordering count reads).
    let mut bufs: Vec<Vec<u8>> = vec![Vec::new(); SEND_BATCH_MAX];
    let sock = FrameSender::bind(iface)?;
    sys::set_timer_slack(1_000);
    let start = Instant::now();
    let mut sent = 0u64;
    while start.elapsed() < limits.duration && sent < limits.count && !limits.stopped() {
        // The frames due by now go out together in one call (late frames back to back, at most
        // a batch at a time). Otherwise sleep (never spin: the CPU is shared with NAPI threads
        // that must keep up) until the next one is due.
        let due = due(start.elapsed(), rate, limits.count);
        if due <= sent {
            let next = start + next_due(sent, rate);
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            }
            continue;
        }
        let n = ((due - sent) as usize).min(SEND_BATCH_MAX);
        for (k, buf) in bufs.iter_mut().take(n).enumerate() {
            template.write(sent + k as u64, buf);
        }
        let batch: Vec<&[u8]> = bufs.iter().take(n).map(Vec::as_slice).collect();
        sent += sock.send_batch(&batch)? as u64;
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_is_the_rate() {
        let rate = 100_000;
        assert_eq!(due(Duration::ZERO, rate, u64::MAX), 0);
        assert_eq!(due(Duration::from_millis(10), rate, u64::MAX), 1_000);
        assert_eq!(
            due(Duration::from_secs(2), rate, 5_000),
            5_000,
            "capped by count"
        );
        assert_eq!(next_due(0, rate), Duration::from_micros(10));
        assert_eq!(next_due(999, rate), Duration::from_millis(10));
    }
}
