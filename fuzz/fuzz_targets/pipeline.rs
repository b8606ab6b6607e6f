//! libFuzzer target: import, optimize for CpuRef, load and execute a model file. A panic is a finding.
#![no_main]

use backplane_fuzz::{run_one, Outcome, Target};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

static RUNTIME: OnceLock<Option<backplane_fuzz::Runtime>> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    if let Some(runtime) = RUNTIME.get_or_init(backplane_fuzz::fuzz_runtime) {
        if let Outcome::Panicked(message) = run_one(Target::Pipeline, runtime, data) {
            panic!("pipeline panicked: {message}");
        }
    }
});
