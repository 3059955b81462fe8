//! docs/ARCHITECTURE.md names every source file of the crate, and every source file it names
//! exists: a module added, moved or renamed without the page following fails here.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn architecture() -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/ARCHITECTURE.md");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Every `.rs` file under `dir`, relative to `root`, with `/` separators.
fn sources(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            sources(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root).expect("under src");
            out.insert(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

#[test]
fn every_source_file_is_named_in_architecture_md() {
    let doc = architecture();
    let mut files = BTreeSet::new();
    sources(&src(), &src(), &mut files);
    assert!(files.len() > 50, "found only {} source files", files.len());
    let missing: Vec<&String> = files
        .iter()
        .filter(|f| !doc.contains(&format!("`{f}`")) && !doc.contains(&format!("{f}:")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md does not name these source files (add each to its module's row): {missing:?}"
    );
}

#[test]
fn every_source_file_architecture_md_names_exists() {
    let doc = architecture();
    let tops: BTreeSet<String> = std::fs::read_dir(src())
        .expect("read src")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let named: BTreeSet<&str> = doc
        .split('`')
        .skip(1)
        .step_by(2)
        .flat_map(|code| code.split([' ', ':', '(', ')', ',']))
        .filter(|t| t.ends_with(".rs") && t.split('/').next().is_some_and(|d| tops.contains(d)))
        .collect();
    assert!(
        named.len() > 50,
        "the page names only {} files",
        named.len()
    );
    let gone: Vec<&&str> = named.iter().filter(|f| !src().join(f).is_file()).collect();
    assert!(
        gone.is_empty(),
        "docs/ARCHITECTURE.md names source files that do not exist: {gone:?}"
    );
}
