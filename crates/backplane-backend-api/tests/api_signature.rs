//! The backend API's public surface against its checked-in signature (`api/signature.txt`):
//! a change to a public trait, type or function of this crate fails this test until
//! `BACKEND_API_VERSION` is bumped (major for an incompatible change, minor for an addition)
//! and the signature file is rewritten with `BACKPLANE_BLESS=1 cargo test -p
//! backplane-backend-api --test api_signature`.
//!
//! The signature is every `pub` declaration line of `src/` (items, fields, re-exports), every
//! method declaration inside a `pub trait`, and every variant of a `pub enum`, one per line,
//! whitespace normalized, bodies left out. Types re-exported from backplane-core (the `Op`
//! enum and its descriptors) are versioned with core, not here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use backplane_backend_api::BACKEND_API_VERSION;
use std::path::PathBuf;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// What kind of block a brace opened.
#[derive(Clone, Copy, PartialEq)]
enum Block {
    Trait,
    Enum,
    Other,
}

/// The public declarations of one source file, in order.
fn declarations(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack: Vec<Block> = Vec::new();
    let mut pending: Option<String> = None;
    // Test modules are not API: skipped until the brace depth falls back below theirs.
    let mut skip_below: Option<usize> = None;
    for raw in text.lines() {
        let line = raw.trim();
        if line.starts_with("//") || line.starts_with('#') || line.is_empty() {
            continue;
        }
        if skip_below.is_none() && line.starts_with("mod tests") {
            skip_below = Some(stack.len());
        }
        if let Some(depth) = skip_below {
            for c in line.chars() {
                match c {
                    '{' => stack.push(Block::Other),
                    '}' => {
                        stack.pop();
                    }
                    _ => {}
                }
            }
            if stack.len() <= depth && line.contains('}') {
                skip_below = None;
            }
            continue;
        }
        let parent = stack.last().copied();
        let wanted = pending.is_some()
            || line.starts_with("pub ")
            || (parent == Some(Block::Trait) && stack.len() == 1 && line.starts_with("fn "))
            || (parent == Some(Block::Enum)
                && stack.len() == 1
                && line.chars().next().is_some_and(char::is_uppercase));
        if wanted {
            let mut decl = pending.take().unwrap_or_default();
            if !decl.is_empty() {
                decl.push(' ');
            }
            decl.push_str(line);
            // A declaration ends where its body opens or the line ends it, once its
            // parentheses are closed (a signature over several lines).
            let open = decl.matches('(').count() > decl.matches(')').count();
            let end = decl.find('{').map(|i| decl[..i].trim_end().to_string());
            match end {
                Some(head) if !open => out.push(head),
                None if !open
                    && (decl.ends_with(';') || decl.ends_with(',') || decl.ends_with('}')) =>
                {
                    out.push(decl)
                }
                _ => pending = Some(decl),
            }
        }
        for c in line.chars() {
            match c {
                '{' => stack.push(if line.starts_with("pub trait") {
                    Block::Trait
                } else if line.starts_with("pub enum") {
                    Block::Enum
                } else {
                    Block::Other
                }),
                '}' => {
                    stack.pop();
                }
                _ => {}
            }
        }
    }
    out.into_iter()
        .map(|d| d.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// The signature of the crate: a version line, then per file its declarations.
fn signature(version: &str) -> String {
    let src = crate_dir().join("src");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    let mut s = format!("BACKEND_API_VERSION {version}\n");
    for f in files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        s.push_str(&format!("\n[{name}]\n"));
        for d in declarations(&std::fs::read_to_string(&f).unwrap()) {
            s.push_str(&d);
            s.push('\n');
        }
    }
    s
}

fn stored_path() -> PathBuf {
    crate_dir().join("api/signature.txt")
}

#[test]
fn public_api_changes_come_with_a_version_bump() {
    let version = format!(
        "{}.{}",
        BACKEND_API_VERSION.major, BACKEND_API_VERSION.minor
    );
    let current = signature(&version);
    let path = stored_path();
    if std::env::var_os("BACKPLANE_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &current).unwrap();
        return;
    }
    let stored = std::fs::read_to_string(&path).unwrap_or_default();
    if stored == current {
        return;
    }
    let stored_version = stored.lines().next().unwrap_or("").to_string();
    let hint = "BACKPLANE_BLESS=1 cargo test -p backplane-backend-api --test api_signature";
    if stored_version == format!("BACKEND_API_VERSION {version}") {
        panic!(
            "the backend API's public surface changed but BACKEND_API_VERSION is still \
             {version}: bump it (major for an incompatible change, minor for an addition), \
             then rewrite {} with `{hint}`.\n{}",
            path.display(),
            diff(&stored, &current)
        );
    }
    panic!(
        "BACKEND_API_VERSION is {version}; {} was written for '{stored_version}': rewrite it \
         with `{hint}`.\n{}",
        path.display(),
        diff(&stored, &current)
    );
}

/// The lines only in one of the two texts.
fn diff(old: &str, new: &str) -> String {
    let gone: Vec<&str> = old
        .lines()
        .filter(|l| !new.lines().any(|n| n == *l))
        .collect();
    let added: Vec<&str> = new
        .lines()
        .filter(|l| !old.lines().any(|o| o == *l))
        .collect();
    let mut s = String::new();
    for l in gone {
        s.push_str(&format!("- {l}\n"));
    }
    for l in added {
        s.push_str(&format!("+ {l}\n"));
    }
    s
}

#[test]
fn the_extractor_sees_traits_methods_fields_and_variants() {
    let src = r#"
/// doc
pub trait Thing: Send {
    /// a method
    fn run(
        &self,
        x: u32,
    ) -> Result<(), String>;
    fn with_default(&self) {
        let inner = 1;
    }
}
pub enum Kind {
    /// A
    A,
    B(String),
}
pub struct S {
    pub field: u32,
    hidden: u8,
}
fn private() {}
#[cfg(test)]
mod tests {
    pub fn not_api() {}
}
pub const AFTER_TESTS: u32 = 1;
"#;
    assert_eq!(
        declarations(src),
        [
            "pub trait Thing: Send",
            "fn run( &self, x: u32, ) -> Result<(), String>;",
            "fn with_default(&self)",
            "pub enum Kind",
            "A,",
            "B(String),",
            "pub struct S",
            "pub field: u32,",
            "pub const AFTER_TESTS: u32 = 1;",
        ]
    );
}
