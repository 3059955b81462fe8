//! The control thread's handling of netlink events: any order of route (three metrics,
//! on-link, one to three gateways, reject types, other interfaces), neighbour, link and
//! address events, decoded from the input by `control::model::events`, is applied through
//! the control thread's own code without sockets (`control::offline::Offline`) and, after
//! every event, the table's answer for every interesting destination and flow must be one
//! the kernel's state implies (`control::model::KernelModel`), and each port's addresses
//! the kernel's.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(why) = dataplane::control::model::replay(data, 160) {
        panic!("{why}");
    }
});
