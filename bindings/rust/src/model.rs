// Model: an open GGUF model, immutable and shared by any number of threads and contexts.
use std::os::raw::c_char;
use std::path::Path;
use std::ptr::{self, NonNull};

use crate::context::{Context, Detokenizer};
use crate::error::{check, Result};
use crate::{cstring, loader, path_cstring, read_bytes, read_string, sys, text};

/// An open model. Closed on drop; contexts borrow it, so it outlives them.
pub struct Model {
    raw: NonNull<sys::minfer_model>,
    api: &'static sys::Api,
}

// The header: "A model is immutable after minfer_open and may be shared by any number of threads and
// contexts; setting a runtime option on a model is safe while other threads use it."
unsafe impl Send for Model {}
unsafe impl Sync for Model {}

/// The special tokens a vocabulary may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecialToken {
    Bos,
    Eos,
    /// End of turn (`<|im_end|>` for Qwen chat models).
    Eot,
    ImStart,
    ImEnd,
    Pad,
}

impl Model {
    /// Opens and validates a GGUF model with the process-wide option defaults.
    pub fn open(path: impl AsRef<Path>) -> Result<Model> {
        Model::open_with_options(path, &[])
    }

    /// Opens a model with `(key, value)` options applied on top of the defaults for this model only
    /// (load-time and runtime options alike); every pair is validated before anything is loaded.
    pub fn open_with_options(path: impl AsRef<Path>, options: &[(&str, &str)]) -> Result<Model> {
        let api = loader::api()?;
        let path = path_cstring(path.as_ref())?;
        let keys = options.iter().map(|o| cstring(o.0)).collect::<Result<Vec<_>>>()?;
        let values = options.iter().map(|o| cstring(o.1)).collect::<Result<Vec<_>>>()?;
        let keys: Vec<*const c_char> = keys.iter().map(|s| s.as_ptr()).collect();
        let values: Vec<*const c_char> = values.iter().map(|s| s.as_ptr()).collect();
        let mut raw = ptr::null_mut();
        check(api, unsafe {
            (api.minfer_open_with_options)(path.as_ptr(), keys.as_ptr(), values.as_ptr(), options.len(), &mut raw)
        })?;
        let raw = NonNull::new(raw).expect("minfer_open_with_options returned MINFER_OK and no model");
        Ok(Model { raw, api })
    }

    pub(crate) fn api(&self) -> &'static sys::Api {
        self.api
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::minfer_model {
        self.raw.as_ptr()
    }

    /// A new context (KV cache and sampler) of `ctx_len` tokens, the option read now.
    pub fn context(&self) -> Result<Context<'_>> {
        Context::new(self)
    }

    /// A streaming detokenizer: text only in whole UTF-8 characters.
    pub fn detokenizer(&self) -> Result<Detokenizer> {
        Detokenizer::new(self)
    }

    // ---- options ----------------------------------------------------------------------------------

    /// Sets a runtime option for this model (load-time ones give [`Code::OptionLocked`](crate::Code)).
    pub fn set_option(&self, key: &str, value: &str) -> Result<()> {
        let (key, value) = (cstring(key)?, cstring(value)?);
        check(self.api, unsafe { (self.api.minfer_set_option)(self.as_ptr(), key.as_ptr(), value.as_ptr()) })
    }

    /// The value of an option in force for this model, in canonical form ("true", "4096", "auto").
    pub fn option(&self, key: &str) -> Result<String> {
        let key = cstring(key)?;
        read_string(self.api, |buf, cap, len| unsafe {
            (self.api.minfer_get_option)(self.as_ptr(), key.as_ptr(), buf, cap, len)
        })
    }

    // ---- hyperparameters ----------------------------------------------------------------------------

    /// "qwen2", "qwen3".
    pub fn architecture(&self) -> String {
        unsafe { text((self.api.minfer_model_architecture)(self.as_ptr())) }
    }

    /// `general.name`, or "".
    pub fn name(&self) -> String {
        unsafe { text((self.api.minfer_model_name)(self.as_ptr())) }
    }

    /// The backend the model runs on: "cpu" or "cuda".
    pub fn device(&self) -> String {
        unsafe { text((self.api.minfer_model_device)(self.as_ptr())) }
    }

    pub fn n_params(&self) -> u64 {
        unsafe { (self.api.minfer_model_n_params)(self.as_ptr()) }
    }

    pub fn file_size(&self) -> u64 {
        unsafe { (self.api.minfer_model_file_size)(self.as_ptr()) }
    }

    pub fn n_vocab(&self) -> i32 {
        unsafe { (self.api.minfer_model_n_vocab)(self.as_ptr()) }
    }

    pub fn n_ctx_train(&self) -> i32 {
        unsafe { (self.api.minfer_model_n_ctx_train)(self.as_ptr()) }
    }

    pub fn n_embd(&self) -> i32 {
        unsafe { (self.api.minfer_model_n_embd)(self.as_ptr()) }
    }

    pub fn n_layer(&self) -> i32 {
        unsafe { (self.api.minfer_model_n_layer)(self.as_ptr()) }
    }

    // ---- metadata -----------------------------------------------------------------------------------

    /// The GGUF metadata keys in file order.
    pub fn meta_keys(&self) -> Vec<String> {
        let n = unsafe { (self.api.minfer_model_meta_count)(self.as_ptr()) };
        (0..n).map(|i| unsafe { text((self.api.minfer_model_meta_key)(self.as_ptr(), i)) }).collect()
    }

    /// An integer (or bool) value; [`Code::NotFound`](crate::Code) or [`Code::WrongType`](crate::Code)
    /// otherwise.
    pub fn meta_int(&self, key: &str) -> Result<i64> {
        let key = cstring(key)?;
        let mut v = 0;
        check(self.api, unsafe { (self.api.minfer_model_meta_int)(self.as_ptr(), key.as_ptr(), &mut v) })?;
        Ok(v)
    }

    /// A float32 or float64 value.
    pub fn meta_float(&self, key: &str) -> Result<f64> {
        let key = cstring(key)?;
        let mut v = 0.0;
        check(self.api, unsafe { (self.api.minfer_model_meta_float)(self.as_ptr(), key.as_ptr(), &mut v) })?;
        Ok(v)
    }

    /// A string value, or any scalar rendered as text.
    pub fn meta_string(&self, key: &str) -> Result<String> {
        let key = cstring(key)?;
        read_string(self.api, |buf, cap, len| unsafe {
            (self.api.minfer_model_meta_string)(self.as_ptr(), key.as_ptr(), buf, cap, len)
        })
    }

    /// `tokenizer.chat_template` (Jinja source, not evaluated).
    pub fn chat_template(&self) -> Result<String> {
        read_string(self.api, |buf, cap, len| unsafe {
            (self.api.minfer_model_chat_template)(self.as_ptr(), buf, cap, len)
        })
    }

    // ---- tokenizer ----------------------------------------------------------------------------------

    /// Text -> token ids. With `parse_special`, control tokens written in the text ("<|im_start|>")
    /// become their ids.
    pub fn tokenize(&self, text: &str, parse_special: bool) -> Result<Vec<i32>> {
        let mut tokens = vec![0i32; text.len() + 1];
        loop {
            let mut n = 0usize;
            let st = unsafe {
                (self.api.minfer_tokenize)(
                    self.as_ptr(),
                    text.as_ptr().cast(),
                    text.len(),
                    parse_special as i32,
                    tokens.as_mut_ptr(),
                    tokens.len(),
                    &mut n,
                )
            };
            if st == sys::MINFER_ERR_BUFFER_TOO_SMALL && n > tokens.len() {
                tokens.resize(n, 0);
                continue;
            }
            check(self.api, st)?;
            tokens.truncate(n);
            return Ok(tokens);
        }
    }

    /// The raw bytes of one token: possibly a piece of a UTF-8 character.
    pub fn token_to_piece(&self, token: i32) -> Result<Vec<u8>> {
        read_bytes(self.api, |buf, cap, len| unsafe {
            (self.api.minfer_token_to_piece)(self.as_ptr(), token, buf, cap, len)
        })
    }

    /// The text of a token sequence; invalid UTF-8 becomes U+FFFD.
    pub fn detokenize(&self, tokens: &[i32]) -> Result<String> {
        read_string(self.api, |buf, cap, len| unsafe {
            (self.api.minfer_detokenize)(self.as_ptr(), tokens.as_ptr(), tokens.len(), buf, cap, len)
        })
    }

    /// The id of a special token, or None when the vocabulary has none.
    pub fn special_token(&self, which: SpecialToken) -> Option<i32> {
        let which = match which {
            SpecialToken::Bos => sys::MINFER_TOKEN_BOS,
            SpecialToken::Eos => sys::MINFER_TOKEN_EOS,
            SpecialToken::Eot => sys::MINFER_TOKEN_EOT,
            SpecialToken::ImStart => sys::MINFER_TOKEN_IM_START,
            SpecialToken::ImEnd => sys::MINFER_TOKEN_IM_END,
            SpecialToken::Pad => sys::MINFER_TOKEN_PAD,
        };
        let id = unsafe { (self.api.minfer_model_special_token)(self.as_ptr(), which) };
        (id >= 0).then_some(id)
    }

    /// True when generation should stop at this token.
    pub fn is_eog(&self, token: i32) -> bool {
        unsafe { (self.api.minfer_token_is_eog)(self.as_ptr(), token) != 0 }
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        unsafe { (self.api.minfer_close)(self.as_ptr()) }
    }
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model").field("architecture", &self.architecture()).field("name", &self.name()).finish()
    }
}
