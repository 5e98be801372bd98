//! The documentation against the code: every key the configuration's serde structs accept is in
//! docs/configuration.md, and every relative link of README.md and docs/*.md leads to a file.

use std::path::{Path, PathBuf};

use crate::install::repository;

/// The fields of every `struct Raw…` in `file`: the keys daemon.toml may hold.
fn raw_struct_fields(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).expect("read the config source");
    let mut fields = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("pub(super) struct Raw") && trimmed.ends_with('{') {
            inside = true;
            continue;
        }
        if inside && trimmed == "}" {
            inside = false;
            continue;
        }
        if let Some(field) = trimmed.strip_prefix("pub ").filter(|_| inside) {
            if let Some((name, _)) = field.split_once(':') {
                fields.push(name.trim().to_string());
            }
        }
    }
    fields
}

#[test]
fn every_config_key_is_in_the_configuration_reference() {
    let root = repository();
    let reference =
        std::fs::read_to_string(root.join("docs/configuration.md")).expect("docs/configuration.md");
    let mut keys = raw_struct_fields(&root.join("src/config/raw.rs"));
    keys.extend(raw_struct_fields(&root.join("src/config/search.rs")));
    // The tables themselves are keys of `RawConfig`.
    assert!(keys.len() > 50, "the parse of raw.rs found only {keys:?}");
    for table in ["daemon", "servers", "http", "search"] {
        assert!(
            keys.contains(&table.to_string()),
            "{table} not among {keys:?}"
        );
    }
    let missing: Vec<&String> = keys
        .iter()
        .filter(|key| {
            !reference.contains(&format!("`{key}`")) && !reference.contains(&format!("[{key}"))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "keys missing from docs/configuration.md: {missing:?}"
    );
}

/// The relative link targets of a Markdown file, outside code blocks and spans.
fn relative_links(text: &str) -> Vec<String> {
    let mut links = Vec::new();
    let mut in_code_block = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code_block = !in_code_block;
            continue;
        }
        if in_code_block {
            continue;
        }
        let mut rest = line;
        while let Some(start) = rest.find("](") {
            let after = &rest[start + 2..];
            let Some(end) = after.find(')') else { break };
            let target = &after[..end];
            let external = target.contains("://") || target.starts_with("mailto:");
            if !external && !target.starts_with('#') {
                links.push(target.split('#').next().unwrap_or(target).to_string());
            }
            rest = &after[end..];
        }
    }
    links
}

#[test]
fn relative_links_in_the_readme_and_docs_resolve() {
    let root = repository();
    let mut files: Vec<PathBuf> = vec![root.join("README.md")];
    let docs = std::fs::read_dir(root.join("docs")).expect("docs/");
    files.extend(
        docs.map(|entry| entry.expect("entry").path())
            .filter(|path| path.extension().is_some_and(|extension| extension == "md")),
    );
    assert!(files.len() >= 8, "{files:?}");
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read");
        for link in relative_links(&text) {
            checked += 1;
            let target = file.parent().expect("a directory").join(&link);
            if !target.exists() {
                broken.push(format!("{}: {link}", file.display()));
            }
        }
    }
    assert!(checked >= 20, "only {checked} links found");
    assert!(broken.is_empty(), "links that lead nowhere: {broken:#?}");
}
