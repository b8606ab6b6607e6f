//! `backplane backends`: what is registered.

use crate::CliError;

/// Print every registered backend with its version, API version and capabilities.
pub fn list() -> Result<(), CliError> {
    let runtime = backplane::RuntimeBuilder::new().build()?;
    println!(
        "{:<10} {:<9} {:<5} {:<7} capabilities",
        "backend", "version", "api", "kind"
    );
    for id in runtime.registry().ids() {
        let backend = runtime
            .backend(&id)
            .map_err(|e| CliError::failed(e.to_string()))?;
        let caps = backend
            .capabilities()
            .0
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ");
        println!(
            "{:<10} {:<9} {:<5} {:<7} {}",
            id.as_str(),
            backend.version(),
            backend.api_version().to_string(),
            "static",
            if caps.is_empty() {
                "-".to_string()
            } else {
                caps
            }
        );
    }
    Ok(())
}
