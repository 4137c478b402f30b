// Loading the library at run time, in a process of its own: the first load decides.
use std::path::{Path, PathBuf};

use minfer::Code;

fn build_dir() -> PathBuf {
    match std::env::var_os("MINFER_BUILD_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../build"),
    }
}

#[cfg(not(feature = "link"))]
#[test]
fn load_reports_each_failure_and_then_succeeds() {
    let err = minfer::load("/nonexistent/libminfer.so").unwrap_err();
    assert_eq!(err.code(), Code::Io);
    assert!(err.message().starts_with("cannot load /nonexistent/libminfer.so: "), "{err}");
    assert!(err.message().contains("No such file"), "{err}");

    // A shared library that is not minfer: every function of the header is looked up.
    let err = minfer::load("libm.so.6").unwrap_err();
    assert_eq!(err.code(), Code::Unsupported);
    assert!(err.message().contains("lacks minfer_version"), "{err}");

    // Failures leave nothing behind: the real library still loads, once.
    let lib = build_dir().join("libminfer.so");
    minfer::load(&lib).unwrap();
    minfer::load(&lib).unwrap();
    assert_eq!(minfer::version().unwrap(), minfer::sys::MINFER_VERSION_STRING);
    let err = minfer::load("libm.so.6").unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("already loaded from"), "{err}");
    assert_eq!(minfer::default_library(), "libminfer.so.0");
}

#[cfg(feature = "link")]
#[test]
fn load_is_refused_when_linked() {
    let _ = build_dir();
    let err = minfer::load("/any/libminfer.so").unwrap_err();
    assert_eq!(err.code(), Code::Unsupported);
    assert!(err.message().contains("`link` feature"), "{err}");
    assert_eq!(minfer::version().unwrap(), minfer::sys::MINFER_VERSION_STRING);
}
