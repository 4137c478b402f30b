// Errors: the status code of the failing call and the message minfer_last_error() gave for it.
use std::fmt;

use crate::sys;

pub type Result<T, E = Error> = std::result::Result<T, E>;

macro_rules! codes {
    ($($variant:ident => $status:ident,)*) => {
        /// The status of a failed call (MINFER_OK is never an error). `Unknown` holds a status this
        /// crate does not know, from a newer library.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Code {
            $($variant,)*
            Unknown(sys::minfer_status),
        }

        impl Code {
            pub fn from_raw(status: sys::minfer_status) -> Code {
                match status {
                    $(sys::$status => Code::$variant,)*
                    other => Code::Unknown(other),
                }
            }

            /// The status as the header numbers it.
            pub fn raw(self) -> sys::minfer_status {
                match self {
                    $(Code::$variant => sys::$status,)*
                    Code::Unknown(status) => status,
                }
            }

            /// The header's name, as minfer_status_string gives it: "MINFER_ERR_BAD_MODEL".
            pub fn name(self) -> &'static str {
                match self {
                    $(Code::$variant => stringify!($status),)*
                    Code::Unknown(_) => "MINFER_ERR_UNKNOWN_STATUS",
                }
            }
        }
    };
}

codes! {
    InvalidArgument => MINFER_ERR_INVALID_ARGUMENT,
    Io => MINFER_ERR_IO,
    BadModel => MINFER_ERR_BAD_MODEL,
    Unsupported => MINFER_ERR_UNSUPPORTED,
    OutOfMemory => MINFER_ERR_OUT_OF_MEMORY,
    Device => MINFER_ERR_DEVICE,
    UnknownOption => MINFER_ERR_UNKNOWN_OPTION,
    OptionValue => MINFER_ERR_OPTION_VALUE,
    OptionLocked => MINFER_ERR_OPTION_LOCKED,
    ContextFull => MINFER_ERR_CONTEXT_FULL,
    Busy => MINFER_ERR_BUSY,
    NotFound => MINFER_ERR_NOT_FOUND,
    WrongType => MINFER_ERR_WRONG_TYPE,
    BufferTooSmall => MINFER_ERR_BUFFER_TOO_SMALL,
    Cancelled => MINFER_ERR_CANCELLED,
    Internal => MINFER_ERR_INTERNAL,
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A failed call: its status and the library's message (which key, which tensor, which offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    code: Code,
    message: String,
}

impl Error {
    pub fn new(code: Code, message: impl Into<String>) -> Error {
        Error { code, message: message.into() }
    }

    pub fn code(&self) -> Code {
        self.code
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for Error {}

/// Ok for MINFER_OK; otherwise the error with the calling thread's last message, read right away.
pub(crate) fn check(api: &sys::Api, status: sys::minfer_status) -> Result<()> {
    if status == sys::MINFER_OK {
        return Ok(());
    }
    let message = unsafe { crate::text((api.minfer_last_error)()) };
    Err(Error::new(Code::from_raw(status), message))
}
