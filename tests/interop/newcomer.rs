//! What a new user trips over (issue 34): a second server on files
//! another server holds is refused naming the file and the process, and
//! the first keeps serving.

use crate::harness::{sluice, tempdir, CmdOutput, ServerBuilder};

/// The `sluice: error:` line of a failed command.
fn error_line(out: &CmdOutput) -> String {
    let stderr = out.stderr();
    stderr
        .lines()
        .find(|l| l.starts_with("sluice: error:"))
        .unwrap_or_else(|| panic!("no error line: {}", out.describe()))
        .to_owned()
}

#[test]
fn a_second_server_on_the_same_image_is_refused_and_the_first_keeps_serving() {
    let dir = tempdir();
    let image = dir.path().join("d.img");
    let first = ServerBuilder::new()
        .file_export("d", &image, "size=1M")
        .start();
    for opts in ["", "ro"] {
        let mut spec = format!("d=file:{}", image.display());
        if !opts.is_empty() {
            spec.push_str(&format!(",{opts}"));
        }
        let out = sluice()
            .args(["serve", "--listen", "127.0.0.1:0", "--export", &spec])
            .output();
        out.assert_code(1);
        let line = error_line(&out);
        assert!(line.contains(&image.display().to_string()), "{line}");
        assert!(
            line.contains(&format!("process {} (sluice)", first.pid())),
            "{line}"
        );
    }
    // The first still serves its export.
    crate::harness::tool("nbdinfo")
        .arg("--size")
        .arg(first.uri("d"))
        .run();
}

#[test]
fn read_only_exports_of_one_image_share_it() {
    let dir = tempdir();
    let image = dir.path().join("d.img");
    std::fs::write(&image, vec![0u8; 1 << 20]).unwrap();
    let _a = ServerBuilder::new().file_export("d", &image, "ro").start();
    let _b = ServerBuilder::new().file_export("d", &image, "ro").start();
}

#[test]
fn a_second_server_on_the_same_object_store_is_refused() {
    let dir = tempdir();
    let objects = dir.path().join("objects");
    let meta = dir.path().join("meta");
    let first = ServerBuilder::new()
        .export("d", "mem:1M")
        .objects(&objects)
        .arg("--meta")
        .arg(meta.display().to_string())
        .start();
    let holder = format!("process {} (sluice)", first.pid());
    for (objects_dir, meta_dir, named) in [
        (&objects, dir.path().join("other-meta"), &objects),
        (&dir.path().join("other-objects"), meta.clone(), &meta),
    ] {
        let out = sluice()
            .args(["serve", "--listen", "127.0.0.1:0", "--export", "d=mem:1M"])
            .args(["--object-listen", "127.0.0.1:0", "--objects"])
            .arg(objects_dir)
            .arg("--meta")
            .arg(&meta_dir)
            .output();
        out.assert_code(1);
        let line = error_line(&out);
        assert!(line.contains(&named.display().to_string()), "{line}");
        assert!(line.contains(&holder), "{line}");
    }
    // The first still serves objects and metadata.
    sluice()
        .args(["obj", "--server", &first.obj_uri(), "ls"])
        .run();
    sluice()
        .args(["meta", "--meta", &first.obj_uri(), "ls-servers"])
        .run();
}

