//! The hand-written C header agrees with the Rust ABI types: every struct's size and every
//! field's offset, compiled by the C compiler from a file that includes the header twice.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane_plugin::abi;
use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::process::Command;

/// A C struct: its name, its Rust size, and each field with its Rust offset.
type Layout = (&'static str, usize, Vec<(&'static str, usize)>);

/// Every struct of the ABI with its fields.
fn layout() -> Vec<Layout> {
    macro_rules! s {
        ($c:literal, $t:ty, [$($f:ident),* $(,)?]) => {
            ($c, size_of::<$t>(), vec![$((stringify!($f), offset_of!($t, $f))),*])
        };
    }
    vec![
        s!(
            "backplane_message_t",
            abi::Message,
            [struct_size, reserved, data, capacity]
        ),
        s!(
            "backplane_option_t",
            abi::BackendOption,
            [struct_size, reserved, name, value]
        ),
        s!(
            "backplane_host_info_t",
            abi::HostInfo,
            [
                struct_size,
                abi_major,
                abi_minor,
                reserved,
                plugin_path,
                options,
                num_options
            ]
        ),
        s!(
            "backplane_tensor_info_t",
            abi::TensorInfo,
            [
                struct_size,
                dtype,
                rank,
                quant_kind,
                dims,
                scales,
                zero_points,
                num_scales,
                quant_axis
            ]
        ),
        s!(
            "backplane_tensor_view_t",
            abi::TensorView,
            [struct_size, reserved, info, data, num_bytes, handle]
        ),
        s!(
            "backplane_attribute_t",
            abi::Attribute,
            [
                struct_size,
                kind,
                name,
                int_value,
                float_value,
                string_value,
                ints,
                floats,
                count
            ]
        ),
        s!(
            "backplane_layer_desc_t",
            abi::LayerDesc,
            [
                struct_size,
                reserved,
                name,
                op_type,
                attributes,
                num_attributes,
                inputs,
                num_inputs,
                outputs,
                num_outputs,
                constants
            ]
        ),
        s!(
            "backplane_capability_t",
            abi::Capability,
            [struct_size, kind, name, int_value, text]
        ),
        s!(
            "backplane_tensor_handle_factory_t",
            abi::TensorHandleFactoryDesc,
            [
                struct_size,
                flags,
                id,
                import_sources,
                export_sources,
                layout,
                reserved
            ]
        ),
        s!(
            "backplane_subgraph_tensor_t",
            abi::SubgraphTensor,
            [struct_size, flags, id, name, info]
        ),
        s!(
            "backplane_subgraph_layer_t",
            abi::SubgraphLayer,
            [struct_size, reserved, id, desc, inputs, outputs]
        ),
        s!(
            "backplane_subgraph_t",
            abi::Subgraph,
            [
                struct_size,
                reserved,
                layers,
                num_layers,
                tensors,
                num_tensors
            ]
        ),
        s!(
            "backplane_value_ref_t",
            abi::ValueRef,
            [struct_size, kind, tensor, constant, layer, slot]
        ),
        s!(
            "backplane_replacement_layer_t",
            abi::ReplacementLayer,
            [struct_size, reserved, desc, inputs, num_inputs, outputs]
        ),
        s!(
            "backplane_substitution_t",
            abi::Substitution,
            [
                struct_size,
                reserved,
                replaced,
                num_replaced,
                layers,
                num_layers
            ]
        ),
        s!(
            "backplane_optimization_sink_t",
            abi::OptimizationSink,
            [
                struct_size,
                reserved,
                user,
                add_substitution,
                add_failed,
                add_untouched
            ]
        ),
        s!(
            "backplane_backend_vtable_t",
            abi::BackendVTable,
            [
                struct_size,
                abi_major,
                abi_minor,
                reserved,
                create_instance,
                destroy_instance,
                backend_version,
                is_layer_supported,
                create_workload_factory,
                destroy_workload_factory,
                create_workload,
                execute_workload,
                destroy_workload,
                create_memory_manager,
                memory_manager_acquire,
                memory_manager_release,
                destroy_memory_manager,
                create_context,
                destroy_context,
                context_before_load,
                context_after_load,
                context_before_unload,
                context_after_unload,
                capabilities,
                tensor_handle_factories,
                handle_factory_preferences,
                create_tensor_handle,
                destroy_tensor_handle,
                map_tensor_handle,
                unmap_tensor_handle,
                optimize_subgraph,
                context_after_execute,
            ]
        ),
    ]
}

/// Compile and run a C program printing `name value` lines; parse them.
fn c_values(tag: &str, program: &str, flags: &[&str]) -> BTreeMap<String, String> {
    let dir = common::scratch(tag);
    let src = dir.join("layout.c");
    std::fs::write(&src, program).unwrap();
    let exe = dir.join("layout");
    let mut cmd = Command::new(common::cc());
    cmd.args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I"])
        .arg(common::repo().join("include"))
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(&src);
    common::run(&mut cmd);
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn layout_program() -> String {
    let mut body = String::new();
    for (name, _, fields) in layout() {
        body += &format!("    printf(\"{name} %zu\\n\", sizeof({name}));\n");
        for (f, _) in fields {
            body += &format!("    printf(\"{name}.{f} %zu\\n\", offsetof({name}, {f}));\n");
        }
    }
    format!(
        "#include \"backplane/backend.h\"\n\
         #include \"backplane/backend.h\" /* twice: the include guard must hold */\n\
         #include <stddef.h>\n#include <stdio.h>\n\
         int main(void) {{\n{body}\
             printf(\"major %d\\n\", BACKPLANE_ABI_VERSION_MAJOR);\n\
             printf(\"minor %d\\n\", BACKPLANE_ABI_VERSION_MINOR);\n\
             printf(\"target %d\\n\", BACKPLANE_ABI_TARGET_MINOR);\n\
             printf(\"status_panicked %d\\n\", BACKPLANE_STATUS_PANICKED);\n\
             printf(\"dtype_f16 %d\\n\", BACKPLANE_DTYPE_F16);\n\
             printf(\"dtype_low %d %d %d %d %d %d %d\\n\", BACKPLANE_DTYPE_BF16, BACKPLANE_DTYPE_F8E4M3FN, BACKPLANE_DTYPE_F8E4M3FNUZ, BACKPLANE_DTYPE_F8E5M2, BACKPLANE_DTYPE_F8E5M2FNUZ, BACKPLANE_DTYPE_U4, BACKPLANE_DTYPE_I4);\n\
             printf(\"attr_floats %d\\n\", BACKPLANE_ATTR_FLOATS);\n\
             printf(\"factory_flags %u\\n\", BACKPLANE_FACTORY_MAPPABLE | BACKPLANE_FACTORY_SUB_TENSORS | BACKPLANE_FACTORY_IN_PLACE);\n\
             printf(\"memory %u %u %u %u\\n\", BACKPLANE_MEMORY_NONE, BACKPLANE_MEMORY_HOST, BACKPLANE_MEMORY_DMA_BUF, BACKPLANE_MEMORY_PROTECTED);\n\
             printf(\"layouts %u %u\\n\", BACKPLANE_LAYOUT_STANDARD, BACKPLANE_LAYOUT_CHANNELS_LAST);\n\
             printf(\"tensor_flags %u %u %u\\n\", BACKPLANE_TENSOR_EXTERNAL, BACKPLANE_TENSOR_CONSTANT, BACKPLANE_TENSOR_USED_OUTSIDE);\n\
             printf(\"values %u %u %u\\n\", BACKPLANE_VALUE_EXISTING, BACKPLANE_VALUE_CONSTANT, BACKPLANE_VALUE_PRODUCED);\n\
             printf(\"new_tensor %llu\\n\", (unsigned long long)BACKPLANE_NEW_TENSOR);\n\
             return 0;\n}}\n"
    )
}

#[test]
fn c_header_matches_the_rust_abi_types() {
    let c = c_values("header", &layout_program(), &[]);
    for (name, size, fields) in layout() {
        assert_eq!(c[name], size.to_string(), "sizeof({name})");
        for (f, offset) in fields {
            assert_eq!(
                c[&format!("{name}.{f}")],
                offset.to_string(),
                "offsetof({name}, {f})"
            );
        }
    }
    assert_eq!(c["major"], abi::ABI_VERSION_MAJOR.to_string());
    assert_eq!(c["minor"], abi::ABI_VERSION_MINOR.to_string());
    assert_eq!(c["target"], abi::ABI_VERSION_MINOR.to_string());
    assert_eq!(c["status_panicked"], abi::STATUS_PANICKED.to_string());
    assert_eq!(c["dtype_f16"], abi::DTYPE_F16.to_string());
    let low = [
        abi::DTYPE_BF16,
        abi::DTYPE_F8E4M3FN,
        abi::DTYPE_F8E4M3FNUZ,
        abi::DTYPE_F8E5M2,
        abi::DTYPE_F8E5M2FNUZ,
        abi::DTYPE_U4,
        abi::DTYPE_I4,
    ];
    let low: Vec<String> = low.iter().map(|d| d.to_string()).collect();
    assert_eq!(c["dtype_low"], low.join(" "));
    assert_eq!(c["attr_floats"], abi::ATTR_FLOATS.to_string());
    let flags = abi::FACTORY_MAPPABLE | abi::FACTORY_SUB_TENSORS | abi::FACTORY_IN_PLACE;
    assert_eq!(c["factory_flags"], flags.to_string());
    assert_eq!(
        c["memory"],
        format!(
            "{} {} {} {}",
            abi::MEMORY_NONE,
            abi::MEMORY_HOST,
            abi::MEMORY_DMA_BUF,
            abi::MEMORY_PROTECTED
        )
    );
    // The memory kinds are the backend API's.
    use backplane_plugin::backend_api::MemorySources;
    assert_eq!(abi::MEMORY_HOST, MemorySources::HOST.0);
    assert_eq!(abi::MEMORY_DMA_BUF, MemorySources::DMA_BUF.0);
    assert_eq!(abi::MEMORY_PROTECTED, MemorySources::PROTECTED.0);
    assert_eq!(
        c["layouts"],
        format!("{} {}", abi::LAYOUT_STANDARD, abi::LAYOUT_CHANNELS_LAST)
    );
    assert_eq!(
        c["tensor_flags"],
        format!(
            "{} {} {}",
            abi::TENSOR_EXTERNAL,
            abi::TENSOR_CONSTANT,
            abi::TENSOR_USED_OUTSIDE
        )
    );
    assert_eq!(
        c["values"],
        format!(
            "{} {} {}",
            abi::VALUE_EXISTING,
            abi::VALUE_CONSTANT,
            abi::VALUE_PRODUCED
        )
    );
    assert_eq!(c["new_tensor"], abi::NEW_TENSOR.to_string());
}

#[test]
fn an_older_target_minor_ends_the_table_where_abi_1_0_did() {
    let program = "#include \"backplane/backend.h\"\n#include <stdio.h>\n\
                   int main(void) { printf(\"size %zu\\n\", sizeof(backplane_backend_vtable_t));\n\
                   printf(\"target %d\\n\", BACKPLANE_ABI_TARGET_MINOR); return 0; }\n";
    let c = c_values("header-1-0", program, &["-DBACKPLANE_ABI_TARGET_MINOR=0"]);
    assert_eq!(c["size"], abi::VTABLE_SIZE_1_0.to_string());
    assert_eq!(c["target"], "0");
    assert_eq!(
        abi::BackendVTable::min_size_for_minor(0),
        abi::VTABLE_SIZE_1_0
    );
    assert_eq!(
        abi::BackendVTable::min_size_for_minor(1),
        abi::VTABLE_SIZE_1_1
    );
    assert_eq!(
        abi::BackendVTable::min_size_for_minor(2),
        abi::VTABLE_SIZE_1_2
    );
}

#[test]
fn target_minor_1_ends_the_table_where_abi_1_1_did() {
    let program = "#include \"backplane/backend.h\"\n#include <stdio.h>\n\
                   int main(void) { printf(\"size %zu\\n\", sizeof(backplane_backend_vtable_t));\n\
                   printf(\"target %d\\n\", BACKPLANE_ABI_TARGET_MINOR); return 0; }\n";
    let c = c_values("header-1-1", program, &["-DBACKPLANE_ABI_TARGET_MINOR=1"]);
    assert_eq!(c["size"], abi::VTABLE_SIZE_1_1.to_string());
    assert_eq!(c["target"], "1");
    const { assert!(abi::VTABLE_SIZE_1_0 < abi::VTABLE_SIZE_1_1) };
    const { assert!(abi::VTABLE_SIZE_1_1 < abi::VTABLE_SIZE_1_2) };
}

#[test]
fn the_header_compiles_as_cpp_too() {
    let dir = common::scratch("header-cpp");
    let src = dir.join("use.cpp");
    std::fs::write(
        &src,
        "#include \"backplane/backend.h\"\n#include \"backplane/backend.h\"\n\
         static_assert(sizeof(backplane_backend_vtable_t) > 0, \"table\");\n\
         int main() { return 0; }\n",
    )
    .unwrap();
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let mut cmd = Command::new(cxx);
    cmd.args([
        "-std=c++11",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-fsyntax-only",
        "-I",
    ])
    .arg(common::repo().join("include"))
    .arg(&src);
    common::run(&mut cmd);
}
