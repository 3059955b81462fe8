//! Compiles the XDP programs in `bpf/` and generates their libbpf-rs skeletons.
use std::{env, path::PathBuf};

use libbpf_cargo::SkeletonBuilder;

const PROGRAMS: &[&str] = &["steer", "sink", "gen", "xdp_fwd"];

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    // Read when the script runs, not when it was compiled: a script binary cargo reuses
    // from another checkout of the same package must still build this checkout's programs.
    let manifest = env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR is set by cargo");
    let bpf_dir = PathBuf::from(manifest).join("../bpf");
    println!(
        "cargo:rerun-if-changed={}",
        bpf_dir.join("dataplane.h").display()
    );
    for name in PROGRAMS {
        let src = bpf_dir.join(format!("{name}.bpf.c"));
        let skel = out.join(format!("{name}.skel.rs"));
        SkeletonBuilder::new()
            .source(&src)
            .clang_args([
                "-I/usr/include/x86_64-linux-gnu",
                "-I",
                bpf_dir.to_str().expect("bpf path is UTF-8"),
                "-Wall",
            ])
            .build_and_generate(&skel)
            .unwrap_or_else(|e| panic!("building {}: {e:#}", src.display()));
        println!("cargo:rerun-if-changed={}", src.display());
    }
}
