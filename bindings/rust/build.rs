// With the `link` feature, tells rustc where libminfer is: the -L directories of `pkg-config --libs minfer`
// (an installed minfer.pc, or a build directory's meson-uninstalled/ on PKG_CONFIG_PATH). Without it the
// library is loaded at run time and nothing is linked.
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_LINK").is_none() {
        return;
    }
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    match Command::new("pkg-config").args(["--libs-only-L", "minfer"]).output() {
        Ok(out) if out.status.success() => {
            for flag in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                if let Some(dir) = flag.strip_prefix("-L") {
                    println!("cargo:rustc-link-search=native={dir}");
                }
            }
        }
        _ => println!("cargo:warning=pkg-config does not know minfer; linking -lminfer from the default paths"),
    }
}
