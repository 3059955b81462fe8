//! Paced UDP flows from the fleet's client to its server: a sender thread in the client's
//! namespace (one socket per flow: distinct source ports, so the upstream's ECMP hash spreads
//! them; even flows IPv4, odd flows IPv6), a receiver thread per family in the server's,
//! which notes for each datagram the server interface it came in on, i.e. the appliance that
//! forwarded it. The threads share one clock (this process's `Instant`), so send and receive
//! times compare directly.
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::FleetError;

/// The UDP port the server listens on.
pub(crate) const PORT: u16 = 5001;
/// The first flow's source port.
const FIRST_SRC_PORT: u16 = 20000;
/// Marks our datagrams.
const MAGIC: u32 = 0x464c_5431;
/// Payload: magic, flow, seq, send time (ns since the shared start).
const PAYLOAD: usize = 20;

/// How much traffic.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Flows {
    /// Number of flows (source ports).
    pub count: u16,
    /// Datagrams per second per flow.
    pub pps_per_flow: u32,
}

/// One datagram that arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// Its flow.
    pub flow: u16,
    /// Its sequence number in the flow.
    pub seq: u32,
    /// When it was sent (ns since the start).
    pub sent_ns: u64,
    /// When it arrived (ns since the start).
    pub recv_ns: u64,
    /// The appliance that forwarded it (by the server interface it came in on), if known.
    pub via: Option<usize>,
}

/// What a run sent and what arrived.
#[derive(Debug, Clone, Default)]
pub struct Traffic {
    /// Per flow, when each datagram was sent (ns since the start; its sequence number is
    /// its index).
    pub sent: Vec<Vec<u64>>,
    /// Sends the kernel refused (no route: counted as lost).
    pub send_errors: u64,
    /// Every arrival, in arrival order.
    pub arrivals: Vec<Arrival>,
}

/// Whether flow `f` is IPv6 (the odd ones).
pub fn is_v6(f: u16) -> bool {
    f % 2 == 1
}

/// The client's and the server's address for flow `f`'s family.
fn endpoints(f: u16) -> (IpAddr, SocketAddr) {
    let (src, dst) = if is_v6(f) {
        (super::CLIENT_ADDR6, super::SERVICE_ADDR6)
    } else {
        (super::CLIENT_ADDR, super::SERVICE_ADDR)
    };
    let ip = |a: &str| a.parse().unwrap_or(IpAddr::from([127, 0, 0, 1]));
    (ip(src), SocketAddr::new(ip(dst), PORT))
}

fn encode(flow: u16, seq: u32, sent_ns: u64) -> [u8; PAYLOAD] {
    let mut b = [0u8; PAYLOAD];
    b[0..4].copy_from_slice(&MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&flow.to_be_bytes());
    b[8..12].copy_from_slice(&seq.to_be_bytes());
    b[12..20].copy_from_slice(&sent_ns.to_be_bytes());
    b
}

fn decode(b: &[u8]) -> Option<(u16, u32, u64)> {
    let b: [u8; PAYLOAD] = b.get(..PAYLOAD)?.try_into().ok()?;
    let [m0, m1, m2, m3, f0, f1, _, _, s0, s1, s2, s3, t @ ..] = b;
    if u32::from_be_bytes([m0, m1, m2, m3]) != MAGIC {
        return None;
    }
    Some((
        u16::from_be_bytes([f0, f1]),
        u32::from_be_bytes([s0, s1, s2, s3]),
        u64::from_be_bytes(t),
    ))
}

fn nanos(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Sends `flows` for `duration` from the client namespace while the receiver listens in the
/// server namespace; `during` runs on the calling thread meanwhile (it injects the faults) and
/// gets the shared start. The receiver keeps listening `linger` after the last send.
#[allow(clippy::too_many_arguments)]
pub fn run(
    client_ns: &str,
    server_ns: &str,
    server_ifs: [String; 2],
    flows: Flows,
    duration: Duration,
    linger: Duration,
    during: impl FnOnce(Instant) -> Result<(), FleetError>,
) -> Result<Traffic, FleetError> {
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<[u32; 2], String>>();
    let start = Instant::now();
    let receivers: Vec<_> = [false, true]
        .into_iter()
        .map(|v6| {
            let (server_ns, server_ifs) = (server_ns.to_string(), server_ifs.clone());
            let (stop, ready) = (stop.clone(), ready_tx.clone());
            std::thread::spawn(move || receive(&server_ns, &server_ifs, v6, start, &stop, &ready))
        })
        .collect();
    drop(ready_tx);
    for _ in &receivers {
        match ready_rx.recv() {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                stop.store(true, Ordering::Relaxed);
                return Err(FleetError::Traffic(format!("receiver: {e}")));
            }
            Err(_) => return Err(FleetError::Traffic("receiver: exited".into())),
        }
    }
    let client_ns = client_ns.to_string();
    let sender = std::thread::spawn(move || send(&client_ns, flows, duration, start));
    let during = during(start);
    let sent = sender
        .join()
        .map_err(|_| FleetError::Traffic("sender panicked".into()))
        .and_then(|r| r.map_err(|e| FleetError::Traffic(format!("sender: {e}"))));
    std::thread::sleep(linger);
    stop.store(true, Ordering::Relaxed);
    let mut arrivals = Vec::new();
    for r in receivers {
        let got = r
            .join()
            .map_err(|_| FleetError::Traffic("receiver panicked".into()))
            .and_then(|r| r.map_err(|e| FleetError::Traffic(format!("receiver: {e}"))));
        arrivals.push(got);
    }
    during?;
    let (sent, send_errors) = sent?;
    let mut all: Vec<Arrival> = Vec::new();
    for a in arrivals {
        all.extend(a?);
    }
    // The two families' arrivals, merged back into arrival order.
    all.sort_by_key(|a| a.recv_ns);
    Ok(Traffic {
        sent,
        send_errors,
        arrivals: all,
    })
}

/// The server side's socket for one family: bound in `server_ns` on the service address
/// and port, with the arriving interface reported per datagram; the indexes of the server's
/// two interfaces.
fn receiver_socket(
    server_ns: &str,
    server_ifs: &[String; 2],
    v6: bool,
) -> Result<(UdpSocket, [u32; 2]), String> {
    crate::sys::enter_netns(server_ns).map_err(|e| e.to_string())?;
    let (_, service) = endpoints(u16::from(v6));
    let s = UdpSocket::bind(service).map_err(|e| format!("bind {service}: {e}"))?;
    crate::sys::enable_pktinfo(&s).map_err(|e| e.to_string())?;
    // Room for a burst: a stopped dataplane's RX ring is flushed all at once when it
    // runs again, and a full socket buffer would drop current datagrams with it.
    use std::os::fd::AsRawFd;
    crate::sys::force_rcvbuf(s.as_raw_fd(), 16 << 20);
    s.set_read_timeout(Some(Duration::from_millis(50)))
        .map_err(|e| e.to_string())?;
    let idx = |i: usize| crate::sys::if_index(&server_ifs[i]).unwrap_or(0);
    Ok((s, [idx(0), idx(1)]))
}

/// The receiver thread: says on `ready` when it listens, then records every datagram of ours
/// (flow, sequence, times, which server interface) until `stop`.
fn receive(
    server_ns: &str,
    server_ifs: &[String; 2],
    v6: bool,
    start: Instant,
    stop: &AtomicBool,
    ready: &std::sync::mpsc::Sender<Result<[u32; 2], String>>,
) -> Result<Vec<Arrival>, String> {
    let (sock, ifs) = match receiver_socket(server_ns, server_ifs, v6) {
        Ok(x) => x,
        Err(e) => {
            let _ = ready.send(Err(e.clone()));
            return Err(e);
        }
    };
    let _ = ready.send(Ok(ifs));
    let mut out = Vec::new();
    let mut buf = [0u8; 256];
    while !stop.load(Ordering::Relaxed) {
        match crate::sys::recv_with_ifindex(&sock, &mut buf) {
            Ok((n, ifindex)) => {
                let recv_ns = nanos(start);
                if let Some((flow, seq, sent_ns)) = decode(buf.get(..n).unwrap_or(&[])) {
                    out.push(Arrival {
                        flow,
                        seq,
                        sent_ns,
                        recv_ns,
                        via: ifs.iter().position(|&i| i == ifindex && i != 0),
                    });
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(format!("recvmsg: {e}")),
        }
    }
    Ok(out)
}

/// The sender thread: one connected socket per flow in `client_ns` (even flows IPv4, odd
/// IPv6), datagrams paced at the flows' rate, round robin, for `duration`; each flow's send
/// times, and the send errors.
fn send(
    client_ns: &str,
    flows: Flows,
    duration: Duration,
    start: Instant,
) -> Result<(Vec<Vec<u64>>, u64), String> {
    crate::sys::enter_netns(client_ns).map_err(|e| e.to_string())?;
    let socks = (0..flows.count)
        .map(|f| {
            let (src, dst) = endpoints(f);
            let s = UdpSocket::bind(SocketAddr::new(src, FIRST_SRC_PORT + f))
                .map_err(|e| format!("bind {src}:{}: {e}", FIRST_SRC_PORT + f))?;
            s.connect(dst).map_err(|e| format!("connect {dst}: {e}"))?;
            Ok(s)
        })
        .collect::<Result<Vec<_>, String>>()?;
    let rate = f64::from(flows.pps_per_flow) * f64::from(flows.count);
    let per_flow = (duration.as_secs_f64() * f64::from(flows.pps_per_flow)) as usize + 16;
    let mut sent = vec![Vec::with_capacity(per_flow); usize::from(flows.count)];
    let (mut k, mut errors) = (0u64, 0u64);
    let t0 = Instant::now();
    while t0.elapsed() < duration {
        // Every datagram due by now (paced at `rate`, round robin over the flows).
        let due = (t0.elapsed().as_secs_f64() * rate) as u64;
        while k < due {
            let f = usize::try_from(k % u64::from(flows.count)).unwrap_or(0);
            if let (Some(s), Some(times)) = (socks.get(f), sent.get_mut(f)) {
                let flow = u16::try_from(f).unwrap_or(0);
                let seq = u32::try_from(times.len()).unwrap_or(u32::MAX);
                let now = nanos(start);
                if s.send(&encode(flow, seq, now)).is_err() {
                    errors += 1;
                }
                times.push(now);
            }
            k += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok((sent, errors))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_round_trips_and_strangers_are_ignored() {
        let b = encode(77, 123_456, 9_876_543_210);
        assert_eq!(decode(&b), Some((77, 123_456, 9_876_543_210)));
        let mut other = b;
        other[0] ^= 1;
        assert_eq!(decode(&other), None);
        assert_eq!(decode(&b[..PAYLOAD - 1]), None);
    }
}
