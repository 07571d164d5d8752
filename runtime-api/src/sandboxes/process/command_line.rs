//! The command line a `process` sandbox runs: its arguments with the agent-server's port
//! rewritten to its own, its program found on this machine, and its working directory
//! kept inside its own directory.

use std::path::{Component, Path, PathBuf};

use sandgate_store::SandboxSpec;

/// The command line of `spec` with `from` (the port commands name) rewritten to `to`.
/// Without a command, the image is the program.
pub(super) fn arguments(spec: &SandboxSpec, from: u16, to: u16) -> Vec<String> {
    let from = from.to_string();
    let to = to.to_string();
    let command = if spec.command.is_empty() {
        std::slice::from_ref(&spec.image)
    } else {
        spec.command.as_slice()
    };
    command
        .iter()
        .map(|argument| {
            if *argument == from {
                return to.clone();
            }
            for separator in ['=', ':'] {
                if let Some(head) = argument.strip_suffix(from.as_str())
                    && head.ends_with(separator)
                {
                    return format!("{head}{to}");
                }
            }
            argument.clone()
        })
        .collect()
}

/// The program to run for `program`: an absolute path that exists on this machine is
/// itself; one that does not (an image's `/usr/local/bin/agent-server`) is its file name,
/// looked up on `path` (the sandbox's `PATH`) when found there.
pub(super) fn resolve(program: &str, path: &str) -> PathBuf {
    let named = Path::new(program);
    if !named.is_absolute() || named.exists() {
        return named.to_path_buf();
    }
    named
        .file_name()
        .and_then(|name| {
            std::env::split_paths(path)
                .map(|dir| dir.join(name))
                .find(|candidate| candidate.is_file())
        })
        .unwrap_or_else(|| named.to_path_buf())
}

/// `path` as a relative path with only its plain components: `/workspace/../x` is
/// `workspace/x`, so that a sandbox's working directory stays inside its own.
pub(super) fn relative(path: &str) -> PathBuf {
    Path::new(path)
        .components()
        .filter_map(|component| match component {
            Component::Normal(part) => Some(part),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_port_is_rewritten_wherever_the_command_names_it() {
        let mut spec = SandboxSpec {
            image: "/opt/agent-server".into(),
            ..SandboxSpec::default()
        };
        spec.command = vec![
            "agent-server".into(),
            "--port".into(),
            "8000".into(),
            "--bind=8000".into(),
            "0.0.0.0:8000".into(),
            "18000".into(),
            "--workers=80001".into(),
        ];
        assert_eq!(
            arguments(&spec, 8000, 41234),
            [
                "agent-server",
                "--port",
                "41234",
                "--bind=41234",
                "0.0.0.0:41234",
                "18000",
                "--workers=80001"
            ]
        );
        spec.command.clear();
        assert_eq!(arguments(&spec, 8000, 1), ["/opt/agent-server"]);
    }

    #[test]
    fn an_image_s_program_runs_from_the_path_when_this_machine_lacks_it() {
        let dir = tempfile::tempdir().expect("dir");
        let python = dir.path().join("python");
        std::fs::write(&python, "").expect("write");
        let path = std::env::join_paths([Path::new("/nonexistent"), dir.path()])
            .expect("path")
            .into_string()
            .expect("utf-8");
        assert_eq!(resolve("/agent-server/.venv/bin/python", &path), python);
        assert_eq!(
            resolve("/bin/sh", &path),
            Path::new("/bin/sh"),
            "exists here"
        );
        assert_eq!(
            resolve("python", &path),
            Path::new("python"),
            "Command looks it up"
        );
        assert_eq!(
            resolve("/opt/missing-everywhere", &path),
            Path::new("/opt/missing-everywhere"),
            "the spawn says it is missing"
        );
    }

    #[test]
    fn a_working_directory_stays_inside_the_sandbox() {
        assert_eq!(
            relative("/workspace/project"),
            Path::new("workspace/project")
        );
        assert_eq!(relative("../../etc/./x"), Path::new("etc/x"));
        assert_eq!(relative(""), Path::new(""));
    }
}
