//! The documents a reader follows (README.md, BENCHMARKS.md, RELIABILITY.md, docs/,
//! k8s/README.md) link only to files of this repository that exist, and to headings those
//! files have: a chapter renamed or a file moved breaks the test, not the reader's click.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

/// The repository's root: the root crate's manifest directory.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The documents checked, relative to the root.
fn documents() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = [
        "README.md",
        "BENCHMARKS.md",
        "RELIABILITY.md",
        "k8s/README.md",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    let mut chapters: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ is readable")
        .map(|entry| entry.expect("a docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .map(|path| {
            path.strip_prefix(root())
                .expect("under the root")
                .to_owned()
        })
        .collect();
    chapters.sort();
    files.extend(chapters);
    files
}

/// The lines of a Markdown text outside fenced code blocks, with inline code spans
/// blanked, so that a `#` comment in a YAML example is no heading and `` `[a](b)` `` no
/// link.
fn prose_lines(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut prose = String::with_capacity(line.len());
        let mut in_code = false;
        for ch in line.chars() {
            if ch == '`' {
                in_code = !in_code;
                prose.push(' ');
            } else {
                prose.push(if in_code { ' ' } else { ch });
            }
        }
        lines.push(prose);
    }
    lines
}

/// The targets of a text's inline links, `[text](target)`.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose_lines(text) {
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            targets.push(after[..end].trim().to_owned());
            rest = &after[end..];
        }
    }
    targets
}

/// A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to
/// hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|ch| match ch {
            ' ' => Some('-'),
            ch if ch.is_alphanumeric() || ch == '-' || ch == '_' => Some(ch),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown text's headings (a repeated heading gets `-1`, `-2`, …).
fn anchors(text: &str) -> HashSet<String> {
    let mut anchors = HashSet::new();
    // The original text, for headings' code spans: their words are part of the anchor.
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let heading = line.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let base = slug(heading);
        let mut anchor = base.clone();
        let mut n = 0;
        while anchors.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        anchors.insert(anchor);
    }
    anchors
}

/// `path` with `.` and `..` resolved lexically, or `None` when it climbs above its start.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(part) => out.push(part),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// What is wrong with one link of `document` (relative to the root), if anything.
fn link_problem(document: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return Some(format!(
            "links outside the repository ({target}): bring what the reader needs into docs/"
        ));
    }
    let (file, anchor) = match target.split_once('#') {
        Some((file, anchor)) => (file, Some(anchor)),
        None => (target, None),
    };
    let linked = if file.is_empty() {
        document.to_owned()
    } else {
        let joined = document.parent().unwrap_or(Path::new("")).join(file);
        match normalize(&joined) {
            Some(path) => path,
            None => return Some(format!("links outside the repository ({target})")),
        }
    };
    let full = root().join(&linked);
    if !full.exists() {
        return Some(format!(
            "links to {}, which does not exist",
            linked.display()
        ));
    }
    if let Some(anchor) = anchor {
        if full.is_dir() || full.extension().is_none_or(|ext| ext != "md") {
            return Some(format!(
                "has an anchor on a file that is not Markdown ({target})"
            ));
        }
        let text = std::fs::read_to_string(&full).expect("a linked document is readable");
        if !anchors(&text).contains(anchor) {
            return Some(format!(
                "links to #{anchor} in {}, which has no such heading",
                linked.display()
            ));
        }
    }
    None
}

#[test]
fn every_link_of_the_documents_reaches_a_file_and_heading_of_the_repository() {
    let mut problems = Vec::new();
    let mut links = 0;
    for document in documents() {
        let text = std::fs::read_to_string(root().join(&document)).expect("a document");
        for target in link_targets(&text) {
            links += 1;
            if let Some(problem) = link_problem(&document, &target) {
                problems.push(format!("{}: {problem}", document.display()));
            }
        }
    }
    assert!(
        links > 50,
        "only {links} links found: is the extraction broken?"
    );
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_checker_finds_what_it_is_for() {
    let readme = Path::new("README.md");
    let chapter = Path::new("docs/testing.md");
    assert_eq!(
        link_problem(readme, "docs/testing.md#the-real-clients"),
        None
    );
    assert_eq!(link_problem(chapter, "../RELIABILITY.md"), None);
    assert!(link_problem(readme, "docs/no-such-chapter.md").is_some());
    assert!(link_problem(readme, "docs/testing.md#no-such-heading").is_some());
    assert!(link_problem(readme, "../shared/design.md").is_some());
    assert!(link_problem(readme, "https://example.com/").is_some());
    assert_eq!(
        slug(" 11. Diagnostics: the support bundle"),
        "11-diagnostics-the-support-bundle"
    );
    assert_eq!(
        slug(" A hostile sandbox on the `process` driver"),
        "a-hostile-sandbox-on-the-process-driver"
    );
    let text = "# Title\n```yaml\n# not a heading\n```\nSee `[x](nowhere)` and [y](docs/a.md).\n## Title\n";
    assert_eq!(link_targets(text), vec!["docs/a.md".to_owned()]);
    let found = anchors(text);
    assert!(found.contains("title") && found.contains("title-1"));
    assert!(!found.contains("not-a-heading"));
}
