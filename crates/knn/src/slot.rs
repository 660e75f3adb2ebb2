//! A place on a tree for what a search derives from it once and keeps:
//! the tree's copy on the GPU. Type-erased, so that the tree, below every
//! search, names none of them.

use std::any::Any;
use std::fmt;
use std::sync::{Arc, Mutex};

use spillway_core::Result;

/// What is kept, made on first use. Not part of the tree's value: a clone
/// starts empty, and trees compare equal whatever their slots hold.
#[derive(Default)]
pub(crate) struct Slot(Mutex<Option<Arc<dyn Any + Send + Sync>>>);

impl Slot {
    /// What the slot holds if it is a `T`, else `make()`'s, kept.
    pub(crate) fn get_or_make<T: Any + Send + Sync>(
        &self,
        make: impl FnOnce() -> Result<T>,
    ) -> Result<Arc<T>> {
        let mut slot = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(held) = slot.as_ref() {
            if let Ok(kept) = Arc::clone(held).downcast::<T>() {
                return Ok(kept);
            }
        }
        let made = Arc::new(make()?);
        *slot = Some(Arc::clone(&made) as Arc<dyn Any + Send + Sync>);
        Ok(made)
    }
}

impl Clone for Slot {
    fn clone(&self) -> Self {
        Slot::default()
    }
}

impl PartialEq for Slot {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl fmt::Debug for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let held = self.0.lock().map(|slot| slot.is_some()).unwrap_or(false);
        f.write_str(if held { "Slot(held)" } else { "Slot(empty)" })
    }
}
