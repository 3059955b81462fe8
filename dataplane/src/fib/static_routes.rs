//! Static routes and neighbours (from the config) loaded into a [`Rib`]. The values are
//! [`crate::types`]'s, so the config parses them without knowing the table.
use super::rib::{Rib, RouteKind};
use super::{Capacity, FibError, HopState};
pub use crate::types::{Neighbour, Route};

impl Route {
    /// What the route does, for the RIB.
    pub(crate) fn kind(&self) -> RouteKind {
        if self.via.is_empty() {
            RouteKind::Connected { port: self.port }
        } else {
            RouteKind::Via(self.via.iter().map(|g| (self.port, *g)).collect())
        }
    }
}

/// A RIB for `ports` ports and `readers` pollers holding static `routes` and `neighbours`
/// (a next hop with no neighbour entry counts as failed: nothing will resolve it). Later
/// duplicates win.
pub fn build_table(
    routes: &[Route],
    neighbours: &[Neighbour],
    ports: usize,
    readers: usize,
) -> Result<Rib, FibError> {
    rib_for_run(ports, readers, false, routes, neighbours)
}

/// Puts static `routes` and `neighbours` into `rib` (neighbours first, so routes find them).
pub(crate) fn load(
    rib: &mut Rib,
    routes: &[Route],
    neighbours: &[Neighbour],
) -> Result<(), FibError> {
    for n in neighbours {
        rib.set_neighbour(n.port, n.ip, HopState::Reachable, n.mac)?;
    }
    for r in routes {
        rib.set_route(r.prefix, r.len, r.kind())?;
    }
    Ok(())
}

/// The routing base for a run: `ports` ports, `readers` pollers, next hops resolved by the
/// kernel's neighbour table when `kernel_routes` (the control thread then loads the routes),
/// else the static `routes` and `neighbours` loaded now.
pub(crate) fn rib_for_run(
    ports: usize,
    readers: usize,
    kernel_routes: bool,
    routes: &[Route],
    neighbours: &[Neighbour],
) -> Result<Rib, FibError> {
    let mut rib = Rib::new(ports, readers, Capacity::default(), kernel_routes)?;
    load(&mut rib, routes, neighbours)?;
    Ok(rib)
}
