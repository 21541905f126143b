//! The outside programs tests run, as `scripts/programs` lists them
//! (each with the Debian package or cargo crate it comes from).
//! `scripts/test` installs exactly that list and runs the tests with only
//! those programs on PATH; a test finds a program here, so one that is
//! not listed fails with a message that says so on every machine.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The list itself, as committed.
const LIST: &str = include_str!("../../../scripts/programs");

/// Set (to `1`) by `scripts/test`: every test that needs an outside
/// program must run it, and none may skip for want of one.
pub const REQUIRE_PROGRAMS: &str = "SLUICE_REQUIRE_PROGRAMS";

/// One line of the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// A name looked up on PATH, or an absolute path (which may hold a
    /// `*`).
    pub program: String,
    /// Where it comes from: `deb:PKG[,PKG...]`, `cargo:CRATE`,
    /// `toolchain`, or for a Python package (listed as `python:MODULE`)
    /// `pip:REQUIREMENT`, installed in the test venv ([`python_with`]).
    pub from: String,
}

/// Every program on the list.
pub fn listed() -> &'static [Listed] {
    static LISTED: OnceLock<Vec<Listed>> = OnceLock::new();
    LISTED.get_or_init(|| parse(LIST))
}

fn parse(list: &str) -> Vec<Listed> {
    list.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut words = l.split_whitespace();
            let program = words.next().unwrap_or_default().to_owned();
            let from = words
                .next()
                .unwrap_or_else(|| panic!("scripts/programs: {program} says not where it is from"))
                .to_owned();
            Listed { program, from }
        })
        .collect()
}

/// Whether `scripts/test` runs these tests (see [`REQUIRE_PROGRAMS`]).
pub fn required() -> bool {
    std::env::var_os(REQUIRE_PROGRAMS).is_some_and(|v| v == "1")
}

/// The list's entry for `name`, or a test failure saying to add it.
fn entry(name: &str) -> &'static Listed {
    listed()
        .iter()
        .find(|l| l.program == name)
        .unwrap_or_else(|| {
            panic!(
                "`{name}` is not in scripts/programs, the list of outside programs tests may \
                 run: add it there with the Debian package it comes from"
            )
        })
}

/// Where the listed program `name` is: looked up on PATH, or for a
/// listed absolute path (possibly with a `*`) the first match. `None`
/// if it is not installed. Fails the test if `name` is not listed.
pub fn find(name: &str) -> Option<PathBuf> {
    let entry = entry(name);
    if entry.program.starts_with('/') {
        return find_absolute(&entry.program);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

/// Where the listed program `name` is, or a test failure that names its
/// package and says that scripts/test installs it.
pub fn program(name: &str) -> PathBuf {
    find(name).unwrap_or_else(|| {
        panic!(
            "`{name}` ({}) is not installed or not on PATH: scripts/test installs every \
             program of scripts/programs",
            entry(name).from
        )
    })
}

/// Where the listed program `name` is; `None` after saying why the test
/// is skipped when it is not installed, which fails the test instead
/// under `scripts/test` (see [`REQUIRE_PROGRAMS`]).
pub fn program_or_skip(name: &str) -> Option<PathBuf> {
    if required() {
        return Some(program(name));
    }
    let found = find(name);
    if found.is_none() {
        eprintln!(
            "skipped: `{name}` ({}) is not installed; scripts/test installs it",
            entry(name).from
        );
    }
    found
}

/// A file no one may open for writing until this is dropped (see
/// [`make_unwritable`]).
#[derive(Debug)]
pub struct Unwritable {
    path: PathBuf,
    chattr: Option<PathBuf>,
}

impl Drop for Unwritable {
    fn drop(&mut self) {
        if let Some(chattr) = &self.chattr {
            let _ = std::process::Command::new(chattr)
                .arg("-i")
                .arg(&self.path)
                .status();
        }
    }
}

/// Makes `path` impossible to open for writing: mode 0444, and for root,
/// whom modes do not stop, the immutable attribute (`chattr +i`, undone
/// when the guard is dropped). `None` after saying why the test is
/// skipped when that cannot be done here (under `scripts/test`, a test
/// failure).
pub fn make_unwritable(path: &Path) -> Option<Unwritable> {
    use std::os::unix::fs::PermissionsExt;
    let writable = || std::fs::OpenOptions::new().write(true).open(path).is_ok();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o444))
        .unwrap_or_else(|e| panic!("cannot make {} read-only: {e}", path.display()));
    if !writable() {
        return Some(Unwritable {
            path: path.to_owned(),
            chattr: None,
        });
    }
    let chattr = program_or_skip("chattr")?;
    let status = std::process::Command::new(&chattr)
        .arg("+i")
        .arg(path)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", chattr.display()));
    let guard = Unwritable {
        path: path.to_owned(),
        chattr: Some(chattr),
    };
    if status.success() && !writable() {
        return Some(guard);
    }
    let why = format!(
        "`chattr +i {}` did not make it unwritable ({status}): the file system has no \
         immutable attribute, or this is not root",
        path.display()
    );
    assert!(!required(), "{why}");
    eprintln!("skipped: {why}");
    None
}

/// The environment variable `scripts/test` names the test venv with.
pub const PYTHON_VENV: &str = "SLUICE_PYTHON_VENV";

/// The Python interpreter of the test venv (`$SLUICE_PYTHON_VENV`, else
/// `target/pyenv` of the workspace), which `scripts/test` fills with the
/// `pip:` packages of `scripts/programs`, if it can import `module`
/// (listed there as `python:MODULE`). `None` after saying why the test
/// is skipped; under `scripts/test` a failure instead (see
/// [`REQUIRE_PROGRAMS`]).
pub fn python_with(module: &str) -> Option<PathBuf> {
    let listed = entry(&format!("python:{module}"));
    let venv = std::env::var_os(PYTHON_VENV).map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/pyenv"),
        PathBuf::from,
    );
    let python = venv.join("bin/python3");
    let imports = std::process::Command::new(&python)
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if imports {
        return Some(python);
    }
    let why = format!(
        "{} cannot import {module} ({}): scripts/test makes that venv and installs it",
        python.display(),
        listed.from
    );
    assert!(!required(), "{why}");
    eprintln!("skipped: {why}");
    None
}

fn find_absolute(pattern: &str) -> Option<PathBuf> {
    let Some((prefix, suffix)) = pattern.split_once('*') else {
        let p = PathBuf::from(pattern);
        return is_executable(&p).then_some(p);
    };
    // One `*`, standing for one directory name.
    let (parent, start) = prefix.rsplit_once('/')?;
    let mut matches: Vec<PathBuf> = std::fs::read_dir(if parent.is_empty() { "/" } else { parent })
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(start))
        .map(|e| PathBuf::from(format!("{}{suffix}", e.path().display())))
        .filter(|p| is_executable(p))
        .collect();
    matches.sort();
    matches.pop()
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_names_where_its_program_comes_from() {
        let all = listed();
        assert!(all.iter().any(|l| l.program == "qemu-img"));
        for l in all {
            let known = l.from == "toolchain"
                || l.from.strip_prefix("cargo:").is_some_and(|c| !c.is_empty())
                || l.from
                    .strip_prefix("deb:")
                    .is_some_and(|p| p.split(',').all(|p| !p.is_empty()))
                || (l.from.strip_prefix("pip:").is_some_and(|r| !r.is_empty())
                    && l.program.starts_with("python:"));
            assert!(known, "scripts/programs: {} from {:?}", l.program, l.from);
        }
        let mut names: Vec<&str> = all.iter().map(|l| l.program.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len(), "a program is listed twice");
    }

    #[test]
    #[should_panic(expected = "is not in scripts/programs")]
    fn an_unlisted_program_fails_the_test_that_asks_for_it() {
        let _ = find("yes");
    }

    /// Under scripts/test the tests see only the listed programs: one
    /// that every Debian machine has but the list does not name is not
    /// on PATH, and every listed one is.
    #[test]
    fn under_scripts_test_only_listed_programs_are_on_path() {
        if !required() {
            eprintln!("skipped: only scripts/test restricts PATH to the listed programs");
            return;
        }
        let path = std::env::var_os("PATH").expect("PATH is set");
        let on_path = |name: &str| {
            std::env::split_paths(&path)
                .map(|d| d.join(name))
                .any(|p| is_executable(&p))
        };
        for unlisted in ["yes", "tac", "env", "perl"] {
            assert!(
                !on_path(unlisted),
                "`{unlisted}` is on PATH although scripts/programs does not list it"
            );
        }
        for l in listed().iter().filter(|l| !l.from.starts_with("pip:")) {
            assert!(
                find(&l.program).is_some(),
                "`{}` ({}) is listed but not found",
                l.program,
                l.from
            );
        }
    }
}
