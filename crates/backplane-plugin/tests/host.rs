//! The host side of the ABI against shared objects compiled from the zoo: Arm NN's
//! DynamicBackendTests handle utilities and backend-object checks, and versioning.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use backplane_backend_api::{Backend, BackendOptions, BackendVersion};
use backplane_plugin::host::{self, is_compatible, LoadError, PluginLibrary};
use std::path::{Path, PathBuf};

fn zoo_source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/zoo/zoo_backend.c")
}

/// Compile the zoo with `flags` into `dir/name`.
fn zoo(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    common::shared_object(&[&zoo_source()], &dir.join(name), flags)
}

fn open_err(path: &Path) -> LoadError {
    PluginLibrary::open(path).expect_err("should not load")
}

// --- Handle utilities -------------------------------------------------------------------

#[test]
fn open_a_valid_shared_object_and_reopen_it_through_the_cache() {
    let dir = common::scratch("open-valid");
    let so = zoo(&dir, "Zoo_Zoo_backend.so", &[]);
    let a = PluginLibrary::open(&so).unwrap();
    let b = PluginLibrary::open(&so).unwrap();
    // Counted for this file only: other tests open libraries at the same time.
    assert_eq!(host::library_handles(&so), 1, "reopening reuses the handle");
    assert_eq!(a.path(), b.path());
    assert_eq!(a.id().as_str(), "Zoo");
}

#[test]
fn open_an_empty_path_is_an_error() {
    assert_eq!(open_err(Path::new("")), LoadError::EmptyPath);
}

#[test]
fn open_a_missing_file_is_an_error() {
    let err = open_err(Path::new("/backplane/no/such/Acme_X_backend.so"));
    assert!(matches!(err, LoadError::Open(_)), "{err}");
}

#[test]
fn a_text_file_is_not_a_shared_object() {
    let dir = common::scratch("text-file");
    let f = dir.join("Acme_Text_backend.so");
    std::fs::write(&f, "this is not a shared object\n").unwrap();
    let err = open_err(&f);
    assert!(matches!(err, LoadError::Open(_)), "{err}");
    assert!(
        err.to_string()
            .contains("cannot open it as a shared object"),
        "{err}"
    );
}

#[test]
fn resolve_exported_hidden_mangled_and_missing_symbols() {
    let dir = common::scratch("symbols");
    let plain = zoo(&dir, "plain.so", &[]);
    assert!(host::exports_symbol(&plain, "ZooAddOne").unwrap());
    assert!(host::exports_symbol(&plain, "GetBackendId").unwrap());
    // Defined, but not exported.
    assert!(!host::exports_symbol(&plain, "ZooHiddenHelper").unwrap());
    // Never defined.
    assert!(!host::exports_symbol(&plain, "NoSuchSymbol").unwrap());
    // Exported only under C++-mangled names: the C name is not found.
    let mangled = zoo(&dir, "mangled.so", &["-DZOO_MANGLED"]);
    assert!(!host::exports_symbol(&mangled, "GetBackendId").unwrap());
    assert!(host::exports_symbol(&mangled, "_Z12GetBackendIdv").unwrap());
    assert_eq!(
        host::exports_symbol(Path::new(""), "x"),
        Err(LoadError::EmptyPath)
    );
}

// --- Versioning -------------------------------------------------------------------------

#[test]
fn versions_follow_the_design_note_examples() {
    let v = |major, minor| BackendVersion { major, minor };
    let api = v(2, 4);
    assert!(is_compatible(v(2, 4), api));
    assert!(is_compatible(v(2, 3), api));
    assert!(is_compatible(v(2, 1), api));
    assert!(!is_compatible(v(3, 4), api));
    assert!(!is_compatible(v(1, 4), api));
    assert!(!is_compatible(v(2, 5), api));
    assert!(!is_compatible(v(2, 0), v(1, 0)));
    assert!(!is_compatible(v(2, 0), v(3, 0)));
}

// --- Backend objects --------------------------------------------------------------------

#[test]
fn non_c_linkage_entry_points_are_missing() {
    let dir = common::scratch("mangled-entry");
    let err = open_err(&zoo(&dir, "m.so", &["-DZOO_MANGLED"]));
    assert!(
        matches!(
            err,
            LoadError::MissingEntryPoint {
                symbol: "GetBackendId",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn each_missing_entry_point_is_named() {
    let dir = common::scratch("missing-entry");
    for (flag, symbol) in [
        ("-DZOO_NO_GET_BACKEND_ID", "GetBackendId"),
        ("-DZOO_NO_GET_VERSION", "GetVersion"),
        ("-DZOO_NO_BACKEND_FACTORY", "BackendFactory"),
    ] {
        let err = open_err(&zoo(&dir, &format!("{symbol}.so"), &[flag]));
        match &err {
            LoadError::MissingEntryPoint { symbol: s, .. } => assert_eq!(*s, symbol),
            other => panic!("{flag}: {other}"),
        }
        assert!(err.to_string().contains(symbol), "{err}");
    }
}

#[test]
fn get_backend_id_returning_null_is_rejected() {
    let dir = common::scratch("null-id");
    assert_eq!(
        open_err(&zoo(&dir, "n.so", &["-DZOO_NULL_ID"])),
        LoadError::NullId
    );
}

#[test]
fn ids_with_invalid_characters_and_reserved_ids_are_rejected() {
    let dir = common::scratch("bad-id");
    for (i, id) in ["Bad-Id", "", "Unknown", "Has Space"].iter().enumerate() {
        let flag = format!("-DZOO_ID=\"{id}\"");
        let err = open_err(&zoo(&dir, &format!("id{i}.so"), &[&flag]));
        assert!(matches!(err, LoadError::InvalidId(_)), "{id}: {err}");
    }
}

/// A 1 MiB id is refused with its length and the limit, the same limit as static backends'.
#[test]
fn a_one_mebibyte_id_is_refused_with_the_limit() {
    let dir = common::scratch("huge-id");
    let err = open_err(&zoo(&dir, "huge.so", &["-DZOO_HUGE_ID"]));
    let text = err.to_string();
    assert!(matches!(err, LoadError::InvalidId(_)), "{text}");
    assert!(
        text.contains("1048576 bytes")
            && text.contains(&format!(
                "at most {}",
                backplane_plugin::host::MAX_BACKEND_ID_LEN
            )),
        "{text}"
    );
    assert!(
        text.len() < 300,
        "the id is not echoed: {} bytes",
        text.len()
    );
    let static_err = backplane_plugin::backend_api::BackendId::new("A".repeat(1 << 20));
    assert!(static_err.is_err_and(|e| e.contains("1048576 bytes") && e.len() < 300));
}

#[test]
fn incompatible_versions_are_rejected_before_the_factory_is_called() {
    let dir = common::scratch("versions");
    let next_minor = format!(
        "-DZOO_MINOR={}",
        backplane_plugin::abi::ABI_VERSION_MINOR + 1
    );
    for (i, flags) in [
        vec!["-DZOO_MAJOR=2"],
        vec!["-DZOO_MAJOR=0", "-DZOO_MINOR=7"],
        vec![next_minor.as_str()],
    ]
    .iter()
    .enumerate()
    {
        let err = open_err(&zoo(&dir, &format!("v{i}.so"), flags));
        assert!(
            matches!(err, LoadError::IncompatibleVersion { .. }),
            "{flags:?}: {err}"
        );
    }
}

#[test]
fn a_null_factory_result_is_rejected() {
    let dir = common::scratch("null-factory");
    assert_eq!(
        open_err(&zoo(&dir, "f.so", &["-DZOO_NULL_FACTORY"])),
        LoadError::NullFactory
    );
}

#[test]
fn malformed_tables_are_rejected() {
    let dir = common::scratch("tables");
    for (flag, needle) in [
        ("-DZOO_SMALL_TABLE", "struct_size"),
        ("-DZOO_NULL_ENTRY", "execute_workload"),
    ] {
        let err = open_err(&zoo(&dir, &format!("{flag}.so"), &[flag]));
        assert!(matches!(err, LoadError::BadTable(_)), "{flag}: {err}");
        assert!(err.to_string().contains(needle), "{flag}: {err}");
    }
}

#[test]
fn failing_creation_and_bad_negotiation_are_reported() {
    let dir = common::scratch("create");
    let lib = PluginLibrary::open(&zoo(&dir, "c.so", &["-DZOO_FAIL_CREATE"])).unwrap();
    let err = lib.instantiate(&BackendOptions::default()).unwrap_err();
    assert_eq!(
        err,
        LoadError::CreateFailed("the zoo backend refuses to be created".into())
    );
    let lib = PluginLibrary::open(&zoo(&dir, "n.so", &["-DZOO_BAD_NEGOTIATION"])).unwrap();
    let err = lib.instantiate(&BackendOptions::default()).unwrap_err();
    assert!(err.to_string().contains("minor 99"), "{err}");
    assert_eq!(
        lib.live_instances(),
        0,
        "the refused instance was destroyed"
    );
}

#[test]
fn instances_are_counted_and_destroyed_with_their_last_user() {
    let dir = common::scratch("instances");
    let so = zoo(&dir, "Zoo_Zoo_backend.so", &[]);
    let lib = PluginLibrary::open(&so).unwrap();
    let a = lib.instantiate(&BackendOptions::default()).unwrap();
    let b = lib.instantiate(&BackendOptions::default()).unwrap();
    assert_eq!(host::live_instances(&so), 2);
    let backend = host::DynamicBackend::new(a.clone());
    let support = backend.layer_support();
    drop(a);
    drop(backend);
    assert_eq!(host::live_instances(&so), 2, "layer support still holds it");
    drop(support);
    assert_eq!(host::live_instances(&so), 1);
    drop(b);
    assert_eq!(host::live_instances(&so), 0);
}
