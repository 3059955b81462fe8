//! The libbpf-cargo skeletons generated from `bpf/*.bpf.c` at build time (`build.rs`). Only
//! generated code lives here, so only it carries the allows: it has its own unsafe blocks
//! without `// SAFETY:` comments and items without docs.
#![allow(unsafe_code, missing_docs, clippy::undocumented_unsafe_blocks)]

pub mod steer {
    include!(concat!(env!("OUT_DIR"), "/steer.skel.rs"));
}
pub mod sink {
    include!(concat!(env!("OUT_DIR"), "/sink.skel.rs"));
}
pub mod gen {
    include!(concat!(env!("OUT_DIR"), "/gen.skel.rs"));
}
pub mod xdp_fwd {
    include!(concat!(env!("OUT_DIR"), "/xdp_fwd.skel.rs"));
}
