//! `dataplane fleet-demo`: two appliances behind an ECMP upstream on this machine (network
//! namespaces, BIRD, `dataplane run` + `dataplane announce` in each), paced UDP flows through
//! them, a fault injected into one appliance's dataplane and undone; the table and plot of
//! what the flows saw (docs/FLEET.md).
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::{need_root, secs};
use dataplane::fleet::report::{Outcome, Schedule};
use dataplane::fleet::traffic::{self, Flows};
use dataplane::fleet::{Fault, Fleet};

/// Run a fleet of two appliances behind an ECMP upstream (BIRD, BGP + BFD) in network
/// namespaces, send paced UDP flows through it, stall or kill appliance a's dataplane or
/// cut its link, and bring it back; print each appliance's share, the loss and the times to withdraw and
/// return; write fleet.json, fleet.md and fleet.svg. Leaves nothing behind.
#[derive(clap::Args)]
pub struct FleetArgs {
    /// Name prefix of the namespaces and interfaces (1-10 of [a-z0-9]).
    #[arg(long, default_value = "fleet")]
    prefix: String,
    /// Seconds of traffic.
    #[arg(long, default_value_t = 30.0)]
    secs: f64,
    /// What happens to appliance a: stop (its dataplane SIGSTOPped, then SIGCONT), kill
    /// (SIGKILL, then started again) or link (its link to the servers down, then up).
    #[arg(long, value_enum, default_value = "stop")]
    fault: FaultArg,
    /// When the fault comes, seconds into the traffic.
    #[arg(long, default_value_t = 10.0)]
    fault_at: f64,
    /// When it is undone, seconds into the traffic.
    #[arg(long, default_value_t = 20.0)]
    recover_at: f64,
    /// Number of flows (UDP source ports).
    #[arg(long, default_value_t = 128)]
    flows: u16,
    /// Datagrams per second per flow.
    #[arg(long, default_value_t = 40)]
    pps_per_flow: u32,
    /// Where fleet.json, fleet.md, fleet.svg and the daemons' logs go.
    #[arg(long, default_value = "bench/out/fleet")]
    out: std::path::PathBuf,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum FaultArg {
    Stop,
    Kill,
    Link,
    Bird,
    Stale,
}

pub fn main(a: FleetArgs) -> Result<()> {
    need_root("fleet-demo (network namespaces, XDP)")?;
    let duration = secs(a.secs, "--secs")?;
    let fault_at = secs(a.fault_at, "--fault-at")?;
    let recover_at = secs(a.recover_at, "--recover-at")?;
    if !(fault_at < recover_at && recover_at < duration) {
        anyhow::bail!(
            "--fault-at {} < --recover-at {} < --secs {} must hold",
            a.fault_at,
            a.recover_at,
            a.secs
        );
    }
    if a.flows == 0 || a.pps_per_flow == 0 {
        anyhow::bail!("--flows and --pps-per-flow must be above 0");
    }
    let fault = match a.fault {
        FaultArg::Stop => Fault::Stop,
        FaultArg::Kill => Fault::Kill,
        FaultArg::Link => Fault::Link,
        FaultArg::Bird => Fault::Bird,
        FaultArg::Stale => Fault::Stale,
    };
    let exe = std::env::current_exe().context("the dataplane binary's path")?;
    let mut fleet = Fleet::new(&a.prefix, &exe)?;
    let flows = Flows {
        count: a.flows,
        pps_per_flow: a.pps_per_flow,
    };
    let result = run(&mut fleet, flows, fault, fault_at, recover_at, duration);
    fleet.keep_logs(&a.out.join("logs"));
    fleet.down();
    let left = fleet.leftovers();
    let outcome = result?;
    if !left.is_empty() {
        anyhow::bail!("left behind: {}", left.join("; "));
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let table = outcome.table();
    std::fs::write(a.out.join("fleet.md"), &table).context("writing fleet.md")?;
    std::fs::write(
        a.out.join("fleet.json"),
        serde_json::to_string_pretty(&outcome)?,
    )
    .context("writing fleet.json")?;
    outcome
        .plot(&a.out.join("fleet.svg"))
        .map_err(anyhow::Error::msg)?;
    println!("{table}");
    println!(
        "wrote {0}/fleet.json, {0}/fleet.md, {0}/fleet.svg; namespaces and processes removed",
        a.out.display()
    );
    Ok(())
}

fn run(
    fleet: &mut Fleet,
    flows: Flows,
    fault: Fault,
    fault_at: Duration,
    recover_at: Duration,
    duration: Duration,
) -> Result<Outcome> {
    eprintln!("fleet: building namespaces, starting BIRD x3, dataplane + announce x2");
    fleet.up()?;
    let t = Instant::now();
    fleet.wait_ready(Duration::from_secs(60))?;
    eprintln!(
        "fleet: the upstream routes {} and {} over both appliances ({:.1} s); traffic for {:.0} s",
        dataplane::fleet::SERVICE_PREFIX,
        dataplane::fleet::SERVICE_PREFIX6,
        t.elapsed().as_secs_f64(),
        duration.as_secs_f64()
    );
    let (client, server) = (fleet.ns("cl"), fleet.ns("sv"));
    let ifs = [fleet.server_if(0), fleet.server_if(1)];
    let forwarded = |fleet: &Fleet| -> Result<[u64; 2], dataplane::fleet::FleetError> {
        Ok([fleet.kernel_forwarded(0)?, fleet.kernel_forwarded(1)?])
    };
    let at_start = forwarded(fleet)?;
    let mut at_fault = [0u64; 2];
    let traffic = traffic::run(
        &client,
        &server,
        ifs,
        flows,
        duration,
        Duration::from_millis(300),
        |start| {
            let until = |d: Duration| std::thread::sleep(d.saturating_sub(start.elapsed()));
            // Read just before the fault (two short commands), so the fault lands on time.
            until(fault_at.saturating_sub(Duration::from_millis(200)));
            at_fault = forwarded(fleet)?;
            until(fault_at);
            eprintln!(
                "fleet: {:.1} s: appliance a: {}",
                fault_at.as_secs_f64(),
                fault.name()
            );
            fleet.fault(0, fault)?;
            until(recover_at);
            eprintln!("fleet: {:.1} s: appliance a back", recover_at.as_secs_f64());
            fleet.recover(0, fault)
        },
    )?;
    let mut outcome = Outcome::of(
        &Schedule {
            fault,
            fault_at,
            recover_at,
            duration,
        },
        flows,
        &traffic,
    );
    outcome.kernel_forwarded_before = Some([
        at_fault[0].saturating_sub(at_start[0]),
        at_fault[1].saturating_sub(at_start[1]),
    ]);
    Ok(outcome)
}
