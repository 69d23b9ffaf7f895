//! The workspace's manifests say what a crate user needs to know, and say it truly:
//! every publishable crate declares the lowest Rust it builds with (the highest
//! `rust-version` among what it depends on, with every feature on), and carries the
//! metadata crates.io and docs.rs show.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// `cargo metadata` of the workspace, every feature on.
fn metadata() -> Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--all-features"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON")
}

/// `1.89` and `1.89.0` alike, as three numbers.
fn version(text: &str) -> Vec<u64> {
    let mut parts: Vec<u64> = text.split('.').map(|n| n.parse().unwrap_or(0)).collect();
    parts.resize(3, 0);
    parts
}

fn publishable(package: &Value) -> bool {
    // `publish = false` is an empty list of registries.
    package["publish"].as_array().is_none_or(|r| !r.is_empty())
}

#[test]
fn every_crate_declares_its_true_msrv() {
    let meta = metadata();
    let packages: BTreeMap<&str, &Value> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p))
        .collect();
    let nodes: BTreeMap<&str, &Value> = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_str().unwrap(), n))
        .collect();
    let mut wrong = Vec::new();
    for member in meta["workspace_members"].as_array().unwrap() {
        let member = member.as_str().unwrap();
        // Everything it builds against: normal and build dependencies, transitively.
        let (mut seen, mut stack) = (BTreeSet::new(), vec![member]);
        let mut needed = (version("0"), "(nothing)".to_owned());
        while let Some(id) = stack.pop() {
            if !seen.insert(id) {
                continue;
            }
            let package = packages[id];
            if id != member {
                if let Some(rv) = package["rust_version"].as_str() {
                    if version(rv) > needed.0 {
                        needed = (
                            version(rv),
                            format!(
                                "{} {}",
                                package["name"].as_str().unwrap_or("?"),
                                package["version"].as_str().unwrap_or("?")
                            ),
                        );
                    }
                }
            }
            for dep in nodes[id]["deps"].as_array().unwrap() {
                let kinds = dep["dep_kinds"].as_array().unwrap();
                if kinds
                    .iter()
                    .any(|k| k["kind"].is_null() || k["kind"] == "build")
                {
                    stack.push(dep["pkg"].as_str().unwrap());
                }
            }
        }
        let package = packages[member];
        let declared = package["rust_version"].as_str().unwrap_or("none");
        if version(declared) != needed.0 {
            wrong.push(format!(
                "{} declares rust-version {declared}, but {} needs {}",
                package["name"].as_str().unwrap_or("?"),
                needed.1,
                needed
                    .0
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(".")
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn publishable_crates_carry_their_metadata() {
    let meta = metadata();
    let members: BTreeSet<&str> = meta["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    let mut missing = Vec::new();
    for package in meta["packages"].as_array().unwrap() {
        if !members.contains(package["id"].as_str().unwrap()) || !publishable(package) {
            continue;
        }
        let name = package["name"].as_str().unwrap();
        for field in [
            "description",
            "license",
            "readme",
            "documentation",
            "rust_version",
        ] {
            if package[field].as_str().is_none_or(str::is_empty) {
                missing.push(format!("{name}: {field}"));
            }
        }
        for field in ["keywords", "categories"] {
            if package[field].as_array().is_none_or(Vec::is_empty) {
                missing.push(format!("{name}: {field}"));
            }
        }
        let dir = std::path::Path::new(package["manifest_path"].as_str().unwrap())
            .parent()
            .unwrap();
        for file in ["README.md", "LICENSE-MIT", "LICENSE-APACHE"] {
            if !dir.join(file).is_file() {
                missing.push(format!("{name}: {file}"));
            }
        }
    }
    assert!(missing.is_empty(), "missing: {}", missing.join(", "));
}
