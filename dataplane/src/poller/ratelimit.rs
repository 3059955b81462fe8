//! The poller's ICMP error rate limit: a token bucket (as VPP's ip4-icmp-error node and the
//! kernel's icmp_msgs_per_sec / icmp_msgs_burst), one per poller so it is never shared. The
//! caller passes the clock in.
use std::time::Instant;

/// Credit per token, in token-nanoseconds (one token per second at rate 1).
const TOKEN: u128 = 1_000_000_000;

/// `rate` tokens per second, at most `burst` saved up; starts full.
#[derive(Debug, Clone)]
pub(crate) struct TokenBucket {
    rate: u128,
    cap: u128,
    credit: u128,
    last: Option<Instant>,
}

impl TokenBucket {
    /// A full bucket; `rate` 0 never gives a token.
    pub(crate) fn new(rate: u32, burst: u32) -> Self {
        let cap = u128::from(burst) * TOKEN;
        TokenBucket {
            rate: u128::from(rate),
            cap,
            credit: if rate == 0 { 0 } else { cap },
            last: None,
        }
    }

    /// Takes a token at `now`, if there is one.
    pub(crate) fn take(&mut self, now: Instant) -> bool {
        if let Some(last) = self.last {
            let ns = now.saturating_duration_since(last).as_nanos();
            self.credit = self
                .credit
                .saturating_add(ns.saturating_mul(self.rate))
                .min(self.cap);
        }
        self.last = Some(now);
        if self.credit >= TOKEN {
            self.credit -= TOKEN;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn burst_then_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(100, 5);
        let burst = (0..20).filter(|_| b.take(t0)).count();
        assert_eq!(burst, 5, "a full bucket gives its burst at once");
        // 100 per second: one more every 10 ms.
        assert!(!b.take(t0 + Duration::from_millis(9)));
        assert!(b.take(t0 + Duration::from_millis(10)));
        let later = t0 + Duration::from_secs(1);
        let got = (0..200).filter(|_| b.take(later)).count();
        assert_eq!(got, 5, "credit is capped at the burst");
    }

    #[test]
    fn over_time_at_most_burst_plus_rate_times_t() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1000, 50);
        let mut sent = 0;
        for us in (0..2_000_000u64).step_by(100) {
            if b.take(t0 + Duration::from_micros(us)) {
                sent += 1;
            }
        }
        // 2 s asked at 10 kHz: 50 + 1000/s * 2 s at most.
        assert!(sent <= 50 + 2000, "{sent}");
        assert!(sent >= 50 + 1990, "{sent}");
    }

    #[test]
    fn rate_zero_disables() {
        let mut b = TokenBucket::new(0, 50);
        assert!(!b.take(Instant::now()));
    }
}
