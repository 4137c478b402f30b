// Context (KV cache and sampler of one conversation), the streaming detokenizer and the text stream.
use std::cell::Cell;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::os::raw::c_char;
use std::ptr::{self, NonNull};

use crate::error::{check, Result};
use crate::model::Model;
use crate::{cstring, loader, read_string, sys};

/// `Send` but not `Sync`: the marker of a handle used by one thread at a time.
type NotSync = PhantomData<Cell<()>>;

/// The KV cache and sampler state of one sequence. Borrows its model; freed on drop. It may move to
/// another thread but is never shared: the library allows one call at a time per context.
pub struct Context<'model> {
    raw: NonNull<sys::minfer_context>,
    model: &'model Model,
    _not_sync: NotSync,
}

unsafe impl Send for Context<'_> {}

/// Why the last decode says generation should stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// No reason (yet): after a prefill, or a token that ends nothing.
    None,
    /// The last decoded token ends generation (end of sequence or of turn).
    Eog,
    /// The text generated since the last prefill contains a stop string.
    StopString,
    /// Batch sequences: `max_tokens` reached, or the sequence's positions used up.
    Length,
}

/// Sampling settings: the header's `minfer_sampler_params`, filled with the library's defaults by
/// [`SamplerParams::new`]; its fields (`temperature`, `top_k`, `top_p`, `min_p`, `repeat_penalty`,
/// `presence_penalty`, `frequency_penalty`, `penalty_last_n`, `seed`) are reached through `Deref`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplerParams(sys::minfer_sampler_params);

impl SamplerParams {
    /// The library's defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, seed 42, ...).
    pub fn new() -> Result<SamplerParams> {
        let api = loader::api()?;
        // Plain numbers, so all-zero is a valid value; init then writes every field.
        let mut p: sys::minfer_sampler_params = unsafe { std::mem::zeroed() };
        unsafe { (api.minfer_sampler_params_init)(&mut p) };
        Ok(SamplerParams(p))
    }

    /// Greedy decoding (temperature 0): the highest logit, the lowest id on ties.
    pub fn greedy() -> Result<SamplerParams> {
        let mut p = SamplerParams::new()?;
        p.temperature = 0.0;
        Ok(p)
    }
}

impl Deref for SamplerParams {
    type Target = sys::minfer_sampler_params;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for SamplerParams {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl<'model> Context<'model> {
    pub(crate) fn new(model: &'model Model) -> Result<Context<'model>> {
        let api = model.api();
        let mut raw = ptr::null_mut();
        check(api, unsafe { (api.minfer_context_create)(model.as_ptr(), &mut raw) })?;
        let raw = NonNull::new(raw).expect("minfer_context_create returned MINFER_OK and no context");
        Ok(Context { raw, model, _not_sync: PhantomData })
    }

    fn api(&self) -> &'static sys::Api {
        self.model.api()
    }

    pub fn model(&self) -> &'model Model {
        self.model
    }

    /// The context's size in tokens.
    pub fn n_ctx(&self) -> i32 {
        unsafe { (self.api().minfer_context_n_ctx)(self.raw.as_ptr()) }
    }

    /// Tokens in the KV cache.
    pub fn n_past(&self) -> i32 {
        unsafe { (self.api().minfer_context_n_past)(self.raw.as_ptr()) }
    }

    /// Appends tokens and computes the logits of the last one. On any error the context is unchanged
    /// ([`Code::ContextFull`](crate::Code) when they do not fit).
    pub fn prefill(&mut self, tokens: &[i32]) -> Result<()> {
        check(self.api(), unsafe { (self.api().minfer_prefill)(self.raw.as_ptr(), tokens.as_ptr(), tokens.len()) })
    }

    /// Samples the next token, appends it and computes the logits that follow it.
    pub fn decode(&mut self) -> Result<i32> {
        let mut token = -1;
        check(self.api(), unsafe { (self.api().minfer_decode)(self.raw.as_ptr(), &mut token) })?;
        Ok(token)
    }

    /// The logits of the last processed position (n_vocab floats).
    pub fn logits(&mut self) -> Result<Vec<f32>> {
        let mut out = vec![0f32; self.model.n_vocab().max(0) as usize];
        check(self.api(), unsafe {
            (self.api().minfer_context_logits)(self.raw.as_ptr(), out.as_mut_ptr(), out.len())
        })?;
        Ok(out)
    }

    /// Empties the KV cache.
    pub fn reset(&mut self) -> Result<()> {
        check(self.api(), unsafe { (self.api().minfer_context_reset)(self.raw.as_ptr()) })
    }

    /// Keeps the first `n_keep` tokens of the KV cache.
    pub fn truncate(&mut self, n_keep: i32) -> Result<()> {
        check(self.api(), unsafe { (self.api().minfer_context_truncate)(self.raw.as_ptr(), n_keep) })
    }

    /// Validates and applies sampling settings (and reseeds); an invalid field changes nothing.
    pub fn set_sampler(&mut self, params: &SamplerParams) -> Result<()> {
        let mut raw = params.0;
        raw.size = std::mem::size_of::<sys::minfer_sampler_params>() as u32;
        check(self.api(), unsafe { (self.api().minfer_context_set_sampler)(self.raw.as_ptr(), &raw) })
    }

    /// Adds `bias` to the logit of `token` before sampling (`f32::NEG_INFINITY` bans it).
    pub fn set_logit_bias(&mut self, token: i32, bias: f32) -> Result<()> {
        check(self.api(), unsafe { (self.api().minfer_context_set_logit_bias)(self.raw.as_ptr(), token, bias) })
    }

    pub fn clear_logit_bias(&mut self) -> Result<()> {
        check(self.api(), unsafe { (self.api().minfer_context_clear_logit_bias)(self.raw.as_ptr()) })
    }

    /// Replaces the stop strings; an empty slice clears them.
    pub fn set_stop_strings(&mut self, stops: &[&str]) -> Result<()> {
        let owned = stops.iter().map(|s| cstring(s)).collect::<Result<Vec<_>>>()?;
        let ptrs: Vec<*const c_char> = owned.iter().map(|s| s.as_ptr()).collect();
        check(self.api(), unsafe {
            (self.api().minfer_context_set_stop_strings)(self.raw.as_ptr(), ptrs.as_ptr(), ptrs.len())
        })
    }

    /// Why the last decode says generation should stop.
    pub fn stop_reason(&self) -> StopReason {
        match unsafe { (self.api().minfer_context_stop_reason)(self.raw.as_ptr()) } {
            sys::MINFER_STOP_EOG => StopReason::Eog,
            sys::MINFER_STOP_STRING => StopReason::StopString,
            sys::MINFER_STOP_LENGTH => StopReason::Length,
            _ => StopReason::None,
        }
    }

    /// Decodes up to `max_tokens` tokens after a prefill, as an iterator of text pieces, each whole
    /// UTF-8 characters. It ends early at an end-of-generation token (whose text is not yielded) or
    /// after the piece that completes a stop string; an error is yielded once and ends it.
    pub fn generate(&mut self, max_tokens: usize) -> Result<TextStream<'_, 'model>> {
        let detokenizer = self.model.detokenizer()?;
        Ok(TextStream {
            ctx: self,
            detokenizer,
            left: max_tokens,
            tokens: Vec::new(),
            reason: StopReason::None,
            done: false,
        })
    }
}

impl Drop for Context<'_> {
    fn drop(&mut self) {
        unsafe { (self.api().minfer_context_free)(self.raw.as_ptr()) }
    }
}

/// Turns tokens into text one at a time, holding back the bytes of a UTF-8 character split over
/// several tokens until it is complete. The concatenation of every push and the final flush equals
/// [`Model::detokenize`] of the same tokens.
pub struct Detokenizer {
    raw: NonNull<sys::minfer_detokenizer>,
    api: &'static sys::Api,
    _not_sync: NotSync,
}

unsafe impl Send for Detokenizer {}

impl Detokenizer {
    pub(crate) fn new(model: &Model) -> Result<Detokenizer> {
        let api = model.api();
        let mut raw = ptr::null_mut();
        check(api, unsafe { (api.minfer_detokenizer_create)(model.as_ptr(), &mut raw) })?;
        let raw = NonNull::new(raw).expect("minfer_detokenizer_create returned MINFER_OK and nothing");
        Ok(Detokenizer { raw, api, _not_sync: PhantomData })
    }

    /// Appends a token; returns the text that became complete (possibly "").
    pub fn push(&mut self, token: i32) -> Result<String> {
        let (api, raw) = (self.api, self.raw.as_ptr());
        read_string(api, |buf, cap, len| unsafe { (api.minfer_detokenizer_push)(raw, token, buf, cap, len) })
    }

    /// Returns what is still held (an incomplete character becomes U+FFFD) and starts over.
    pub fn flush(&mut self) -> Result<String> {
        let (api, raw) = (self.api, self.raw.as_ptr());
        read_string(api, |buf, cap, len| unsafe { (api.minfer_detokenizer_flush)(raw, buf, cap, len) })
    }
}

impl Drop for Detokenizer {
    fn drop(&mut self) {
        unsafe { (self.api.minfer_detokenizer_free)(self.raw.as_ptr()) }
    }
}

/// The iterator of [`Context::generate`].
pub struct TextStream<'ctx, 'model> {
    ctx: &'ctx mut Context<'model>,
    detokenizer: Detokenizer,
    left: usize,
    tokens: Vec<i32>,
    reason: StopReason,
    done: bool,
}

impl TextStream<'_, '_> {
    /// The tokens whose text was yielded so far (an end-of-generation token is not among them).
    pub fn tokens(&self) -> &[i32] {
        &self.tokens
    }

    /// Why the stream ended: `Eog`, `StopString`, or `None` (the token limit, or an error).
    pub fn stop_reason(&self) -> StopReason {
        self.reason
    }

    /// The held-back bytes at the end, and the stream is over.
    fn finish(&mut self) -> Option<Result<String>> {
        self.done = true;
        match self.detokenizer.flush() {
            Ok(text) if text.is_empty() => None,
            other => Some(other),
        }
    }
}

impl Iterator for TextStream<'_, '_> {
    type Item = Result<String>;

    fn next(&mut self) -> Option<Result<String>> {
        while !self.done {
            if self.left == 0 {
                return self.finish();
            }
            self.left -= 1;
            let token = match self.ctx.decode() {
                Ok(token) => token,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            };
            self.reason = self.ctx.stop_reason();
            if self.reason == StopReason::Eog {
                return self.finish();
            }
            self.tokens.push(token);
            if self.reason == StopReason::StopString {
                self.left = 0;
            }
            match self.detokenizer.push(token) {
                Ok(text) if text.is_empty() => continue,
                Ok(text) => return Some(Ok(text)),
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
        None
    }
}
