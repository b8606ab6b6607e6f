//! ABI 1.3's end-of-execution hook, through the host's backend as the runtime uses it:
//! the example C plugin (examples/dynamic-backend-c) counts `context_after_execute` calls
//! and reports the count as a capability; the same plugin built for ABI 1.2 has no hook,
//! and the host's context then answers the call without reaching the plugin.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane_backend_api::{Backend, BackendOptions, CapabilityValue, NetworkId};
use backplane_plugin::host::{DynamicBackend, PluginLibrary};

fn executions(backend: &DynamicBackend) -> Option<i64> {
    match backend.capabilities().get("Executions") {
        Some(CapabilityValue::Int(n)) => Some(*n),
        None => None,
        other => panic!("Executions is not a count: {other:?}"),
    }
}

#[test]
fn the_example_plugin_counts_ended_executions_and_a_1_2_build_has_no_hook() {
    let dir = common::scratch("after-execute");
    let source = common::repo().join("examples/dynamic-backend-c/elementwise_backend.c");
    for (name, flags, hooked) in [
        ("Acme_ElementwiseC_backend.so", &[][..], true),
        (
            "Old_ElementwiseC_backend.so",
            &["-DBACKPLANE_ABI_TARGET_MINOR=2"][..],
            false,
        ),
    ] {
        let so = common::shared_object(&[&source], &dir.join(name), flags);
        let lib = PluginLibrary::open(&so).unwrap();
        let backend = DynamicBackend::new(lib.instantiate(&BackendOptions::default()).unwrap());
        let ctx = backend
            .create_backend_context(&BackendOptions::default())
            .unwrap()
            .expect("the example keeps a context");
        assert_eq!(executions(&backend), Some(0), "{name}");
        for k in 0..3u64 {
            ctx.after_execute_network(NetworkId(k)).unwrap();
        }
        let want = if hooked { 3 } else { 0 };
        assert_eq!(executions(&backend), Some(want), "{name}");
    }
}
