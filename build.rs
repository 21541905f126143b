//! Records the git commit and the build profile for `sluice --version`
//! and the `sluice_build_info` metric. Outside a git checkout (a source
//! tarball) the commit is "unknown" unless SLUICE_GIT_COMMIT is set.

use std::path::Path;
use std::process::Command;

/// `git ARGS` in this directory, trimmed; `None` without git or a repository.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SLUICE_GIT_COMMIT");
    let commit = std::env::var("SLUICE_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_owned());
    // Rebuild when HEAD moves: HEAD itself, the branch it names, and the
    // packed refs (worktrees included; `--git-path` resolves them).
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name]) {
            if Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    let profile = std::env::var("PROFILE").unwrap_or_else(|_| "unknown".to_owned());
    println!("cargo:rustc-env=SLUICE_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=SLUICE_BUILD_PROFILE={profile}");
}
