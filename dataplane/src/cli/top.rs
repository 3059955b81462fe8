//! `dataplane top`: a running instance's pollers and ports, live, from its metrics endpoint:
//! a terminal UI (ratatui) refreshed every interval; `--once` / `--json` print one sample for
//! scripts; `--screen` prints one frame of the UI as text.
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::widgets::{Block, Paragraph, Row, Table};
use ratatui::Frame;

use super::{secs, stop_flag};
use dataplane::telemetry::parse_listen;
use dataplane::telemetry::scrape::{self, PollerRow, PortRow};

/// Show a running `dataplane run --metrics` instance per poller and per port, refreshed
/// every interval: Mpps, Gbit/s, drops/s with the top reason, busy %, average burst; with
/// rebalancing on, each poller's load (busy share of time) and its RSS buckets.
#[derive(clap::Args)]
pub struct TopArgs {
    /// The instance's metrics endpoint, ADDR:PORT or PORT (127.0.0.1).
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: String,
    /// Seconds between samples.
    #[arg(long, default_value_t = 1.0)]
    interval: f64,
    /// Print one sample as a plain table and exit (for scripts).
    #[arg(long)]
    once: bool,
    /// Print one sample as JSON and exit.
    #[arg(long)]
    json: bool,
    /// Print one frame of the terminal UI as text, COLSxROWS (e.g. 100x16), and exit.
    #[arg(long, value_name = "COLSxROWS")]
    screen: Option<String>,
}

/// One sample: the rows between two scrapes an interval apart.
fn sample(
    addr: std::net::SocketAddr,
    interval: Duration,
) -> Result<(Vec<PollerRow>, Vec<PortRow>)> {
    let before = scrape::parse(&scrape::fetch(addr)?);
    let t0 = Instant::now();
    std::thread::sleep(interval);
    let after = scrape::parse(&scrape::fetch(addr)?);
    let dt = t0.elapsed().as_secs_f64();
    Ok((
        scrape::poller_rows(&before, &after, dt),
        scrape::port_rows(&before, &after, dt),
    ))
}

/// Samples and shows the instance until interrupted (or once).
pub fn main(a: TopArgs) -> Result<()> {
    let addr = parse_listen(&a.metrics)?;
    let interval = secs(a.interval, "--interval")?;
    if a.json || a.once || a.screen.is_some() {
        let (pollers, ports) = sample(addr, interval)?;
        if a.json {
            println!(
                "{}",
                serde_json::to_string_pretty(
                    &serde_json::json!({"pollers": pollers, "ports": ports})
                )?
            );
        } else if let Some(size) = &a.screen {
            print!(
                "{}",
                screen(size, &addr.to_string(), a.interval, &pollers, &ports)?
            );
        } else {
            print!("{}", scrape::render(&pollers, &ports));
        }
        return Ok(());
    }
    interactive(addr, interval, a.interval)
}

/// The full-screen view: redrawn every interval; q, Esc or Ctrl-C quits.
fn interactive(addr: std::net::SocketAddr, interval: Duration, every: f64) -> Result<()> {
    let stop = stop_flag()?;
    let mut terminal = ratatui::try_init().context("starting the terminal UI")?;
    let result = (|| -> Result<()> {
        let mut before = scrape::parse(&scrape::fetch(addr)?);
        let mut t0 = Instant::now();
        let (mut pollers, mut ports) = (Vec::new(), Vec::new());
        let name = addr.to_string();
        loop {
            terminal.draw(|f| draw(f, &name, every, &pollers, &ports))?;
            if event::poll(Duration::from_millis(50))? {
                if let Event::Key(k) = event::read()? {
                    let ctrl_c =
                        k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                    if matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) || ctrl_c {
                        return Ok(());
                    }
                }
            }
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            if t0.elapsed() >= interval {
                let after = scrape::parse(&scrape::fetch(addr)?);
                let dt = t0.elapsed().as_secs_f64();
                pollers = scrape::poller_rows(&before, &after, dt);
                ports = scrape::port_rows(&before, &after, dt);
                before = after;
                t0 = Instant::now();
            }
        }
    })();
    ratatui::try_restore().context("restoring the terminal")?;
    result
}

/// One frame of the view, as text.
fn screen(
    size: &str,
    name: &str,
    every: f64,
    pollers: &[PollerRow],
    ports: &[PortRow],
) -> Result<String> {
    let (w, h) = size
        .split_once('x')
        .and_then(|(w, h)| Some((w.parse::<u16>().ok()?, h.parse::<u16>().ok()?)))
        .filter(|(w, h)| *w >= 40 && *h >= 8)
        .with_context(|| format!("--screen {size}: expected COLSxROWS, at least 40x8"))?;
    let mut t = ratatui::Terminal::new(ratatui::backend::TestBackend::new(w, h))?;
    t.draw(|f| draw(f, name, every, pollers, ports))?;
    let buf = t.backend().buffer();
    let mut out = String::new();
    for y in 0..h {
        let line: String = (0..w)
            .map(|x| buf.cell((x, y)).map_or(" ", |c| c.symbol()))
            .collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    Ok(out)
}

fn draw(f: &mut Frame, name: &str, every: f64, pollers: &[PollerRow], ports: &[PortRow]) {
    let [head, top, bottom] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(pollers.len() as u16 + 3),
        Constraint::Min(3),
    ])
    .areas(f.area());
    f.render_widget(
        Paragraph::new(format!(
            "dataplane top {name}  every {every:.1} s  (q quits)"
        ))
        .style(Style::default().add_modifier(Modifier::BOLD)),
        head,
    );
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let poller_rows = pollers.iter().map(|r| {
        Row::new(vec![
            r.poller.clone(),
            r.cpu.clone(),
            format!("{:.3}", r.rx_pps / 1e6),
            format!("{:.3}", r.tx_pps / 1e6),
            format!("{:.3}", r.tx_gbps),
            format!("{:.0}", r.drops_ps),
            r.top_drop.clone().unwrap_or_else(|| "-".into()),
            format!("{:.1}", r.busy_pct),
            format!("{:.1}", r.avg_burst),
            r.load_pct.map_or("-".into(), |l| format!("{l:.1}")),
            r.buckets.map_or("-".into(), |b| b.to_string()),
        ])
    });
    f.render_widget(
        Table::new(
            poller_rows,
            [
                Constraint::Length(6),
                Constraint::Length(4),
                Constraint::Length(8),
                Constraint::Length(8),
                Constraint::Length(8),
                Constraint::Length(9),
                Constraint::Length(20),
                Constraint::Length(6),
                Constraint::Length(6),
                Constraint::Length(6),
                Constraint::Length(8),
            ],
        )
        .header(
            Row::new([
                "poller", "cpu", "rx Mpps", "tx Mpps", "tx Gb/s", "drops/s", "top drop", "busy%",
                "burst", "load%", "buckets",
            ])
            .style(bold),
        )
        .block(Block::bordered().title(" pollers ")),
        top,
    );
    let port_rows = ports.iter().map(|p| {
        Row::new(vec![
            p.port.clone(),
            format!("{:.0}", p.redirected_ps),
            p.to_kernel_ps.map_or("-".into(), |k| format!("{k:.0}")),
        ])
    });
    f.render_widget(
        Table::new(
            port_rows,
            [
                Constraint::Length(16),
                Constraint::Length(14),
                Constraint::Length(14),
            ],
        )
        .header(Row::new(["port", "to pollers/s", "to kernel/s"]).style(bold))
        .block(Block::bordered().title(" ports and sub-interfaces (name@port) ")),
        bottom,
    );
}
