// Batches: many sequences of one model in each forward pass (continuous batching), with an iterator of
// pieces per sequence.
use std::collections::{HashMap, VecDeque};
use std::os::raw::c_char;
use std::ptr::{self, NonNull};

use crate::context::{SamplerParams, StopReason};
use crate::error::{check, Code, Error, Result};
use crate::model::Model;
use crate::{cstring, sys};

/// The size of a [`Batch`]: the header's `minfer_batch_params`, filled with the library's defaults by
/// [`BatchParams::new`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchParams {
    /// Sequences in one forward pass at once (default 64).
    pub max_sequences: i32,
    /// Sequences waiting for a place; [`Batch::add`] beyond fails with [`Code::Busy`] (default 256).
    pub max_queue: i32,
    /// Tokens per forward pass, at least `max_sequences` (default 512).
    pub max_step_tokens: i32,
    /// The most positions of one sequence; 0: the model's ctx_len option.
    pub n_ctx: i32,
    /// Positions of the KV pool the sequences share; 0: max(n_ctx, 256 * max_sequences).
    pub kv_tokens: i64,
}

impl BatchParams {
    pub fn new() -> Result<BatchParams> {
        let api = crate::loader::api()?;
        let mut p: sys::minfer_batch_params = unsafe { std::mem::zeroed() };
        unsafe { (api.minfer_batch_params_init)(&mut p) };
        Ok(BatchParams {
            max_sequences: p.max_sequences,
            max_queue: p.max_queue,
            max_step_tokens: p.max_step_tokens,
            n_ctx: p.n_ctx,
            kv_tokens: p.kv_tokens,
        })
    }
}

/// One request of a batch.
#[derive(Debug, Clone, Default)]
pub struct SequenceParams<'a> {
    pub prompt: &'a [i32],
    /// New tokens at most; 0: until the sequence's positions are used up.
    pub max_tokens: i32,
    /// `None`: greedy.
    pub sampler: Option<SamplerParams>,
    /// The text ends before the first of them.
    pub stops: &'a [&'a str],
}

/// A new token of a sequence and the text it completes (whole UTF-8 characters; text that may start a
/// stop string comes with a later piece).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub token: i32,
    pub text: String,
}

/// How a sequence ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// Finished: `StopReason::Eog`, `StopReason::StopString` or `StopReason::Length`.
    Stopped(StopReason),
    /// Ended early: cancelled, out of KV memory, a failed forward pass.
    Failed(Error),
}

/// A snapshot of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchStats {
    pub active: i32,
    pub queued: i32,
    pub last_step_tokens: i32,
    pub last_step_sequences: i32,
    pub kv_pages: i32,
    pub kv_pages_free: i32,
    pub steps: u64,
    pub tokens_generated: u64,
}

#[derive(Default)]
struct SeqState {
    pieces: VecDeque<Piece>,
    finish: Option<Finish>,
}

/// Many sequences of one model served together: each [`Batch::step`] runs one forward pass over every
/// active sequence. Borrows its model; freed on drop. `Send`, not `Sync` (wrap it in a `Mutex` to add
/// from several threads).
pub struct Batch<'model> {
    raw: NonNull<sys::minfer_batch>,
    model: &'model Model,
    events: Vec<sys::minfer_batch_event>,
    states: HashMap<u64, SeqState>,
}

unsafe impl Send for Batch<'_> {}

fn stop_reason(raw: sys::minfer_stop_reason) -> StopReason {
    match raw {
        sys::MINFER_STOP_EOG => StopReason::Eog,
        sys::MINFER_STOP_STRING => StopReason::StopString,
        sys::MINFER_STOP_LENGTH => StopReason::Length,
        _ => StopReason::None,
    }
}

impl<'model> Batch<'model> {
    pub fn new(model: &'model Model, params: &BatchParams) -> Result<Batch<'model>> {
        let api = model.api();
        let p = sys::minfer_batch_params {
            size: std::mem::size_of::<sys::minfer_batch_params>() as u32,
            max_sequences: params.max_sequences,
            max_queue: params.max_queue,
            max_step_tokens: params.max_step_tokens,
            n_ctx: params.n_ctx,
            kv_tokens: params.kv_tokens,
        };
        let mut raw = ptr::null_mut();
        check(api, unsafe { (api.minfer_batch_create)(model.as_ptr(), &p, &mut raw) })?;
        let raw = NonNull::new(raw).expect("minfer_batch_create returned MINFER_OK and no batch");
        let cap = 2 * params.max_sequences.max(1) as usize + 16;
        let empty = sys::minfer_batch_event {
            id: 0,
            token: -1,
            finished: 0,
            reason: sys::MINFER_STOP_NONE,
            status: sys::MINFER_OK,
            text: ptr::null(),
            text_len: 0,
            error: ptr::null(),
        };
        Ok(Batch { raw, model, events: vec![empty; cap], states: HashMap::new() })
    }

    fn api(&self) -> &'static sys::Api {
        self.model.api()
    }

    /// Queues a sequence and returns its id. [`Code::Busy`]: the queue is full.
    pub fn add(&mut self, params: &SequenceParams<'_>) -> Result<u64> {
        let stops = params.stops.iter().map(|s| cstring(s)).collect::<Result<Vec<_>>>()?;
        let stop_ptrs: Vec<*const c_char> = stops.iter().map(|s| s.as_ptr()).collect();
        let sampler = params.sampler.map(|s| *s);
        let raw = sys::minfer_sequence_params {
            size: std::mem::size_of::<sys::minfer_sequence_params>() as u32,
            prompt: if params.prompt.is_empty() { ptr::null() } else { params.prompt.as_ptr() },
            n_prompt: params.prompt.len(),
            max_tokens: params.max_tokens,
            sampler: sampler.as_ref().map_or(ptr::null(), |s| s as *const _),
            stops: if stop_ptrs.is_empty() { ptr::null() } else { stop_ptrs.as_ptr() },
            n_stops: stop_ptrs.len(),
        };
        let mut id = 0u64;
        check(self.api(), unsafe { (self.api().minfer_batch_add)(self.raw.as_ptr(), &raw, &mut id) })?;
        self.states.insert(id, SeqState::default());
        Ok(id)
    }

    /// Cancels a sequence; the next step frees it and ends it with [`Code::Cancelled`].
    pub fn cancel(&mut self, id: u64) -> Result<()> {
        check(self.api(), unsafe { (self.api().minfer_batch_cancel)(self.raw.as_ptr(), id) })
    }

    /// Runs one forward pass (waiting up to `wait_ms` when nothing is queued or running) and files its
    /// events under their sequences. Returns the number of events.
    pub fn step(&mut self, wait_ms: i32) -> Result<usize> {
        let mut n = 0usize;
        let api = self.api();
        check(api, unsafe {
            (api.minfer_batch_step)(self.raw.as_ptr(), wait_ms, self.events.as_mut_ptr(), self.events.len(), &mut n)
        })?;
        for e in &self.events[..n] {
            let state = self.states.entry(e.id).or_default();
            let text = if e.text.is_null() {
                String::new()
            } else {
                let bytes = unsafe { std::slice::from_raw_parts(e.text as *const u8, e.text_len) };
                String::from_utf8_lossy(bytes).into_owned()
            };
            if e.token >= 0 || !text.is_empty() {
                state.pieces.push_back(Piece { token: e.token, text });
            }
            if e.finished != 0 {
                state.finish = Some(if e.status == sys::MINFER_OK {
                    Finish::Stopped(stop_reason(e.reason))
                } else {
                    Finish::Failed(Error::new(Code::from_raw(e.status), unsafe { crate::text(e.error) }))
                });
            }
        }
        Ok(n)
    }

    /// The pieces of sequence `id` as an iterator: it steps the batch while the sequence has no piece
    /// waiting (keeping the other sequences' pieces for their own iterators), yields an error once if
    /// the sequence failed, and ends when it finished. [`Batch::finish`] then tells how.
    pub fn pieces(&mut self, id: u64) -> Pieces<'_, 'model> {
        Pieces { batch: self, id, done: false }
    }

    /// How sequence `id` ended, once its pieces were all taken; `None` while it runs. The batch then
    /// forgets it.
    pub fn finish(&mut self, id: u64) -> Option<Finish> {
        let state = self.states.get(&id)?;
        if !state.pieces.is_empty() || state.finish.is_none() {
            return None;
        }
        self.states.remove(&id).and_then(|s| s.finish)
    }

    pub fn stats(&self) -> Result<BatchStats> {
        let mut s: sys::minfer_batch_stats = unsafe { std::mem::zeroed() };
        s.size = std::mem::size_of::<sys::minfer_batch_stats>() as u32;
        check(self.api(), unsafe { (self.api().minfer_batch_stats_get)(self.raw.as_ptr(), &mut s) })?;
        Ok(BatchStats {
            active: s.active,
            queued: s.queued,
            last_step_tokens: s.last_step_tokens,
            last_step_sequences: s.last_step_sequences,
            kv_pages: s.kv_pages,
            kv_pages_free: s.kv_pages_free,
            steps: s.steps,
            tokens_generated: s.tokens_generated,
        })
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        unsafe { (self.api().minfer_batch_free)(self.raw.as_ptr()) };
    }
}

/// The pieces of one sequence of a [`Batch`] (see [`Batch::pieces`]).
pub struct Pieces<'b, 'model> {
    batch: &'b mut Batch<'model>,
    id: u64,
    done: bool,
}

impl Iterator for Pieces<'_, '_> {
    type Item = Result<Piece>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        loop {
            let Some(state) = self.batch.states.get_mut(&self.id) else {
                self.done = true;
                return Some(Err(Error::new(Code::NotFound, format!("batch: no sequence {}", self.id))));
            };
            if let Some(p) = state.pieces.pop_front() {
                return Some(Ok(p));
            }
            match &state.finish {
                Some(Finish::Failed(e)) => {
                    self.done = true;
                    return Some(Err(e.clone()));
                }
                Some(Finish::Stopped(_)) => {
                    self.done = true;
                    return None;
                }
                None => {}
            }
            if let Err(e) = self.batch.step(100) {
                self.done = true;
                return Some(Err(e));
            }
        }
    }
}
