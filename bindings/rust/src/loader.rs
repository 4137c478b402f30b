// Where the function table comes from: dlopen/dlsym by default, the linked library with the `link`
// feature. The table is filled once per process and never unloaded (handles may outlive any owner).
use std::sync::OnceLock;

use crate::error::{Code, Error, Result};
use crate::sys;

static API: OnceLock<Loaded> = OnceLock::new();

struct Loaded {
    api: sys::Api,
    #[cfg_attr(feature = "link", allow(dead_code))]
    from: String,
}

/// The file the library is opened from when nothing called [`load`]: the soname of the major version
/// these bindings were generated for ("libminfer.so.0"), found through the dynamic loader's search
/// (the executable's rpath, LD_LIBRARY_PATH, the system's library directories).
pub fn default_library() -> String {
    format!("libminfer.so.{}", sys::MINFER_VERSION_MAJOR)
}

/// Opens the library at `path` (dlopen) and resolves every function of the header. Call it before
/// anything else; once a library is loaded, loading the same path again is a no-op and another path is
/// refused (MINFER_ERR_INVALID_ARGUMENT). MINFER_ERR_IO when dlopen fails, MINFER_ERR_UNSUPPORTED when
/// the file lacks a function of the header or has another major version. With the `link` feature the
/// library is linked, and this returns MINFER_ERR_UNSUPPORTED.
pub fn load(path: impl AsRef<std::path::Path>) -> Result<()> {
    #[cfg(feature = "link")]
    {
        let _ = path;
        Err(Error::new(Code::Unsupported, "built with the `link` feature: libminfer is linked, not loaded"))
    }
    #[cfg(not(feature = "link"))]
    {
        let path = path.as_ref().to_string_lossy().into_owned();
        let loaded = dl::open(&path)?;
        if loaded.from == path {
            Ok(())
        } else {
            Err(Error::new(
                Code::InvalidArgument,
                format!("libminfer is already loaded from {}; a process loads it once", loaded.from),
            ))
        }
    }
}

/// The table, loading the default library first when nothing is loaded yet.
pub(crate) fn api() -> Result<&'static sys::Api> {
    if let Some(loaded) = API.get() {
        return Ok(&loaded.api);
    }
    #[cfg(feature = "link")]
    let loaded = API.get_or_init(|| Loaded { api: sys::Api::linked(), from: String::new() });
    #[cfg(not(feature = "link"))]
    let loaded = dl::open(&default_library())?;
    Ok(&loaded.api)
}

#[cfg(not(feature = "link"))]
mod dl {
    use std::ffi::CStr;
    use std::os::raw::{c_char, c_int, c_void};
    use std::sync::Mutex;

    use super::{Loaded, API};
    use crate::error::{Code, Error, Result};
    use crate::sys;

    const RTLD_NOW: c_int = 2;
    const RTLD_LOCAL: c_int = 0;

    #[link(name = "dl")]
    extern "C" {
        fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
        fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
        fn dlerror() -> *mut c_char;
        fn dlclose(handle: *mut c_void) -> c_int;
    }

    /// dlerror's message is per thread; this lock also keeps two first loads from racing.
    static LOCK: Mutex<()> = Mutex::new(());

    /// The loaded library: the one already there, or `path` opened now.
    pub(super) fn open(path: &str) -> Result<&'static Loaded> {
        let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(loaded) = API.get() {
            return Ok(loaded);
        }
        let c_path = crate::cstring(path)?;
        let handle = unsafe { dlopen(c_path.as_ptr(), RTLD_NOW | RTLD_LOCAL) };
        if handle.is_null() {
            let why = unsafe { dlerror() };
            let why =
                if why.is_null() { "dlopen failed".into() } else { unsafe { CStr::from_ptr(why) }.to_string_lossy() };
            return Err(Error::new(Code::Io, format!("cannot load {path}: {why}")));
        }
        let resolved = unsafe { sys::Api::resolve(|name| dlsym(handle, name.as_ptr().cast())) };
        let api = match resolved {
            Ok(api) => api,
            Err(name) => {
                unsafe { dlclose(handle) };
                return Err(Error::new(
                    Code::Unsupported,
                    format!("{path} lacks {name}: the library is older than the header of these bindings"),
                ));
            }
        };
        let number = unsafe { (api.minfer_version_number)() };
        if number / 10000 != sys::MINFER_VERSION_MAJOR {
            let version = unsafe { crate::text((api.minfer_version)()) };
            unsafe { dlclose(handle) };
            return Err(Error::new(
                Code::Unsupported,
                format!("{path} is minfer {version}; these bindings need major version {}", sys::MINFER_VERSION_MAJOR),
            ));
        }
        Ok(API.get_or_init(|| Loaded { api, from: path.to_owned() }))
    }
}
