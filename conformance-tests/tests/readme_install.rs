//! The README's Install lines are all a new project needs: a project made of nothing
//! but its `[dependencies]` block (the path pointed at this checkout) and its library
//! example as `main.rs` builds, and the example runs to its end.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_owned()
}

/// The body of the first fenced block of `lang` after the heading `heading`.
fn block_after(readme: &str, heading: &str, lang: &str) -> String {
    let section = readme
        .split_once(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("README has no {heading:?}"))
        .1;
    let start = section
        .split_once(&format!("```{lang}\n"))
        .unwrap_or_else(|| panic!("no ```{lang} block after {heading:?}"))
        .1;
    start
        .split_once("```")
        .expect("the block ends")
        .0
        .to_owned()
}

#[test]
fn a_new_project_with_the_install_lines_builds_and_runs_the_example() {
    let root = root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let dependencies = block_after(&readme, "## Install", "toml");
    let example = block_after(&readme, "## Example", "rust");
    assert!(
        dependencies.contains("path = \"../distributed-locks/distributed-locks\""),
        "the Install block should depend on the checkout by path: {dependencies}"
    );
    let facade = root.join("distributed-locks");
    let dependencies = dependencies.replace(
        "../distributed-locks/distributed-locks",
        &facade.display().to_string(),
    );

    let project = tempfile::tempdir().expect("a temporary directory");
    let manifest = format!(
        "[package]\nname = \"readme-example\"\nversion = \"0.1.0\"\nedition = \"2021\"\npublish = false\n\n\
         # Not part of any workspace above it.\n[workspace]\n\n{dependencies}"
    );
    std::fs::write(project.path().join("Cargo.toml"), manifest).unwrap();
    std::fs::create_dir(project.path().join("src")).unwrap();
    std::fs::write(project.path().join("src/main.rs"), example).unwrap();
    // The workspace's lock file, so the project builds offline with the versions the
    // workspace was tested with; cargo drops what the project does not use.
    std::fs::copy(root.join("Cargo.lock"), project.path().join("Cargo.lock")).unwrap();

    // A target directory of its own beside the workspace's (which the running
    // `cargo test` holds), kept between runs so only the first one compiles it all.
    let target = root.join("target").join("readme-install");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(["run", "--quiet", "--offline"])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(project.path())
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "the README example did not build and run from the Install lines:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
