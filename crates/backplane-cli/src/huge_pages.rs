//! glibc's malloc in transparent huge pages for the whole process.
//!
//! Where transparent huge pages are given only on request (`madvise` mode), a process's
//! buffers lie in 4 KiB pages wherever the kernel found them, and the speed of a model
//! whose weights and activations pass through the caches (ResNet-50) changed from one
//! process to the next by far more than within one (docs/perf.md, session 41). glibc's
//! malloc asks for huge pages for its heap and its large chunks when the tunable
//! `glibc.malloc.hugetlb=1` is set, which it reads only at start-up: so before anything
//! else, the CLI executes itself again with the tunable added to `GLIBC_TUNABLES`. It does
//! not when the user's `GLIBC_TUNABLES` already names that tunable, when
//! `BACKPLANE_HUGE_PAGES=0`, on other C libraries or systems, or in the re-executed
//! process itself (marked by `BACKPLANE_HUGE_PAGES_SET`).

/// The tunable, as glibc spells it.
pub const TUNABLE: &str = "glibc.malloc.hugetlb";

/// The variable that marks the re-executed process (so it never executes itself again,
/// even where the C library drops `GLIBC_TUNABLES`).
const MARK: &str = "BACKPLANE_HUGE_PAGES_SET";

/// The `GLIBC_TUNABLES` value to re-execute with, or `None` to run as we are: `switch` is
/// `BACKPLANE_HUGE_PAGES`, `tunables` the current `GLIBC_TUNABLES`, `marked` whether this
/// process is already the re-executed one.
pub fn tunables_to_set(
    switch: Option<&str>,
    tunables: Option<&str>,
    marked: bool,
) -> Option<String> {
    if marked || switch.is_some_and(|s| s.trim() == "0") {
        return None;
    }
    match tunables.map(str::trim) {
        None | Some("") => Some(format!("{TUNABLE}=1")),
        Some(t) if t.contains(TUNABLE) => None,
        Some(t) => Some(format!("{t}:{TUNABLE}=1")),
    }
}

/// Execute this program again with huge pages for malloc where [`tunables_to_set`] says
/// so; returns only when it does not (or when the execution fails: then this process goes
/// on as it is).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn reexec_with_huge_pages() {
    use std::os::unix::process::CommandExt;
    let var = |k: &str| std::env::var(k).ok();
    let Some(tunables) = tunables_to_set(
        var("BACKPLANE_HUGE_PAGES").as_deref(),
        var("GLIBC_TUNABLES").as_deref(),
        std::env::var_os(MARK).is_some(),
    ) else {
        return;
    };
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new(exe);
    if let Some(arg0) = args.next() {
        command.arg0(arg0);
    }
    // `exec` replaces this process and returns only its error.
    let _ = command
        .args(args)
        .env("GLIBC_TUNABLES", tunables)
        .env(MARK, "1")
        .exec();
}

/// Say (at debug level) when this process is the re-executed one, and with which tunables.
pub fn log_state() {
    if std::env::var_os(MARK).is_some() {
        let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
        tracing::debug!("malloc: transparent huge pages requested (GLIBC_TUNABLES={tunables})");
    }
}

/// Nothing to do outside glibc on Linux.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn reexec_with_huge_pages() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tunable_is_added_unless_set_refused_or_done() {
        let on = Some("glibc.malloc.hugetlb=1".to_string());
        assert_eq!(tunables_to_set(None, None, false), on);
        assert_eq!(tunables_to_set(None, Some(" "), false), on);
        assert_eq!(tunables_to_set(Some("1"), None, false), on);
        assert_eq!(
            tunables_to_set(None, Some("glibc.malloc.arena_max=2"), false).as_deref(),
            Some("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1")
        );
        // The user's own choice of the tunable stands, even 0.
        assert_eq!(
            tunables_to_set(None, Some("glibc.malloc.hugetlb=0"), false),
            None
        );
        assert_eq!(tunables_to_set(Some("0"), None, false), None);
        assert_eq!(tunables_to_set(None, None, true), None);
    }
}
