//! The generator program (`bpf/gen.bpf.c`): frames sent with BPF_PROG_RUN's live-frames
//! mode.

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags};

use super::{lb, object_storage, skel, sum_percpu_u64, BpfError, GenConfig};

/// The live-frames generator program.
pub(crate) struct Gen {
    skel: skel::gen::GenSkel<'static>,
}

/// BPF_F_TEST_XDP_LIVE_FRAMES (linux/bpf.h).
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;

impl Gen {
    /// Loads the generator with its header template.
    pub(crate) fn load(cfg: GenConfig) -> Result<Gen, BpfError> {
        let mut open = skel::gen::GenSkelBuilder::default()
            .open(object_storage())
            .map_err(lb("opening gen.bpf.o"))?;
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.cfg = cfg;
        }
        let skel = open.load().map_err(lb("loading gen.bpf.o (verifier)"))?;
        Ok(Gen { skel })
    }

    /// Sends `frame` `repeat` times out of `ifindex` (in the caller's netns) as live frames,
    /// from the calling CPU. Returns the kernel's average time per frame.
    pub(crate) fn send(
        &self,
        frame: &[u8],
        ifindex: u32,
        queue: u32,
        repeat: u32,
    ) -> Result<std::time::Duration, BpfError> {
        let mut ctx = skel::gen::types::xdp_md {
            data: 0,
            data_end: frame.len() as u32,
            ingress_ifindex: ifindex,
            rx_queue_index: queue,
            ..Default::default()
        };
        #[allow(unsafe_code)]
        // SAFETY: xdp_md is a plain repr(C) struct of u32 fields without padding, so viewing it
        // as bytes is sound; the slice does not outlive `ctx`.
        let ctx_bytes = unsafe {
            std::slice::from_raw_parts_mut(
                (&mut ctx as *mut skel::gen::types::xdp_md).cast::<u8>(),
                std::mem::size_of_val(&ctx),
            )
        };
        let input = libbpf_rs::ProgramInput {
            context_in: Some(ctx_bytes),
            data_in: Some(frame),
            flags: BPF_F_TEST_XDP_LIVE_FRAMES,
            repeat,
            ..Default::default()
        };
        let out = self
            .skel
            .progs
            .xdp_gen
            .test_run(input)
            .map_err(lb("BPF_PROG_TEST_RUN (live frames)"))?;
        Ok(out.duration)
    }

    /// Frames the program has handled, summed over CPUs.
    pub(crate) fn count(&self) -> u64 {
        sum_percpu_u64(
            self.skel
                .maps
                .gen_count
                .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
                .ok()
                .flatten(),
        )
    }
}
